//! The effect ledger through the harness: started and settled rows for
//! model-issued and nested calls, `LedgerFailure`, recovery of a run whose
//! process died mid-tool, and resuming a deferred state twice.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::RunId, core::ToolReplay, core::args_hash, harness::ResumeOptions,
    harness::ToolExecutionContext, ledger::CallStatus, ledger::EffectLedger, ledger::LedgerFailure,
    ledger::MemoryLedger, ledger::StartedRow, middleware::HumanApprovalMiddleware, tools,
};
use tinyagents_tests::*;

fn harness_with(
    model: Vec<ChatResponse>,
    ledger: Arc<dyn EffectLedger>,
    tools: Vec<Arc<dyn Tool>>,
    configure: impl FnOnce(
        tinyagents::harness::AgentHarnessBuilder,
    ) -> tinyagents::harness::AgentHarnessBuilder,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
        .ledger(ledger)
        .limits(RunLimits::default().with_max_nested_depth(2));
    for tool in tools {
        builder.register(tool).unwrap();
    }
    configure(builder).build().unwrap()
}

/// Runs until `started` fires, then drops the run: the process "died"
/// while the tool ran.
async fn crash_when(harness: &AgentHarness, run_id: &str, started: &tokio::sync::Notify) {
    let events = EventSink::none();
    let run = harness.run_with(
        RunRequest::new("go").with_run_id(RunId::from(run_id)),
        &events,
    );
    tokio::select! {
        _ = run => panic!("the run was meant to crash while its tool ran"),
        () = started.notified() => {}
    }
}

#[tokio::test]
async fn every_model_issued_call_gets_a_started_and_a_settled_row() {
    let ledger = Arc::new(MemoryLedger::new());
    let model = vec![
        ScriptedModel::tool_calls([
            ("add", json!({"a": 1, "b": 1})),
            ("add", json!({"a": 2, "b": 2})),
        ]),
        ChatResponse::text("done"),
    ];
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
        .ledger(ledger.clone())
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness
        .run_with(
            RunRequest::new("go").with_run_id(RunId::from("r1")),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let rows = ledger.rows(&RunId::from("r1")).await.unwrap();
    let summary: Vec<(String, CallStatus, String)> = rows
        .iter()
        .map(|r| {
            (
                r.call_id.to_string(),
                r.status,
                r.result.as_ref().unwrap().content.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("p1".into(), CallStatus::Completed, "2".into()),
            ("p2".into(), CallStatus::Completed, "4".into())
        ]
    );
    assert_eq!(rows[0].args_hash, args_hash(&json!({"a": 1, "b": 1})));
    assert_eq!(rows[0].replay, ToolReplay::Safe);
    assert!(
        ledger
            .unresolved(&RunId::from("r1"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !ledger
            .unfinished_runs()
            .await
            .unwrap()
            .contains(&RunId::from("r1")),
        "a completed run is marked finished"
    );
}

#[tokio::test]
async fn abort_refuses_a_call_whose_started_row_cannot_be_written() {
    let ledger = Arc::new(MemoryLedger::new());
    ledger.refuse_started(true);
    let probe = ProbeTool::new("pay", false, Behaviour::Yield(0));
    let model = vec![turn(&[probe_call("pay", "a")]), ChatResponse::text("done")];
    let harness = harness_with(model, ledger, vec![probe.clone()], |b| b);
    let run = harness.run("go").await.unwrap();
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(is_error);
    assert!(
        content
            .starts_with("refused: the effect ledger could not record the call, so it was not run"),
        "{content}"
    );
    assert_eq!(
        probe.calls.load(Ordering::SeqCst),
        0,
        "fail closed: the tool never ran"
    );
}

#[tokio::test]
async fn continue_runs_the_call_and_warns_when_the_started_row_fails() {
    let ledger = Arc::new(MemoryLedger::new());
    ledger.refuse_started(true);
    let probe = ProbeTool::new("pay", false, Behaviour::Yield(0));
    let model = vec![turn(&[probe_call("pay", "a")]), ChatResponse::text("done")];
    let harness = harness_with(model, ledger, vec![probe.clone()], |b| {
        b.ledger_failure(LedgerFailure::Continue)
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(tool_results(&run.unwrap().messages)[0].1, "ok a");
    assert_eq!(probe.calls.load(Ordering::SeqCst), 1);
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Warning { message } if message.contains("without a started row"))));
}

#[tokio::test]
async fn recovery_answers_settled_calls_refuses_never_calls_and_reruns_safe_ones() {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let add = ProbeTool::new("lookup", true, Behaviour::Yield(0))
        .with_spec(|s| s.replay(ToolReplay::Safe));
    let fetch = ProbeTool::new("fetch", false, Behaviour::BlockOnce(started.clone()))
        .with_spec(|s| s.replay(ToolReplay::Safe));
    let model = vec![
        turn(&[probe_call("lookup", "a"), probe_call("fetch", "f")]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness_with(
        model,
        ledger.clone(),
        vec![add.clone(), fetch.clone()],
        |b| b,
    );
    crash_when(&first, "crashed-safe", &started).await;

    let run_id = RunId::from("crashed-safe");
    let in_doubt: Vec<String> = ledger
        .unresolved(&run_id)
        .await
        .unwrap()
        .iter()
        .map(|r| r.call_id.to_string())
        .collect();
    assert_eq!(
        in_doubt,
        ["p2"],
        "the lookup settled before the crash; the fetch is in doubt"
    );

    // A new process: a new harness over the same ledger.
    let second = harness_with(
        vec![ChatResponse::text("recovered")],
        ledger.clone(),
        vec![add.clone(), fetch.clone()],
        |b| b,
    );
    let run = second
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "recovered");
    assert_transcript_paired(&run.messages);
    let results = tool_results(&run.messages);
    assert_eq!(
        results[0].1, "ok a",
        "the settled call is answered from its row"
    );
    assert_eq!(
        results[1].1, "ok f",
        "the replay-safe call in doubt ran again"
    );
    assert_eq!(
        add.calls.load(Ordering::SeqCst),
        1,
        "a settled call never runs twice"
    );
    assert_eq!(fetch.calls.load(Ordering::SeqCst), 2);
    let row = ledger
        .get(&run_id, &tinyagents::core::CallId::new("p2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.status, row.attempts), (CallStatus::Completed, 2));
}

#[tokio::test]
async fn recovery_gives_a_never_replay_call_in_doubt_an_interrupted_result() {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let pay = ProbeTool::new("pay", false, Behaviour::BlockOnce(started.clone()));
    assert_eq!(
        pay.spec().replay,
        ToolReplay::Never,
        "the default replay class"
    );
    let model = vec![
        turn(&[probe_call("pay", "p")]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness_with(model, ledger.clone(), vec![pay.clone()], |b| b);
    crash_when(&first, "crashed-pay", &started).await;

    let second = harness_with(
        vec![ChatResponse::text("told the user")],
        ledger.clone(),
        vec![pay.clone()],
        |b| b,
    );
    let run_id = RunId::from("crashed-pay");
    let run = second
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_transcript_paired(&run.messages);
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(
        *is_error && content.starts_with("interrupted, outcome unknown"),
        "{content}"
    );
    assert_eq!(
        pay.calls.load(Ordering::SeqCst),
        1,
        "the payment was not repeated"
    );
    let row = ledger
        .get(&run_id, &tinyagents::core::CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, CallStatus::Interrupted);
    // Its effect is still unknown: the finished run stays in view.
    assert!(ledger.unfinished_runs().await.unwrap().contains(&run_id));
    // Recovering the finished run again is refused, naming the call in
    // doubt: its model is not asked again and nothing runs.
    let third_model = Arc::new(ScriptedModel::new(vec![ChatResponse::text("again")]));
    let mut builder = AgentHarness::builder(third_model.clone()).ledger(ledger.clone());
    builder.register(pay.clone()).unwrap();
    let third = builder.build().unwrap();
    let refused = third
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("run crashed-pay has finished, so there is nothing to recover")
            && refused.contains("p1 (pay, interrupted)"),
        "{refused}"
    );
    assert_eq!(third_model.calls(), 0, "the model was not asked again");
    assert_eq!(pay.calls.load(Ordering::SeqCst), 1);
}

/// Issue 11 item 2b: a new run under the id of a run the ledger holds (here
/// a finished run whose `echo` call answered with payroll data) is refused
/// with a clear error; it is never answered from the old run's rows, and
/// nothing runs.
#[tokio::test]
async fn i11_2b_a_new_run_under_an_existing_run_id_is_refused_not_answered_from_its_rows() {
    let ledger = Arc::new(MemoryLedger::new());
    let echo = ProbeTool::new(
        "echo",
        false,
        Behaviour::Return(ToolResult::text("SECRET-PAYROLL-DATA")),
    );
    let first = harness_with(
        vec![turn(&[probe_call("echo", "x")]), ChatResponse::text("done")],
        ledger.clone(),
        vec![echo.clone()],
        |b| b,
    );
    let request = || RunRequest::new("go").with_run_id(RunId::from("payroll"));
    first.run_with(request(), &EventSink::none()).await.unwrap();
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);

    let second = harness_with(
        vec![turn(&[probe_call("echo", "x")]), ChatResponse::text("done")],
        ledger.clone(),
        vec![echo.clone()],
        |b| b,
    );
    let error = second
        .run_with(request(), &EventSink::none())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "state error: run payroll already exists in the effect ledger: a new run needs a new id; resume or recover it instead"
    );
    assert!(
        matches!(&error, TinyAgentsError::Ledger { source } if matches!(
            source.downcast_ref::<tinyagents::ledger::LedgerError>(),
            Some(tinyagents::ledger::LedgerError::RunExists { .. })
        )),
        "{error:?}"
    );
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1, "nothing ran again");
    // An unfinished run's id is refused too.
    let open = RunId::from("seeded");
    ledger
        .record_started(StartedRow::new(
            open.clone(),
            tinyagents::core::CallId::new("p1"),
            "add",
            args_hash(&json!({"a": 9, "b": 9})),
            ToolReplay::Safe,
        ))
        .await
        .unwrap();
    let error = second
        .run_with(RunRequest::new("go").with_run_id(open), &EventSink::none())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("state error: run seeded already exists"),
        "{error:?}"
    );
}

#[tokio::test]
async fn resuming_the_same_deferred_state_twice_runs_the_approved_call_once_and_refuses_the_second()
{
    let ledger = Arc::new(MemoryLedger::new());
    let pay = ProbeTool::new("pay", false, Behaviour::Yield(0));
    let build = |responses: Vec<ChatResponse>| {
        harness_with(responses, ledger.clone(), vec![pay.clone()], |b| {
            b.middleware(Arc::new(HumanApprovalMiddleware::new().require("pay")))
        })
    };
    let first = build(vec![
        turn(&[probe_call("pay", "once")]),
        ChatResponse::text("done"),
    ]);
    let suspended = first
        .run("go")
        .await
        .unwrap()
        .suspended
        .expect("waits for approval");
    let approve: Vec<_> = suspended.pending().map(|p| p.approve()).collect();
    let stored = serde_json::to_string(&suspended).unwrap();

    let resumed = build(vec![ChatResponse::text("paid")])
        .resume(
            serde_json::from_str(&stored).unwrap(),
            &approve,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.final_text, "paid");
    let again = build(vec![ChatResponse::text("paid again?")])
        .resume(
            serde_json::from_str(&stored).unwrap(),
            &approve,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&again, TinyAgentsError::State(t) if t.ends_with("has finished: this suspended state of it was resumed before, and an approval is used once")),
        "the ledger records that the state was used: {again:?}"
    );
    assert_eq!(
        pay.calls.load(Ordering::SeqCst),
        1,
        "the approved call ran exactly once"
    );
}

#[tokio::test]
async fn a_tool_receives_its_calls_idempotency_key() {
    let ledger = Arc::new(MemoryLedger::new());
    let seen = Arc::new(std::sync::Mutex::new(None));
    let seen_in_tool = seen.clone();
    let tool = FnTool::with_context(
        "charge",
        "Charges.",
        move |args: AddArgs, ctx: ToolRunContext| {
            let seen = seen_in_tool.clone();
            async move {
                *seen.lock().unwrap() = ctx.idempotency_key().cloned();
                anyhow::Ok(format!("{}", args.a + args.b))
            }
        },
    );
    let model = vec![
        ScriptedModel::tool_call("charge", json!({"a": 1, "b": 2})),
        ChatResponse::text("done"),
    ];
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
        .ledger(ledger.clone())
        .tool(tool)
        .build()
        .unwrap();
    harness
        .run_with(
            RunRequest::new("go").with_run_id(RunId::from("idem")),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let key = seen.lock().unwrap().clone().expect("a key");
    let row = ledger
        .get(&RunId::from("idem"), &tinyagents::core::CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((key.run_id.as_str(), key.call_id.as_str()), ("idem", "p1"));
    assert_eq!(key.args_hash, row.args_hash);
}

// ---- nested calls (NT-20, NT-43, NT-44) ----

/// A tool that calls `target` with `args` through the harness and reports
/// what came back (or the refusal).
struct Caller {
    spec: ToolSpec,
    target: &'static str,
    args: Value,
    wait_ms: Option<u64>,
    /// The tool its later runs call instead of `target` (a re-run that
    /// makes a different nested call).
    then: Option<&'static str>,
    /// Notified, then never ends, after its first run's nested call: the
    /// process dies while the parent runs.
    block_once: Option<Arc<tokio::sync::Notify>>,
    runs: std::sync::atomic::AtomicUsize,
}

impl Caller {
    fn new(target: &'static str, args: Value) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::new("caller", "Calls another tool.", json!({"type": "object"})),
            target,
            args,
            wait_ms: None,
            then: None,
            block_once: None,
            runs: Default::default(),
        })
    }

    /// A replay-safe caller whose first run blocks after its nested call,
    /// and whose later runs call `then` (or `target` again).
    fn replayed(
        target: &'static str,
        then: Option<&'static str>,
        args: Value,
        block_once: Option<Arc<tokio::sync::Notify>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::new("caller", "Calls another tool.", json!({"type": "object"}))
                .replay(ToolReplay::Safe),
            target,
            args,
            wait_ms: None,
            then,
            block_once,
            runs: Default::default(),
        })
    }
}

#[async_trait]
impl Tool for Caller {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let harness = context
            .and_then(tools::ToolRunContext::host_extension)
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .expect("installed by the agent loop");
        let first = self.runs.fetch_add(1, Ordering::SeqCst) == 0;
        let target = match self.then {
            Some(then) if !first => then,
            _ => self.target,
        };
        let call = harness.call_tool(target, self.args.clone());
        let answer = match self.wait_ms {
            Some(ms) => {
                match tokio::time::timeout(std::time::Duration::from_millis(ms), call).await {
                    Ok(answer) => answer,
                    Err(_) => return Ok(ToolResult::text("stopped waiting")),
                }
            }
            None => call.await,
        };
        if let (true, Some(started)) = (first, &self.block_once) {
            started.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(match answer {
            Ok(result) => ToolResult::text(format!("nested said {}", result.content)),
            Err(error) => ToolResult::text(format!("nested refused: {error}")),
        })
    }
}

/// A ledger that refuses the started rows of nested calls only.
fn nested_rows_fail() -> HookedLedger {
    HookedLedger::new(|write| match write {
        LedgerWrite::Started(row) if row.call_id.is_nested() => {
            Verdict::Fail(tinyagents::ledger::LedgerError::Closed {
                detail: "disk on fire".into(),
            })
        }
        _ => Verdict::Pass,
    })
}

/// Runs one model-issued `caller` call (which makes its nested call) under
/// `ledger`.
async fn run_caller(
    ledger: Arc<dyn EffectLedger>,
    tools: Vec<Arc<dyn Tool>>,
    run_id: &str,
) -> AgentRun {
    let model = vec![
        ScriptedModel::tool_call("caller", json!({})),
        ChatResponse::text("done"),
    ];
    harness_with(model, ledger, tools, |b| b)
        .run_with(
            RunRequest::new("go").with_run_id(RunId::from(run_id)),
            &EventSink::none(),
        )
        .await
        .unwrap()
}

fn add() -> Arc<dyn Tool> {
    Arc::new(add_tool())
}

/// rule NT-20: one started/settled row per nested call, keyed by the nested id.
#[tokio::test]
async fn nt_20_each_nested_call_gets_its_own_row_keyed_by_its_id() {
    let ledger = Arc::new(MemoryLedger::new());
    let caller = Caller::new("add", json!({"a": 20, "b": 1}));
    run_caller(ledger.clone(), vec![add(), caller], "n1").await;
    let rows = ledger.rows(&RunId::from("n1")).await.unwrap();
    let nested = rows
        .iter()
        .find(|r| r.call_id.as_str() == "p1/1")
        .expect("a row for p1/1");
    assert_eq!(
        nested.parent_call_id.as_ref().map(|p| p.as_str()),
        Some("p1")
    );
    assert_eq!(
        (nested.status, nested.tool_name.as_str()),
        (CallStatus::Completed, "add")
    );
    assert_eq!(nested.result.as_ref().unwrap().content, "21");
    assert_eq!(nested.args_hash, args_hash(&json!({"a": 20, "b": 1})));
}

/// rule NT-20: a nested call whose started row fails is refused under `Abort`.
#[tokio::test]
async fn nt_20_a_failed_started_row_refuses_the_nested_call_under_abort() {
    let ledger = Arc::new(nested_rows_fail());
    let caller = Caller::new("add", json!({"a": 1, "b": 1}));
    let run = run_caller(ledger, vec![add(), caller], "n2").await;
    let content = &tool_results(&run.messages)[0].1;
    assert!(
        content.starts_with("nested refused: refused: the effect ledger could not record the call"),
        "{content}"
    );
    assert_eq!(
        run.budget.nested_tool_calls, 0,
        "the refused call gave its slot back"
    );
}

/// rule NT-20: a nested call dropped mid-flight leaves its row started.
#[tokio::test(start_paused = true)]
async fn nt_20_a_nested_call_dropped_mid_flight_leaves_its_row_started() {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let slow = ProbeTool::new("slow", false, Behaviour::UntilCancelled(started));
    let caller = Arc::new(Caller {
        wait_ms: Some(50),
        ..Arc::try_unwrap(Caller::new("slow", json!({"tag": "x"})))
            .ok()
            .unwrap()
    });
    let run = run_caller(ledger.clone(), vec![slow, caller], "n3").await;
    assert_eq!(tool_results(&run.messages)[0].1, "stopped waiting");
    let row = ledger
        .get(&RunId::from("n3"), &tinyagents::core::CallId::new("p1/1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.status,
        CallStatus::Started,
        "the effect may have happened: the row stays in doubt"
    );
}

/// rule NT-43: a nested call to a tool that is not replay-safe is refused over
/// an unresolved row of the same id: recovery re-runs a replay-safe parent
/// whose nested payment was in doubt when the process died; the payment is
/// answered "interrupted, outcome unknown" and does not run again.
#[tokio::test]
async fn nt_43_a_never_replay_nested_call_over_an_unresolved_row_is_refused() {
    let ledger = Arc::new(MemoryLedger::new());
    let args = json!({"tag": "card"});
    let started = Arc::new(tokio::sync::Notify::new());
    let pay = ProbeTool::new("pay", false, Behaviour::BlockOnce(started.clone()));
    let caller = Caller::replayed("pay", None, args, None);
    let tools: Vec<Arc<dyn Tool>> = vec![pay.clone(), caller];
    let model = vec![ScriptedModel::tool_call("caller", json!({}))];
    crash_when(
        &harness_with(model, ledger.clone(), tools.clone(), |b| b),
        "n4",
        &started,
    )
    .await;
    let row = ledger
        .get(&RunId::from("n4"), &tinyagents::core::CallId::new("p1/1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, CallStatus::Started, "the payment is in doubt");

    let run = harness_with(
        vec![ChatResponse::text("done")],
        ledger.clone(),
        tools,
        |b| b,
    )
    .recover(
        &RunId::from("n4"),
        ResumeOptions::default(),
        &EventSink::none(),
    )
    .await
    .unwrap();
    let content = &tool_results(&run.messages)[0].1;
    assert!(
        content.starts_with("nested refused:") && content.contains("interrupted, outcome unknown"),
        "{content}"
    );
    assert_eq!(
        pay.calls.load(Ordering::SeqCst),
        1,
        "the payment did not run again"
    );
}

/// rule NT-44: a replayed nested call whose row settled gets its recorded
/// result and is not executed again: recovery re-runs a replay-safe parent
/// that died after its nested payment settled.
#[tokio::test]
async fn nt_44_a_replayed_nested_call_whose_row_settled_is_answered_from_it() {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let pay = ProbeTool::new("pay", false, Behaviour::Yield(0));
    let caller = Caller::replayed("pay", None, json!({"tag": "card"}), Some(started.clone()));
    let tools: Vec<Arc<dyn Tool>> = vec![pay.clone(), caller];
    let model = vec![ScriptedModel::tool_call("caller", json!({}))];
    crash_when(
        &harness_with(model, ledger.clone(), tools.clone(), |b| b),
        "n5",
        &started,
    )
    .await;

    let run = harness_with(
        vec![ChatResponse::text("done")],
        ledger.clone(),
        tools,
        |b| b,
    )
    .recover(
        &RunId::from("n5"),
        ResumeOptions::default(),
        &EventSink::none(),
    )
    .await
    .unwrap();
    assert_eq!(tool_results(&run.messages)[0].1, "nested said ok card");
    assert_eq!(pay.calls.load(Ordering::SeqCst), 1);
}

/// Issue 11 item 2a: recovery re-runs a replay-safe parent whose first
/// nested call (`lookup`, settled "balance: 100") it now makes differently
/// (`wire_money`, same id `p1/1`): the ledger compares identity first, so
/// the call is refused (Mismatch); `wire_money` never runs and its caller
/// never reads `lookup`'s result as its answer.
#[tokio::test]
async fn i11_2a_a_replayed_parent_making_a_different_nested_call_is_refused_not_answered_from_the_row()
 {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let lookup = ProbeTool::new(
        "lookup",
        false,
        Behaviour::Return(ToolResult::text("balance: 100")),
    );
    let wire = ProbeTool::new("wire_money", false, Behaviour::Yield(0));
    let caller = Caller::replayed(
        "lookup",
        Some("wire_money"),
        json!({"tag": "acct"}),
        Some(started.clone()),
    );
    let tools: Vec<Arc<dyn Tool>> = vec![lookup.clone(), wire.clone(), caller];
    let model = vec![ScriptedModel::tool_call("caller", json!({}))];
    crash_when(
        &harness_with(model, ledger.clone(), tools.clone(), |b| b),
        "n6",
        &started,
    )
    .await;

    let run = harness_with(
        vec![ChatResponse::text("done")],
        ledger.clone(),
        tools,
        |b| b,
    )
    .recover(
        &RunId::from("n6"),
        ResumeOptions::default(),
        &EventSink::none(),
    )
    .await
    .unwrap();
    let content = &tool_results(&run.messages)[0].1;
    assert!(
        content.starts_with("nested refused:")
            && content.contains("p1/1")
            && !content.contains("balance"),
        "{content}"
    );
    assert_eq!(wire.calls.load(Ordering::SeqCst), 0);
    assert_eq!(lookup.calls.load(Ordering::SeqCst), 1);
    let row = ledger
        .get(&RunId::from("n6"), &tinyagents::core::CallId::new("p1/1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.tool_name.as_str(), row.status),
        ("lookup", CallStatus::Completed)
    );
}
