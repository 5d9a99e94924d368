//! Item 5: arguments that nest deeper than `MAX_ARGUMENT_DEPTH` are kept in
//! the transcript as text and refused at admission, so a run's transcript,
//! suspended state and checkpoint always read back with plain serde_json,
//! and the run goes on. Each test takes the model's argument text as a
//! provider reports it (`ModelToolCall::from_text`).

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    core::MAX_ARGUMENT_DEPTH, harness::ResumeOptions, harness::SealedRun, harness::SuspendedRun,
    ledger::EffectLedger, ledger::SqliteLedger, tools::InvalidArgsPolicy,
};
use tinyagents_tests::{assert_transcript_paired, resume_collecting, run_collecting};

use crate::{
    LEAF, Recorder, answer, call_from_text, failed_error, harness, nested_text, nested_value,
    recorded_call, too_deep,
};

const MAX: usize = MAX_ARGUMENT_DEPTH;

/// The depths at the edge that are refused: one past the max, the deepest
/// text serde_json parses (127), and the first two it does not.
const OVER: [usize; 4] = [MAX + 1, 127, 128, 129];

/// Asserts that `messages` serialise and read back, equal, with plain serde.
fn assert_reads_back(messages: &[Message]) {
    let text = serde_json::to_string(messages).unwrap();
    let back: Vec<Message> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, messages);
}

/// Argument texts nesting the max + 1, 127, 128 and 129 levels are each
/// refused with an error naming the depth and the max (never quoting a
/// value), under every invalid-arguments policy (`Fail` included); the
/// model reads the refusal, the turn's other call runs, the run completes,
/// and the transcript keeps the call as its text and reads back.
#[tokio::test]
async fn i11_5_argument_texts_past_the_max_are_refused_naming_the_depth_under_every_policy_and_the_run_goes_on()
 {
    let policies = [
        InvalidArgsPolicy::Fail,
        InvalidArgsPolicy::ReturnToModel,
        InvalidArgsPolicy::NormalizeThenReturn,
    ];
    for policy in policies {
        for depth in OVER {
            let echo = Recorder::new("echo");
            let text = nested_text(depth);
            let harness = harness(
                vec![
                    ChatResponse::tool_calls(vec![
                        call_from_text("c1", "echo", &text),
                        call_from_text("c2", "echo", r#"{"x":1}"#),
                    ]),
                    ChatResponse::text("done"),
                ],
                &[echo.tool()],
                |b| b.invalid_args(policy),
            );
            let (result, events) = run_collecting(&harness, RunRequest::new("go")).await;
            let run = result.unwrap_or_else(|e| panic!("{policy:?}, depth {depth}: {e}"));
            let refusal = too_deep("echo", depth);
            assert_eq!(run.status, RunStatus::Completed, "{policy:?}, {depth}");
            assert_eq!(run.final_text, "done");
            assert_eq!(answer(&run.messages, "p1"), Some((refusal.clone(), true)));
            assert_eq!(failed_error(&events, "p1"), Some(refusal.clone()));
            assert!(!refusal.contains(LEAF));
            assert_eq!(
                answer(&run.messages, "p2"),
                Some(("ran echo".into(), false))
            );
            assert_eq!(echo.seen(), [json!({"x": 1})], "only the shallow call ran");
            let kept = recorded_call(&run.messages, "p1").unwrap();
            assert_eq!(kept.arguments, serde_json::Value::Null);
            assert_eq!(kept.raw_arguments.as_deref(), Some(text.as_str()));
            assert_transcript_paired(&run.messages);
            assert_reads_back(&run.messages);
        }
    }
}

/// Arguments nesting exactly the max are accepted: the tool gets them
/// unchanged, the transcript keeps them as a value, and it reads back.
#[tokio::test]
async fn i11_5_arguments_nesting_exactly_the_max_are_accepted_and_reach_the_tool_unchanged() {
    let echo = Recorder::new("echo");
    let text = nested_text(MAX);
    let harness = harness(
        vec![
            ChatResponse::tool_calls(vec![call_from_text("c1", "echo", &text)]),
            ChatResponse::text("done"),
        ],
        &[echo.tool()],
        |b| b,
    );
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(echo.seen(), [nested_value(MAX)]);
    assert_eq!(
        answer(&run.messages, "p1"),
        Some(("ran echo".into(), false))
    );
    let kept = recorded_call(&run.messages, "p1").unwrap();
    assert_eq!(kept.arguments, nested_value(MAX));
    assert_eq!(kept.raw_arguments, None);
    assert_reads_back(&run.messages);
}

/// A turn of an `echo` call nesting `depth` levels and an approval-required
/// `deploy` whose arguments nest the max: the run waits for `deploy`.
fn deep_turn(depth: usize) -> ChatResponse {
    ChatResponse::tool_calls(vec![
        call_from_text("c1", "echo", &nested_text(depth)),
        call_from_text("c2", "deploy", &nested_text(MAX)),
    ])
}

/// What `echo` (`p1`) should have answered for arguments of `depth`.
fn echo_answer(depth: usize) -> (String, bool) {
    if depth <= MAX {
        ("ran echo".into(), false)
    } else {
        (too_deep("echo", depth), true)
    }
}

/// A run suspended for approval with a deep call in its transcript (the
/// max, the max + 1, 127, 128, 129 levels) and a pending call whose
/// arguments nest the max: its `SuspendedRun` goes through
/// `serde_json::to_string` and plain `serde_json::from_str` (and through
/// sealing) unchanged, and resumes to completion, the approved call
/// getting its arguments unchanged.
#[tokio::test]
async fn i11_5_a_run_suspended_with_deep_arguments_reads_back_with_plain_serde_and_resumes() {
    for depth in [MAX, MAX + 1, 127, 128, 129] {
        let echo = Recorder::new("echo");
        let deploy = Recorder::gated("deploy");
        let harness = harness(
            vec![deep_turn(depth), ChatResponse::text("done")],
            &[echo.tool(), deploy.tool()],
            |b| b,
        );
        let first = harness.run("go").await.unwrap();
        assert_eq!(first.status, RunStatus::AwaitingApproval, "depth {depth}");
        let suspended = first.suspended.clone().unwrap();

        let stored = serde_json::to_string(&suspended).unwrap();
        let read: SuspendedRun = serde_json::from_str(&stored)
            .unwrap_or_else(|e| panic!("depth {depth}: the suspended run reads back: {e}"));
        assert_eq!(read, suspended);
        let key = [3u8; 32];
        let sealed: SealedRun =
            serde_json::from_str(&serde_json::to_string(&read.seal(&key).unwrap()).unwrap())
                .unwrap();
        assert_eq!(sealed.open(&key).unwrap(), suspended);

        let pending: Vec<_> = read.pending().collect();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].call.name, "deploy");
        assert_eq!(pending[0].call.arguments, nested_value(MAX));
        let decision = pending[0].approve();
        let (resumed, _) = resume_collecting(&harness, read, &[decision]).await;
        let resumed = resumed.unwrap();
        assert_eq!(resumed.status, RunStatus::Completed, "depth {depth}");
        assert_eq!(resumed.final_text, "done");
        assert_eq!(deploy.seen(), [nested_value(MAX)]);
        assert_eq!(answer(&resumed.messages, "p1"), Some(echo_answer(depth)));
        let echoed = if depth <= MAX {
            vec![nested_value(MAX)]
        } else {
            vec![]
        };
        assert_eq!(echo.seen(), echoed);
        assert_transcript_paired(&resumed.messages);
        assert_reads_back(&resumed.messages);
    }
}

/// With an SQLite ledger, the checkpoint of a run with a deep call in its
/// transcript (the max, the max + 1, 127, 128, 129 levels) loads and reads
/// back with plain serde; `recover` re-admits the turn (the deep call is
/// refused again, a call that ran is answered from its row and does not
/// run again), waits for the approval again, and the run then completes.
#[tokio::test]
async fn i11_5_with_an_sqlite_ledger_a_deep_argument_runs_checkpoint_loads_and_recover_works() {
    for depth in [MAX, MAX + 1, 127, 128, 129] {
        let dir = tempfile::tempdir().unwrap();
        let ledger: Arc<dyn EffectLedger> = Arc::new(
            SqliteLedger::open(dir.path().join("ledger.db"))
                .await
                .unwrap(),
        );
        let echo = Recorder::new("echo");
        let deploy = Recorder::gated("deploy");
        let tools = [echo.tool(), deploy.tool()];
        let with_ledger =
            |b: tinyagents::harness::AgentHarnessBuilder| b.ledger(Arc::clone(&ledger));
        let first = harness(vec![deep_turn(depth)], &tools, with_ledger)
            .run("go")
            .await
            .unwrap();
        assert_eq!(first.status, RunStatus::AwaitingApproval, "depth {depth}");

        let checkpoint = ledger.load_checkpoint(&first.run_id).await.unwrap();
        let checkpoint = checkpoint.expect("the turn was checkpointed");
        let saved: SuspendedRun = serde_json::from_slice(&checkpoint.data)
            .unwrap_or_else(|e| panic!("depth {depth}: the checkpoint reads back: {e}"));
        let kept = recorded_call(&saved.state.messages, "p1").unwrap();
        if depth <= MAX {
            assert_eq!(kept.arguments, nested_value(MAX));
        } else {
            assert_eq!(kept.raw_arguments, Some(nested_text(depth)));
        }

        // A new harness on the same ledger, as after a restart.
        let second = harness(vec![ChatResponse::text("done")], &tools, with_ledger);
        let recovered = second
            .recover(&first.run_id, ResumeOptions::default(), &EventSink::none())
            .await
            .unwrap_or_else(|e| panic!("depth {depth}: recover: {e}"));
        assert_eq!(recovered.status, RunStatus::AwaitingApproval);
        let suspended = recovered.suspended.unwrap();
        let stored = serde_json::to_string(&suspended).unwrap();
        assert_eq!(
            serde_json::from_str::<SuspendedRun>(&stored).unwrap(),
            suspended
        );
        let decision = suspended.pending().next().unwrap().approve();
        let (resumed, _) = resume_collecting(&second, suspended, &[decision]).await;
        let resumed = resumed.unwrap();
        assert_eq!(resumed.status, RunStatus::Completed, "depth {depth}");
        assert_eq!(answer(&resumed.messages, "p1"), Some(echo_answer(depth)));
        assert_eq!(deploy.seen(), [nested_value(MAX)]);
        assert_eq!(
            echo.seen().len(),
            usize::from(depth <= MAX),
            "runs once at most"
        );
        assert_transcript_paired(&resumed.messages);
    }
}

/// `relay`: calls `echo` through the harness with arguments nesting
/// `levels`, and answers with the refusal's text (or `echo`'s answer).
fn relay(levels: usize) -> Arc<dyn tinyagents::Tool> {
    let tool = tinyagents::FnTool::with_context(
        "relay",
        "Relays.",
        move |_: serde_json::Value, context: tinyagents::tools::ToolRunContext| async move {
            let harness = tinyagents::harness::ToolExecutionContext::from_run_context(&context);
            anyhow::Ok(
                match harness.call_tool("echo", nested_value(levels)).await {
                    Ok(result) => result,
                    Err(refused) => ToolResult::error(refused.to_string()),
                },
            )
        },
    );
    Arc::new(tool)
}

/// Past the max is refused whatever made the arguments: a tool's nested
/// call (max + 1 levels, as a value) gets the error naming the depth, and
/// so does a model's call whose arguments `NormalizeThenReturn` unwraps
/// from a string into an object nesting 125 levels (text that itself nests
/// 0, being a string); a nested call at the max runs.
#[tokio::test]
async fn i11_5_nested_arguments_and_arguments_unwrapped_by_normalisation_past_the_max_are_refused_too()
 {
    for (levels, expected) in [
        (
            MAX + 1,
            // The argument error names the tool once.
            (too_deep("echo", MAX + 1), true),
        ),
        (MAX, ("ran echo".to_owned(), false)),
    ] {
        let echo = Recorder::new("echo");
        let harness = harness(
            vec![
                ChatResponse::tool_calls(vec![call_from_text("c1", "relay", "{}")]),
                ChatResponse::text("done"),
            ],
            &[echo.tool(), relay(levels)],
            |b| b.limits(RunLimits::default().with_max_nested_depth(1)),
        );
        let run = harness.run("go").await.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(
            answer(&run.messages, "p1"),
            Some(expected.clone()),
            "{levels}"
        );
        assert_eq!(echo.seen().len(), usize::from(!expected.1));
    }

    let echo = Recorder::new("echo");
    let wrapped = serde_json::to_string(&nested_text(125)).unwrap();
    let harness = harness(
        vec![
            ChatResponse::tool_calls(vec![call_from_text("c1", "echo", &wrapped)]),
            ChatResponse::text("done"),
        ],
        &[echo.tool()],
        |b| b.invalid_args(InvalidArgsPolicy::NormalizeThenReturn),
    );
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        answer(&run.messages, "p1"),
        Some((too_deep("echo", 125), true))
    );
    assert!(echo.seen().is_empty());
    assert_reads_back(&run.messages);
}
