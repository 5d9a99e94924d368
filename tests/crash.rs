//! Crash tests: an agent whose tool call is in flight is killed with SIGKILL
//! at each point of the call — before its started row is durable, after it,
//! after the tool's effect, after the settled row — and the ledger is
//! reopened by a new process. The rows are exactly what the guarantee in
//! `docs/effect-ledger.md` promises, and recovery never repeats the effect.
#![cfg(unix)]
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tinyagents::ledger::CommitPoint;
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::RunId, core::ToolReplay, harness::ResumeOptions, ledger::CallStatus,
    ledger::EffectLedger, ledger::SqliteLedger, ledger::SqliteOptions,
};

const POINT: &str = "TINYAGENTS_CRASH_POINT";
const DIR: &str = "TINYAGENTS_CRASH_DIR";
const RUN: &str = "crash-run";

/// Set once the child's first run has suspended: the `before_resume_start`
/// point stops only the resume's commits.
static RESUMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn reached(dir: &Path) {
    std::fs::write(dir.join("reached"), b"1").unwrap();
}

fn effects(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("effects"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// `pay` (never replayed) appends to the effects file; `check` (replay-safe)
/// answers `ok`. `stall` names the tool that stops forever once it acted.
fn tools(dir: &Path, stall: Option<&'static str>) -> Vec<Arc<dyn Tool>> {
    tools_with(dir, stall, false)
}

/// [`tools`], with `pay`'s settled rows made durable when `durable`.
fn tools_with(dir: &Path, stall: Option<&'static str>, durable: bool) -> Vec<Arc<dyn Tool>> {
    let pay_dir = dir.to_path_buf();
    let pay = FnTool::new(
        "pay",
        "Pays.",
        move |_: serde_json::Map<String, serde_json::Value>| {
            let dir = pay_dir.clone();
            async move {
                use std::io::Write;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join("effects"))?;
                writeln!(file, "paid")?;
                file.sync_all()?;
                if stall == Some("pay") {
                    reached(&dir);
                    std::future::pending::<()>().await;
                }
                anyhow::Ok("paid")
            }
        },
    )
    .map_spec(|s| {
        let s = s.replay(ToolReplay::Never);
        if durable { s.durable_settle() } else { s }
    });
    let check_dir = dir.to_path_buf();
    let check = FnTool::new(
        "check",
        "Checks.",
        move |_: serde_json::Map<String, serde_json::Value>| {
            let dir = check_dir.clone();
            async move {
                if stall == Some("check") {
                    reached(&dir);
                    std::future::pending::<()>().await;
                }
                anyhow::Ok("ok")
            }
        },
    )
    .map_spec(|s| s.replay(ToolReplay::Safe));
    vec![Arc::new(pay), Arc::new(check)]
}

fn harness(
    model: ScriptedModel,
    ledger: Arc<dyn EffectLedger>,
    tools: Vec<Arc<dyn Tool>>,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(Arc::new(model)).ledger(ledger);
    for tool in tools {
        builder.register(tool).unwrap();
    }
    builder.build().unwrap()
}

/// The child process: runs the agent until the crash point, where it stops
/// for the parent to kill it.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let (Ok(point), Ok(dir)) = (std::env::var(POINT), std::env::var(DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let hook_dir = dir.clone();
        let hook_point = point.clone();
        let mut options = SqliteOptions::default().commit_hook(move |at| {
            let stop = match (hook_point.as_str(), at) {
                ("before_started", CommitPoint::BeforeCommit { started }) => started > 0,
                ("after_started", CommitPoint::AfterCommit { started }) => started > 0,
                ("before_resume_start", CommitPoint::BeforeCommit { started }) => {
                    started > 0 && RESUMING.load(std::sync::atomic::Ordering::SeqCst)
                }
                _ => false,
            };
            if stop {
                reached(&hook_dir);
                loop {
                    std::thread::sleep(Duration::from_secs(60));
                }
            }
        });
        // Riding rows commit with the next started row or a flush only, so
        // what a kill finds depends on the commits the harness asked for.
        options.linger = Duration::from_secs(3600);
        let ledger = SqliteLedger::open_with(dir.join("ledger.db"), options)
            .await
            .unwrap();
        if point == "during_resume" || point == "before_resume_start" {
            return pay_in_a_resume(&dir, ledger).await;
        }
        if let Some(durable) = point.strip_prefix("after_settle_") {
            return pay_then_hang(&dir, ledger, durable == "durable").await;
        }
        let stall = match point.as_str() {
            "after_effect" => Some("pay"),
            "after_settled" => Some("check"),
            _ => None,
        };
        let model = ScriptedModel::new([
            ScriptedModel::tool_call("pay", json!({"amount": 10})),
            ScriptedModel::tool_call("check", json!({})),
            ChatResponse::text("unreachable"),
        ]);
        let harness = harness(model, Arc::new(ledger), tools(&dir, stall));
        let _ = harness
            .run_with(
                RunRequest::new("pay").with_run_id(RunId::from(RUN)),
                &EventSink::none(),
            )
            .await;
    });
}

/// The child of `during_resume`: the payment waits for a person; the
/// suspended state is stored; the resume with the approval pays and stalls
/// there, to be killed.
async fn pay_in_a_resume(dir: &Path, ledger: SqliteLedger) {
    use tinyagents::middleware::HumanApprovalMiddleware;
    let ledger: Arc<dyn EffectLedger> = Arc::new(ledger);
    let approving = |model: ScriptedModel| {
        let mut builder = AgentHarness::builder(Arc::new(model))
            .ledger(Arc::clone(&ledger))
            .middleware(Arc::new(HumanApprovalMiddleware::new().require("pay")));
        for tool in tools(dir, Some("pay")) {
            builder.register(tool).unwrap();
        }
        builder.build().unwrap()
    };
    let first = approving(ScriptedModel::new([ScriptedModel::tool_call(
        "pay",
        json!({"amount": 10}),
    )]));
    let run = first
        .run_with(
            RunRequest::new("pay").with_run_id(RunId::from(RUN)),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let suspended = run.suspended.expect("the payment waits for a person");
    let text = serde_json::to_string(&suspended).unwrap();
    std::fs::write(dir.join("suspended.json"), text).unwrap();
    let decisions: Vec<_> = suspended.pending().map(|p| p.approve()).collect();
    std::fs::write(
        dir.join("decisions.json"),
        serde_json::to_string(&decisions).unwrap(),
    )
    .unwrap();
    RESUMING.store(true, std::sync::atomic::Ordering::SeqCst);
    let second = approving(ScriptedModel::new([ChatResponse::text("unreachable")]));
    let _ = second
        .resume(
            suspended,
            &decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await;
}

/// The child of `after_settle_*`: pays (with `durable_settle` or not), and
/// the model never answers the next turn: the process is killed there,
/// after the payment's result was folded.
async fn pay_then_hang(dir: &Path, ledger: SqliteLedger, durable: bool) {
    struct HangsAfterOneTurn(PathBuf);
    #[tinyagents::async_trait]
    impl ChatModel for HangsAfterOneTurn {
        fn name(&self) -> &str {
            "hangs"
        }
        async fn chat(
            &self,
            request: tinyagents::core::ChatRequest<'_>,
        ) -> Result<ChatResponse, tinyagents::core::ModelError> {
            if request
                .messages
                .iter()
                .any(|m| matches!(m, Message::Tool { .. }))
            {
                reached(&self.0);
                std::future::pending::<()>().await;
            }
            Ok(ScriptedModel::tool_call("pay", json!({"amount": 10})))
        }
    }
    let tools = tools_with(dir, None, durable);
    let model = HangsAfterOneTurn(dir.to_path_buf());
    let mut builder = AgentHarness::builder(Arc::new(model)).ledger(Arc::new(ledger));
    for tool in tools {
        builder.register(tool).unwrap();
    }
    let _ = builder
        .build()
        .unwrap()
        .run_with(
            RunRequest::new("pay").with_run_id(RunId::from(RUN)),
            &EventSink::none(),
        )
        .await;
}

/// Runs the child until it reaches `point`, then kills it with SIGKILL.
fn crash_at(point: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(POINT, point)
        .env(DIR, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.path().join("reached").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child ended ({status}) before reaching {point}");
        }
        assert!(Instant::now() < deadline, "the child never reached {point}");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    dir
}

/// Recovers the crashed run in a new harness whose model answers `answers`.
async fn recover(
    dir: &Path,
    ledger: Arc<SqliteLedger>,
    answers: Vec<ChatResponse>,
) -> Result<AgentRun, TinyAgentsError> {
    harness(ScriptedModel::new(answers), ledger, tools(dir, None))
        .recover(
            &RunId::from(RUN),
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
}

async fn reopen(dir: &Path) -> Arc<SqliteLedger> {
    Arc::new(SqliteLedger::open(dir.join("ledger.db")).await.unwrap())
}

async fn statuses(ledger: &SqliteLedger) -> Vec<(String, CallStatus)> {
    ledger
        .rows(&RunId::from(RUN))
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.call_id.to_string(), row.status))
        .collect()
}

#[tokio::test]
async fn killed_before_the_started_row_is_durable_nothing_started_and_nothing_happened() {
    let dir = crash_at("before_started");
    let ledger = reopen(dir.path()).await;
    assert!(statuses(&ledger).await.is_empty());
    assert_eq!(
        effects(dir.path()),
        0,
        "the tool never ran: its start was not acknowledged"
    );
    // The run's claim and its checkpoint ride on commits: the last one may
    // or may not have committed before the kill. Either there is nothing to
    // recover, or recovery runs the payment for the first time, once.
    let answers = vec![
        ChatResponse::text("paid now"),
        ChatResponse::text("done"),
        ChatResponse::text("done"),
    ];
    match recover(dir.path(), ledger, answers).await {
        Err(error) => assert_eq!(
            error,
            TinyAgentsError::State(format!("run {RUN} has no checkpoint to recover from"))
        ),
        Ok(run) => {
            tinyagents_tests::assert_transcript_paired(&run.messages);
            assert_eq!(effects(dir.path()), 1, "never started, so run once now");
        }
    }
}

#[tokio::test]
async fn killed_after_the_started_row_the_call_is_in_doubt_and_recovery_does_not_repeat_it() {
    let dir = crash_at("after_started");
    let ledger = reopen(dir.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Started)]
    );
    assert_eq!(effects(dir.path()), 0);
    let run = recover(
        dir.path(),
        ledger.clone(),
        vec![ChatResponse::text("told the user")],
    )
    .await
    .unwrap();
    assert_eq!(run.final_text, "told the user");
    assert!(
        tinyagents_tests::tool_results(&run.messages)[0]
            .1
            .starts_with("interrupted, outcome unknown")
    );
    assert_eq!(
        effects(dir.path()),
        0,
        "a ToolReplay::Never call in doubt is not run again"
    );
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Interrupted)]
    );
}

#[tokio::test]
async fn killed_after_the_effect_the_call_is_in_doubt_and_the_effect_is_not_repeated() {
    let dir = crash_at("after_effect");
    let ledger = reopen(dir.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Started)]
    );
    assert_eq!(effects(dir.path()), 1);
    let run = recover(
        dir.path(),
        ledger.clone(),
        vec![ChatResponse::text("told the user")],
    )
    .await
    .unwrap();
    tinyagents_tests::assert_transcript_paired(&run.messages);
    assert_eq!(effects(dir.path()), 1, "the payment happened exactly once");
}

#[tokio::test]
async fn killed_after_the_settled_row_the_call_is_answered_from_its_row() {
    let dir = crash_at("after_settled");
    let ledger = reopen(dir.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [
            ("p1".to_owned(), CallStatus::Completed),
            ("p2".to_owned(), CallStatus::Started)
        ]
    );
    let paid = ledger
        .get(&RunId::from(RUN), &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paid.result.unwrap().content, "paid");
    let run = recover(
        dir.path(),
        ledger.clone(),
        vec![ChatResponse::text("all done")],
    )
    .await
    .unwrap();
    assert_eq!(run.final_text, "all done");
    let results = tinyagents_tests::tool_results(&run.messages);
    assert_eq!(
        results.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
        ["paid", "ok"]
    );
    assert_eq!(
        effects(dir.path()),
        1,
        "the settled payment was not run again"
    );
    assert_eq!(
        statuses(&ledger).await,
        [
            ("p1".to_owned(), CallStatus::Completed),
            ("p2".to_owned(), CallStatus::Completed)
        ]
    );
}

/// Issue 11: killed during a resume, after the approved payment acted: a
/// new process recovers the run; the payment ran once, its row says it was
/// interrupted with its outcome unknown, and resuming the stored state
/// again is refused.
#[tokio::test]
async fn killed_during_a_resume_the_approved_call_ran_at_most_once_and_its_row_says_so() {
    let dir = crash_at("during_resume");
    let ledger = reopen(dir.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Started)]
    );
    assert_eq!(effects(dir.path()), 1);
    let run = recover(
        dir.path(),
        ledger.clone(),
        vec![ChatResponse::text("told the user")],
    )
    .await
    .unwrap();
    let results = tinyagents_tests::tool_results(&run.messages);
    assert!(
        results[0].1.starts_with("interrupted, outcome unknown"),
        "{results:?}"
    );
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Interrupted)]
    );
    let stored = std::fs::read_to_string(dir.path().join("suspended.json")).unwrap();
    let suspended: tinyagents::harness::SuspendedRun = serde_json::from_str(&stored).unwrap();
    let decisions: Vec<_> = suspended.pending().map(|p| p.approve()).collect();
    let again = harness(
        ScriptedModel::new([ChatResponse::text("paid again?")]),
        ledger.clone(),
        tools(dir.path(), None),
    )
    .resume(
        suspended,
        &decisions,
        ResumeOptions::default(),
        &EventSink::none(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&again, TinyAgentsError::State(t) if t.contains("has finished")),
        "{again:?}"
    );
    assert_eq!(effects(dir.path()), 1, "the payment happened exactly once");
}

/// The harness of the `during_resume` child: `pay` waits for a person.
fn approving(dir: &Path, ledger: Arc<SqliteLedger>, answers: Vec<ChatResponse>) -> AgentHarness {
    use tinyagents::middleware::HumanApprovalMiddleware;
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(answers)))
        .ledger(ledger)
        .middleware(Arc::new(HumanApprovalMiddleware::new().require("pay")));
    for tool in tools(dir, None) {
        builder.register(tool).unwrap();
    }
    builder.build().unwrap()
}

fn stored_decisions(dir: &Path) -> Vec<tinyagents::harness::ApprovalDecision> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("decisions.json")).unwrap()).unwrap()
}

/// Issue 29: killed during a resume while the approved payment runs, the
/// run is recovered by a harness with the same policies (the payment still
/// needs a person): its started row shows it was admitted, so nobody is
/// asked to approve it again, it is not run again, and the run finishes.
/// Before the fix the recovery waited for the same approval again.
#[tokio::test]
async fn killed_during_a_resume_a_recovery_under_the_same_policies_asks_no_one_again() {
    let dir = crash_at("during_resume");
    let ledger = reopen(dir.path()).await;
    assert_eq!(effects(dir.path()), 1);
    for decisions in [Vec::new(), stored_decisions(dir.path())] {
        let harness = approving(
            dir.path(),
            Arc::clone(&ledger),
            vec![ChatResponse::text("told the user")],
        );
        let options = ResumeOptions {
            decisions,
            ..ResumeOptions::default()
        };
        let run = harness
            .recover(&RunId::from(RUN), options, &EventSink::none())
            .await;
        if let Ok(run) = &run
            && run.status == RunStatus::Completed
        {
            assert!(run.suspended.is_none());
            let results = tinyagents_tests::tool_results(&run.messages);
            assert!(
                results[0].1.starts_with("interrupted, outcome unknown"),
                "{results:?}"
            );
            assert_eq!(run.final_text, "told the user");
            continue;
        }
        // The second pass meets the run the first one finished.
        let error = run.map(|r| r.status).unwrap_err();
        assert!(
            matches!(&error, TinyAgentsError::State(t) if t.contains("has finished")),
            "{error:?}"
        );
    }
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Interrupted)]
    );
    assert_eq!(effects(dir.path()), 1, "the payment happened exactly once");
}

/// Issue 29: killed in a resume before the approved payment's started row
/// was durable (the decision made, not yet used): a recovery given the
/// run's decisions pays once without asking anyone; one without them
/// waits for a person again and pays nothing; a decision bound to other
/// arguments is not taken for the call's.
#[tokio::test]
async fn killed_in_a_resume_before_the_approved_call_started_its_decision_is_used_once_by_the_recovery()
 {
    let dir = crash_at("before_resume_start");
    let ledger = reopen(dir.path()).await;
    assert_eq!(effects(dir.path()), 0, "the payment never started");
    let recover_with = |decisions: Vec<tinyagents::harness::ApprovalDecision>| {
        let harness = approving(
            dir.path(),
            Arc::clone(&ledger),
            vec![ChatResponse::text("paid")],
        );
        async move {
            let options = ResumeOptions {
                decisions,
                ..ResumeOptions::default()
            };
            harness
                .recover(&RunId::from(RUN), options, &EventSink::none())
                .await
                .unwrap()
        }
    };
    let without = recover_with(Vec::new()).await;
    assert_eq!(without.status, RunStatus::AwaitingApproval);
    assert_eq!(effects(dir.path()), 0);

    let mut forged = stored_decisions(dir.path());
    forged[0].args_hash = tinyagents::core::args_hash(&json!({"amount": 1000}));
    let refused = recover_with(forged).await;
    let results = tinyagents_tests::tool_results(&refused.messages);
    assert!(
        results[0].1.contains("does not match this call"),
        "{results:?}"
    );
    assert_eq!(
        effects(dir.path()),
        0,
        "a decision for other arguments runs nothing"
    );
}

/// Issue 29: the same crash, recovered once with the run's decisions: the
/// approved payment runs exactly once and the run finishes; a second
/// recovery with the same decisions finds the run finished.
#[tokio::test]
async fn killed_in_a_resume_before_the_approved_call_started_a_recovery_with_its_decisions_pays_once()
 {
    let dir = crash_at("before_resume_start");
    let ledger = reopen(dir.path()).await;
    let decisions = stored_decisions(dir.path());
    let harness = approving(
        dir.path(),
        Arc::clone(&ledger),
        vec![ChatResponse::text("paid")],
    );
    let options = ResumeOptions {
        decisions: decisions.clone(),
        ..ResumeOptions::default()
    };
    let run = harness
        .recover(&RunId::from(RUN), options.clone(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.messages);
    assert_eq!(effects(dir.path()), 1, "paid once");
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Completed)]
    );
    let again = harness
        .recover(&RunId::from(RUN), options, &EventSink::none())
        .await
        .unwrap_err();
    assert!(
        matches!(&again, TinyAgentsError::State(t) if t.contains("has finished")),
        "{again:?}"
    );
    assert_eq!(effects(dir.path()), 1, "still once");
}

/// Issue 18: a `durable_settle` tool's settled row is durable before its
/// result is folded, so a kill after the call returned (here: while the
/// model is asked for the next turn, with riding rows never committed by
/// the writer's linger) finds it completed; without the option the same
/// kill finds it in doubt.
#[tokio::test]
async fn killed_after_a_durable_settle_the_call_is_completed_and_without_it_in_doubt() {
    let durable = crash_at("after_settle_durable");
    let ledger = reopen(durable.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Completed)]
    );
    assert_eq!(effects(durable.path()), 1);

    let plain = crash_at("after_settle_plain");
    let ledger = reopen(plain.path()).await;
    assert_eq!(
        statuses(&ledger).await,
        [("p1".to_owned(), CallStatus::Started)],
        "the settled row rode on a commit that never came"
    );
    assert_eq!(effects(plain.path()), 1);
}
