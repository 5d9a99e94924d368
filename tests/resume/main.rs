//! Issue 11: resume and recovery as a trust boundary. A suspended run, a
//! person's decisions and the ledger's rows come back from storage someone
//! may have edited; these tests edit them as an attacker would, through the
//! facade, and check that nothing widens what the run may do.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::cloned_ref_to_slice_refs)]

mod approvals;
mod checkpoints;
mod deferred;
mod sim_findings;
mod stored_state;
mod tamper_prop;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    RunLimits, core::RunContext, core::RunId, harness::AgentHarnessBuilder,
    harness::ApprovalDecision, harness::ResumeOptions, harness::SuspendedRun, harness::TurnEntry,
    ledger::EffectLedger, ledger::MemoryLedger,
};
use tinyagents_tests::*;

fn script(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses).recording())
}

/// A harness around `model` with `tools`, configured by `configure`.
fn build(
    model: &Arc<ScriptedModel>,
    tools: &[Arc<dyn Tool>],
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(model.clone());
    for tool in tools {
        builder.register(Arc::clone(tool)).unwrap();
    }
    configure(builder).build().unwrap()
}

/// A probe whose spec says a person must approve each call.
fn flagged(name: &str) -> Arc<ProbeTool> {
    ProbeTool::new(name, false, Behaviour::Yield(1)).with_spec(ToolSpec::approval_required)
}

/// A probe with side effects that needs no approval.
fn plain(name: &str) -> Arc<ProbeTool> {
    ProbeTool::new(name, false, Behaviour::Yield(1))
}

fn calls_of(tool: &ProbeTool) -> usize {
    tool.calls.load(Ordering::SeqCst)
}

fn done() -> ChatResponse {
    ChatResponse::text("done")
}

/// The suspended state of an awaiting run, through JSON (a restart).
fn through_json(run: &AgentRun) -> SuspendedRun {
    assert_eq!(run.status, RunStatus::AwaitingApproval, "{run:?}");
    let text = serde_json::to_string(run.suspended.as_ref().unwrap()).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn approve_all(suspended: &SuspendedRun) -> Vec<ApprovalDecision> {
    suspended.pending().map(|p| p.approve()).collect()
}

async fn resume(
    harness: &AgentHarness,
    suspended: SuspendedRun,
    decisions: &[ApprovalDecision],
) -> Result<AgentRun, TinyAgentsError> {
    harness
        .resume(
            suspended,
            decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
}

/// The text of a refused resume.
fn refusal(result: Result<AgentRun, TinyAgentsError>) -> String {
    match result {
        Err(TinyAgentsError::State(text)) => text,
        other => panic!("expected a refused resume, got {other:?}"),
    }
}

/// The waiting calls of a suspended state, mutably.
fn pending_mut(
    suspended: &mut SuspendedRun,
) -> impl Iterator<Item = &mut tinyagents::harness::PendingCall> {
    suspended.turn.iter_mut().filter_map(|entry| match entry {
        TurnEntry::Pending { pending } => Some(pending),
        TurnEntry::Settled { .. } => None,
    })
}

/// The tool calls of the transcript's last assistant message, mutably.
fn issued_mut(suspended: &mut SuspendedRun) -> &mut Vec<ToolCall> {
    match suspended.state.messages.last_mut() {
        Some(Message::Assistant { tool_calls, .. }) => tool_calls,
        other => panic!("the transcript ends with {other:?}"),
    }
}
