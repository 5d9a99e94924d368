//! Issue 10 item 8: a stalled event consumer cannot hang a run, and a run
//! handle has no order of reading events and awaiting the result that
//! deadlocks. Every order is tested: await then read, read then await, drop
//! the receiver, never read.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod handle;
mod low_level;
mod resumed;

use std::collections::HashSet;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::harness::AgentHarnessBuilder;
use tinyagents::prelude::*;
use tinyagents_tests::{add_tool, assert_one_terminal_per_start, assert_transcript_paired};

/// Model turns that call tools before the final answer.
const TURNS: usize = 3;
/// Tool calls per turn: enough that a run's events overflow small buffers.
const CALLS: usize = 20;

/// The events of a run of [`busy_harness`] that completes: the run's start
/// and end, two model events per model call, two tool events per call.
const EVENTS: usize = 1 + 2 * (TURNS + 1) + 2 * TURNS * CALLS + 1;

/// `TURNS` turns of `CALLS` calls of `add`, then the answer "done".
fn busy_script() -> Vec<ChatResponse> {
    let mut script: Vec<ChatResponse> = (0..TURNS)
        .map(|turn| {
            ScriptedModel::tool_calls((0..CALLS).map(|i| ("add", json!({"a": turn, "b": i}))))
        })
        .collect();
    script.push(ChatResponse::text("done"));
    script
}

/// A harness running [`busy_script`] with `add`, configured further.
fn busy_harness(
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let builder =
        AgentHarness::builder(Arc::new(ScriptedModel::new(busy_script()))).tool(add_tool());
    configure(builder).build().unwrap()
}

/// Fails the test instead of hanging it. Only a hang guard: its length is
/// no timing assertion (under paused time it elapses at once when the run
/// is stuck, and never when it is not).
async fn hang_guard<F: IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(600), future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"))
}

fn is_run_end(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. }
    )
}

/// Every event of a run, nothing dropped: it opens with `RunStarted`, every
/// `ToolStarted` has exactly one terminal event, and exactly one
/// `RunCompleted` (with `status`) ends it.
fn assert_complete_stream(events: &[AgentEvent], status: RunStatus) {
    assert!(
        matches!(events.first(), Some(AgentEvent::RunStarted { .. })),
        "{:?}",
        events.first()
    );
    assert_one_terminal_per_start(events);
    assert_ends_once(events, status);
}

/// The last events of a run, older ones dropped: no call starts or ends
/// twice, and exactly one `RunCompleted` (with `status`) ends them.
fn assert_stream_tail(events: &[AgentEvent], status: RunStatus) {
    let mut started = HashSet::new();
    let mut ended = HashSet::new();
    for event in events {
        match event {
            AgentEvent::ToolStarted { call_id, .. } => {
                assert!(started.insert(call_id.clone()), "{call_id} started twice");
            }
            AgentEvent::ToolCompleted { call_id, .. } | AgentEvent::ToolFailed { call_id, .. } => {
                assert!(ended.insert(call_id.clone()), "{call_id} ended twice");
            }
            _ => {}
        }
    }
    assert_ends_once(events, status);
}

fn assert_ends_once(events: &[AgentEvent], status: RunStatus) {
    assert_eq!(
        events.iter().filter(|e| is_run_end(e)).count(),
        1,
        "exactly one terminal run event"
    );
    match events.last() {
        Some(AgentEvent::RunCompleted { status: got, .. }) => assert_eq!(*got, status),
        other => panic!("the stream ends with {other:?}, not RunCompleted"),
    }
}

/// A completed run of [`busy_harness`]: its answer, and every call paired.
fn assert_busy_run_completed(run: &AgentRun) {
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert_transcript_paired(&run.messages);
}
