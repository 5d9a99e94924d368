//! `approve` (and `queue approve`): records decisions on a run's waiting
//! calls in the run store, with who and why; once every waiting call is
//! decided the run is ready to resume (`resume` here, or any worker of its
//! agents file).

use serde_json::json;
use tinyagents::core::{CallId, RunId};
use tinyagents::runs::{Decision, RecordStatus, WaitingCall};

use super::{BadInput, refusal, said};
use crate::cli::Deciding;
use crate::exit;
use crate::store::{Place, Stores, person};
use crate::view::out;

/// `tinyagents approve RUN [--call ID]… [--deny-call ID]… [--deny] [--reason TEXT] [--by NAME]`.
pub(crate) async fn approve(place: Place, deciding: &Deciding, json: bool) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let code = decide(&stores, deciding, json).await;
    stores.close().await?;
    code
}

/// Decides on `stores` what `deciding` says.
pub(crate) async fn decide(stores: &Stores, deciding: &Deciding, json: bool) -> anyhow::Result<u8> {
    let run_id = deciding.run.as_str();
    let record = super::record(stores, run_id).await?;
    if record.status != RecordStatus::AwaitingApproval {
        anyhow::bail!(
            "run '{run_id}' does not wait for a decision (it is {})",
            said(record.status)
        );
    }
    let id = RunId::new(run_id);
    let waiting: Vec<WaitingCall> = stores
        .runs
        .approvals(&id)
        .await
        .map_err(refusal)?
        .into_iter()
        .filter(|c| c.suspension == record.suspension && c.decision.is_none())
        .collect();
    let decisions = decisions_of(deciding, &waiting)?;
    let by = person(deciding.by.as_deref());
    let decided = stores
        .runs
        .decide(&id, &by, &decisions)
        .await
        .map_err(refusal)?;
    for call in &decided.decided {
        let Some(made) = &call.decision else { continue };
        if json {
            out(
                &json!({"type": "decision", "run_id": run_id, "call_id": call.call_id,
                        "tool": call.tool, "approved": made.approved, "reason": made.reason,
                        "by": made.by, "at_ms": made.at.as_millis()})
                .to_string(),
            );
        } else {
            let verb = if made.approved { "approved" } else { "denied" };
            out(&format!(
                "{verb} {} {} (by {})",
                call.call_id, call.tool, made.by
            ));
        }
    }
    if json {
        return Ok(exit::OK);
    }
    if decided.is_complete() {
        out(&format!(
            "every waiting call is decided: `tinyagents resume {run_id}` (or a worker of its agents file) resumes it"
        ));
    } else {
        let left: Vec<String> = decided
            .undecided
            .iter()
            .map(|c| format!("{} ({})", c.call_id, c.tool))
            .collect();
        out(&format!(
            "{} of {} waiting calls decided; still waiting: {}",
            waiting.len() - decided.undecided.len(),
            waiting.len(),
            left.join(", ")
        ));
    }
    Ok(exit::OK)
}

/// The decisions `deciding` asks for: the calls named with `--call`
/// (approved, or denied with `--deny`) and `--deny-call` (denied); or,
/// with none named, every waiting call. A call named that does not wait
/// is bad input, and nothing is recorded.
fn decisions_of(deciding: &Deciding, waiting: &[WaitingCall]) -> anyhow::Result<Vec<Decision>> {
    let denial = || {
        deciding
            .reason
            .clone()
            .unwrap_or_else(|| "denied by a person".to_owned())
    };
    let decide = |call: &CallId, deny: bool| {
        let decision = if deny {
            Decision::deny(call.clone(), denial())
        } else {
            Decision::approve(call.clone())
        };
        match (&deciding.reason, deny) {
            (Some(reason), false) => decision.because(reason.clone()),
            _ => decision,
        }
    };
    if deciding.calls.is_empty() && deciding.deny_calls.is_empty() {
        return Ok(waiting
            .iter()
            .map(|c| decide(&c.call_id, deciding.deny))
            .collect());
    }
    let named = deciding
        .calls
        .iter()
        .map(|c| (c, deciding.deny))
        .chain(deciding.deny_calls.iter().map(|c| (c, true)));
    let mut decisions = Vec::new();
    for (call, deny) in named {
        if !waiting.iter().any(|w| w.call_id.as_str() == call) {
            let listed: Vec<String> = waiting
                .iter()
                .map(|w| format!("{} ({})", w.call_id, w.tool))
                .collect();
            return Err(BadInput::error(format!(
                "call '{call}' of run '{}' does not wait for a decision; waiting: {}",
                deciding.run,
                if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                }
            )));
        }
        decisions.push(decide(&CallId::new(call.as_str()), deny));
    }
    Ok(decisions)
}
