//! What a stored suspended state must satisfy before anything of it runs.
//!
//! A `SuspendedRun` and a person's decisions come back from the host's
//! storage, where anyone with access may have edited them. Nothing in them
//! may widen what the run may do: the suspended turn must be the one its
//! transcript ends with (same calls, in order, once each), every decision
//! must name a waiting call of this run, and, with a ledger, the state must
//! be the run's latest and spend no less than its checkpoint says.

use std::collections::HashSet;

use tinyagents_core::{BudgetCounts, CallId, Message, RunId, TinyAgentsError};

use crate::run::{ApprovalDecision, SuspendedRun, TurnEntry};

/// Refuses a suspended state whose turn does not match its transcript.
pub(crate) fn check_turn(suspended: &SuspendedRun) -> Result<(), TinyAgentsError> {
    let run = &suspended.run_id;
    let Some(Message::Assistant { tool_calls, .. }) = suspended.state.messages.last() else {
        return Err(malformed(
            run,
            "its transcript does not end with the suspended turn's tool calls",
        ));
    };
    if tool_calls.len() != suspended.turn.len() {
        return Err(malformed(
            run,
            &format!(
                "its turn has {} entries but the model issued {} calls",
                suspended.turn.len(),
                tool_calls.len()
            ),
        ));
    }
    let mut seen = HashSet::with_capacity(tool_calls.len());
    for (entry, issued) in suspended.turn.iter().zip(tool_calls) {
        if !seen.insert(&issued.id) {
            return Err(malformed(run, &format!("call {} appears twice", issued.id)));
        }
        let (id, name) = match entry {
            TurnEntry::Pending { pending } => {
                if pending.run_id != *run {
                    return Err(malformed(
                        run,
                        &format!(
                            "waiting call {} belongs to run {}",
                            pending.call.id, pending.run_id
                        ),
                    ));
                }
                (&pending.call.id, Some(pending.call.name.as_str()))
            }
            TurnEntry::Settled {
                message: Message::Tool { call_id, name, .. },
            } => (call_id, Some(name.as_str())),
            TurnEntry::Settled { .. } => (&issued.id, None),
        };
        if *id != issued.id || name != Some(issued.name.as_str()) {
            return Err(malformed(
                run,
                &format!(
                    "its turn does not match the calls the model issued at call {} ({})",
                    issued.id, issued.name
                ),
            ));
        }
    }
    Ok(())
}

/// Matches each waiting call with its decision: every waiting call needs
/// exactly one, and every decision must name a waiting call of this run.
pub(crate) fn match_decisions<'d>(
    suspended: &SuspendedRun,
    decisions: &'d [ApprovalDecision],
) -> Result<Vec<Option<&'d ApprovalDecision>>, TinyAgentsError> {
    let run = &suspended.run_id;
    let waiting: HashSet<&CallId> = suspended.pending().map(|p| &p.call.id).collect();
    let mut decided = HashSet::with_capacity(decisions.len());
    for decision in decisions {
        if decision.run_id != *run {
            return Err(TinyAgentsError::State(format!(
                "the decision on call {} was given for run {}, not for run {run}",
                decision.call_id, decision.run_id
            )));
        }
        if !waiting.contains(&decision.call_id) {
            return Err(TinyAgentsError::State(format!(
                "a decision names call {}, which is not waiting for one in run {run}",
                decision.call_id
            )));
        }
        if !decided.insert(&decision.call_id) {
            return Err(TinyAgentsError::State(format!(
                "call {} has more than one decision",
                decision.call_id
            )));
        }
    }
    suspended
        .turn
        .iter()
        .map(|entry| match entry {
            TurnEntry::Settled { .. } => Ok(None),
            TurnEntry::Pending { pending } => decisions
                .iter()
                .find(|d| d.call_id == pending.call.id)
                .map(Some)
                .ok_or_else(|| {
                    TinyAgentsError::State(format!(
                        "no decision for pending call {} ({}); every pending call needs one",
                        pending.call.id, pending.call.name
                    ))
                }),
        })
        .collect()
}

/// Refuses a suspended state that the ledger's checkpoint of the same run
/// contradicts: another turn than the run's last checkpoint (a suspension
/// makes its checkpoint durable), another transcript, another depth, other
/// properties, or less spent than was checkpointed.
pub(crate) fn check_against_checkpoint(
    suspended: &SuspendedRun,
    checkpoint: &SuspendedRun,
) -> Result<(), TinyAgentsError> {
    let run = &suspended.run_id;
    let (stored, saved) = (suspended.state.turn, checkpoint.state.turn);
    if saved > stored {
        return Err(TinyAgentsError::State(format!(
            "suspended run {run} is stale: it stopped at turn {stored}, and the effect ledger has the run at turn {saved}"
        )));
    }
    if saved < stored {
        return Err(malformed(
            run,
            &format!(
                "the effect ledger has no checkpoint of its turn {stored} (its last is of turn {saved}); recover the run instead"
            ),
        ));
    }
    if checkpoint.state != suspended.state {
        return Err(malformed(
            run,
            &format!("its transcript differs from the effect ledger's checkpoint of turn {saved}"),
        ));
    }
    if checkpoint.depth != suspended.depth {
        return Err(malformed(
            run,
            &format!(
                "its depth is {}, the effect ledger's checkpoint says {}",
                suspended.depth, checkpoint.depth
            ),
        ));
    }
    if checkpoint.properties != suspended.properties {
        return Err(malformed(
            run,
            "its properties differ from the effect ledger's checkpoint",
        ));
    }
    if let Some(field) = spent_less(&suspended.budget, &checkpoint.budget) {
        return Err(malformed(
            run,
            &format!("it has spent {field} than the effect ledger's checkpoint records"),
        ));
    }
    if suspended.active_ms < checkpoint.active_ms {
        return Err(malformed(
            run,
            "its active time is shorter than the effect ledger's checkpoint records",
        ));
    }
    Ok(())
}

/// The first part of the budget in which `stored` is below `saved`, as
/// the resume's refusal says it. Tokens are read from what a state spent
/// (`BudgetCounts::spent`, the count a resume goes on from) as well as
/// from its total, so neither can be edited down alone.
fn spent_less(stored: &BudgetCounts, saved: &BudgetCounts) -> Option<&'static str> {
    let (stored_spent, saved_spent) = (stored.spent(), saved.spent());
    if stored.tool_calls < saved.tool_calls {
        Some("fewer tool calls")
    } else if stored.nested_tool_calls < saved.nested_tool_calls {
        Some("fewer nested tool calls")
    } else if stored.model_calls < saved.model_calls {
        Some("fewer model calls")
    } else if stored.tokens < saved.tokens || stored_spent.usage.total() < saved_spent.usage.total()
    {
        Some("fewer tokens")
    } else if stored_spent.cost < saved_spent.cost {
        Some("less money")
    } else {
        None
    }
}

fn malformed(run: &RunId, detail: &str) -> TinyAgentsError {
    TinyAgentsError::State(format!(
        "suspended run {run} cannot be resumed: {detail}; nothing was run"
    ))
}
