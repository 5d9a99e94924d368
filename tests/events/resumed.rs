//! Issue 10 item 8 for resumed and recovered runs: their events give way
//! to their own cancellation and wall clock, and they run through a handle.

use std::sync::atomic::Ordering;

use tinyagents::prelude::*;
use tinyagents::{
    core::CancellationToken, core::LimitKind, core::RunId, core::ToolReplay,
    harness::ResumeOptions, harness::SuspendedRun, ledger::MemoryLedger,
    middleware::HumanApprovalMiddleware,
};
use tinyagents_tests::{Behaviour, ProbeTool, probe_call, turn};

use super::low_level::{cancel_when_full, probed_channel, wall_clock};
use super::*;

/// A harness whose first call (`deploy`) needs a person's approval, then
/// runs [`busy_script`]; and the run, suspended on that call.
async fn suspended(
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> (AgentHarness, SuspendedRun) {
    let mut script = vec![turn(&[probe_call("deploy", "prod")])];
    script.extend(busy_script());
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(script)))
        .tool(add_tool())
        .middleware(Arc::new(HumanApprovalMiddleware::new().require("deploy")));
    builder
        .register(ProbeTool::new("deploy", false, Behaviour::Yield(1)))
        .unwrap();
    let harness = configure(builder).build().unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let suspended = run.suspended.unwrap();
    (harness, suspended)
}

fn approve_all(suspended: &SuspendedRun) -> Vec<tinyagents::harness::ApprovalDecision> {
    suspended.pending().map(|p| p.approve()).collect()
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_resumed_run_whose_buffer_is_never_read_gives_way_to_cancellation() {
    let (harness, suspended) = suspended(|b| b).await;
    let decisions = approve_all(&suspended);
    let (sink, mut receiver, probe) = probed_channel(1);
    let token = CancellationToken::new();
    let canceller = cancel_when_full(probe, token.clone());
    let options = ResumeOptions {
        cancel: Some(token),
        ..ResumeOptions::default()
    };
    let run = hang_guard(
        "a cancelled resumed run nobody reads",
        harness.resume(suspended, &decisions, options, &sink),
    )
    .await
    .unwrap();
    canceller.await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_transcript_paired(&run.messages);
    assert!(receiver.try_recv().is_ok(), "the first event waited");
    assert!(receiver.try_recv().is_err(), "nothing else fit");
    assert!(sink.dropped_events() >= 1);
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_resumed_run_whose_buffer_is_never_read_fails_at_the_wall_clock() {
    let (harness, suspended) = suspended(|b| b.limits(wall_clock(LimitBehavior::Error))).await;
    let decisions = approve_all(&suspended);
    let (sink, _receiver) = event_channel(1);
    let failed = hang_guard(
        "a failing resumed run nobody reads",
        harness.resume(suspended, &decisions, ResumeOptions::default(), &sink),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            failed,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::WallClock,
                ..
            }
        ),
        "{failed}"
    );
    assert!(sink.dropped_events() >= 1);
}

#[tokio::test]
async fn issue10_item8_a_resumed_run_through_a_handle_completes_when_awaited_before_reading() {
    let (harness, suspended) = suspended(|b| b.event_buffer(4)).await;
    let decisions = approve_all(&suspended);
    let mut handle = harness.start_resume(suspended, &decisions, ResumeOptions::default());
    let run = hang_guard("wait on a resumed run", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    let mut kept = Vec::new();
    while let Some(event) = handle.next_event().await {
        kept.push(event);
    }
    assert_eq!(kept.len(), 4);
    assert!(handle.dropped_events() > 0);
    assert_stream_tail(&kept, RunStatus::Completed);
}

/// A run that crashed (its future dropped) while the first of its calls
/// ran, recorded in a memory ledger; and a new harness over that ledger
/// whose model goes on with [`busy_script`].
async fn crashed(
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> (AgentHarness, RunId) {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let fetch = ProbeTool::new("fetch", false, Behaviour::BlockOnce(started.clone()))
        .with_spec(|s| s.replay(ToolReplay::Safe));
    let build = |script: Vec<ChatResponse>| {
        let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(script)))
            .ledger(ledger.clone())
            .tool(add_tool());
        builder.register(fetch.clone()).unwrap();
        builder
    };
    let run_id = RunId::from("crashed");
    let first = build(vec![turn(&[probe_call("fetch", "f")])])
        .build()
        .unwrap();
    let events = EventSink::none();
    tokio::select! {
        _ = first.run_with(RunRequest::new("go").with_run_id(run_id.clone()), &events) => {
            panic!("the run was meant to crash while its tool ran")
        }
        () = started.notified() => {}
    }
    assert_eq!(fetch.calls.load(Ordering::SeqCst), 1);
    let second = configure(build(busy_script())).build().unwrap();
    (second, run_id)
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_recovered_run_whose_buffer_of_one_is_never_read_stops_at_the_wall_clock() {
    let (harness, run_id) = crashed(|b| b.limits(wall_clock(LimitBehavior::Stop))).await;
    let (sink, mut receiver) = event_channel(1);
    let run = hang_guard(
        "a recovered run nobody reads",
        harness.recover(&run_id, ResumeOptions::default(), &sink),
    )
    .await
    .unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::WallClock));
    assert_transcript_paired(&run.messages);
    assert!(receiver.try_recv().is_ok(), "the first event waited");
    assert!(receiver.try_recv().is_err(), "nothing else fit");
    assert!(sink.dropped_events() >= 1);
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_recovered_run_whose_buffer_of_one_is_never_read_fails_at_the_wall_clock() {
    let (harness, run_id) = crashed(|b| b.limits(wall_clock(LimitBehavior::Error))).await;
    let (sink, _receiver) = event_channel(1);
    let failed = hang_guard(
        "a failing recovered run nobody reads",
        harness.recover(&run_id, ResumeOptions::default(), &sink),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            failed,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::WallClock,
                ..
            }
        ),
        "{failed}"
    );
    assert!(sink.dropped_events() >= 1);
}

#[tokio::test]
async fn issue10_item8_a_recovered_run_through_a_handle_gives_every_event_when_read_first() {
    let (harness, run_id) = crashed(|b| b.event_buffer(1)).await;
    let mut handle = harness.start_recover(&run_id, ResumeOptions::default());
    let mut events = Vec::new();
    while let Some(event) = hang_guard("read a recovered run", handle.next_event()).await {
        events.push(event);
    }
    let run = handle.wait().await.unwrap();
    assert_busy_run_completed(&run);
    assert_eq!(handle.dropped_events(), 0);
    assert_one_terminal_per_start(&events);
    assert_ends_once(&events, RunStatus::Completed);
}
