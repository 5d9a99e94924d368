//! `approve`: records decisions for a run's waiting calls, for `resume`
//! (in this process or any other) to act on.

use std::path::Path;

use serde_json::json;

use super::{open_records, record, store_paths};
use crate::exit;
use crate::view::out;

/// `tinyagents approve RUN [--call ID]… [--deny [--reason TEXT]]`.
pub(crate) fn approve(
    run_id: &str,
    calls: &[String],
    deny: bool,
    reason: Option<&str>,
    store: Option<&Path>,
    json: bool,
) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    let mut records = open_records(&paths)?;
    let record = record(&records, &paths, run_id)?;
    let Some(suspended) = &record.suspended else {
        anyhow::bail!(
            "run '{run_id}' does not wait for a decision (it is {})",
            record.status.as_str().replace('_', " ")
        );
    };
    let pending: Vec<_> = suspended.pending().collect();
    for call in calls {
        if !pending.iter().any(|p| p.call.id.as_str() == call) {
            let waiting: Vec<String> = pending
                .iter()
                .map(|p| format!("{} ({})", p.call.id, p.call.name))
                .collect();
            anyhow::bail!(
                "call '{call}' of run '{run_id}' does not wait for a decision; waiting: {}",
                waiting.join(", ")
            );
        }
    }
    let chosen: Vec<_> = pending
        .iter()
        .filter(|p| calls.is_empty() || calls.iter().any(|c| c == p.call.id.as_str()))
        .collect();
    let decisions: Vec<_> = chosen
        .iter()
        .map(|p| {
            if deny {
                p.deny(reason.unwrap_or("denied by a person"))
            } else {
                p.approve()
            }
        })
        .collect();
    records.decide(run_id, &decisions)?;
    let verb = if deny { "denied" } else { "approved" };
    for decision in &decisions {
        if json {
            out(
                &json!({"type": "decision", "run_id": run_id, "call_id": decision.call_id,
                        "tool": decision.tool_name, "approved": decision.approved,
                        "reason": decision.reason})
                .to_string(),
            );
        } else {
            out(&format!(
                "{verb} {} {}",
                decision.call_id, decision.tool_name
            ));
        }
    }
    let decided = records.get(run_id)?.map_or(0, |r| r.decisions.len());
    if !json {
        if decided >= pending.len() {
            out(&format!(
                "every waiting call is decided: `tinyagents resume {run_id}`"
            ));
        } else {
            out(&format!(
                "{} of {} waiting calls decided",
                decided,
                pending.len()
            ));
        }
    }
    Ok(exit::OK)
}
