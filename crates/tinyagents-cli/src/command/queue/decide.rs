//! `queue approve`: decides the waiting calls of a run awaiting approval
//! and queues it again, for the next worker to claim it to resume it.
//!
//! The queue takes the decisions of every waiting call at once, checked
//! and written in one transaction: there is no partly decided run in it.
//! So `--call` names calls to decide and must name every waiting call
//! (a confirmation of what is decided); a call left out, or named and not
//! waiting, refuses the command and records nothing.

use serde_json::json;
use tinyagents::core::RunId;
use tinyagents::harness::PendingCall;
use tinyagents::postgres::{QueueStatus, RunQueue};

use super::{BadInput, refusal};
use crate::exit;
use crate::view::out;

/// What `queue approve` was asked to decide.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decision<'a> {
    /// The calls named (`--call`); every waiting call when empty.
    pub(super) calls: &'a [String],
    /// Deny instead of approving.
    pub(super) deny: bool,
    /// Why, for a denial.
    pub(super) reason: Option<&'a str>,
}

/// `queue approve RUN [--call ID]… [--deny [--reason TEXT]]`.
pub(super) async fn approve(
    queue: &RunQueue,
    run_id: &str,
    decision: Decision<'_>,
    json: bool,
) -> anyhow::Result<u8> {
    let id = RunId::new(run_id);
    let Some(run) = queue.get(&id).await? else {
        return Err(BadInput::error(format!(
            "run {run_id} is not in the queue (`tinyagents queue list` lists them)"
        )));
    };
    if run.status != QueueStatus::AwaitingApproval {
        anyhow::bail!(
            "run {run_id} is {}, not awaiting approval: it has no call to decide",
            run.status
        );
    }
    check_named(run_id, &run.pending, decision.calls)?;
    let decisions: Vec<_> = run
        .pending
        .iter()
        .map(|p| {
            if decision.deny {
                p.deny(decision.reason.unwrap_or("denied by a person"))
            } else {
                p.approve()
            }
        })
        .collect();
    // Another decider may have been first: the queue refuses this one then.
    queue.approve(&id, &decisions).await.map_err(refusal)?;
    let verb = if decision.deny { "denied" } else { "approved" };
    for decided in &decisions {
        if json {
            out(
                &json!({"type": "decision", "run_id": run_id, "call_id": decided.call_id,
                        "tool": decided.tool_name, "approved": decided.approved,
                        "reason": decided.reason})
                .to_string(),
            );
        } else {
            out(&format!("{verb} {} {}", decided.call_id, decided.tool_name));
        }
    }
    if !json {
        out(&format!(
            "run {run_id} is queued again: the next worker to claim it resumes it"
        ));
    }
    Ok(exit::OK)
}

/// With `--call`: every name a waiting call, and every waiting call named.
fn check_named(run_id: &str, pending: &[PendingCall], named: &[String]) -> anyhow::Result<()> {
    if named.is_empty() {
        return Ok(());
    }
    let listed = |calls: &mut dyn Iterator<Item = &PendingCall>| {
        calls
            .map(|p| format!("{} ({})", p.call.id, p.call.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(stranger) = named
        .iter()
        .find(|name| !pending.iter().any(|p| p.call.id.as_str() == name.as_str()))
    {
        return Err(BadInput::error(format!(
            "call '{stranger}' of run '{run_id}' does not wait for a decision; waiting: {}",
            listed(&mut pending.iter())
        )));
    }
    let mut left = pending
        .iter()
        .filter(|p| !named.iter().any(|name| name.as_str() == p.call.id.as_str()))
        .peekable();
    if left.peek().is_some() {
        return Err(BadInput::error(format!(
            "run '{run_id}' also waits on {}: the queue takes every waiting call's decision at \
             once, so name them too (or leave --call out to decide them all); nothing was \
             recorded",
            listed(&mut left)
        )));
    }
    Ok(())
}
