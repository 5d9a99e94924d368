//! Reading the queue's rows back (statuses, suspended states, outcomes),
//! checking decisions against the calls that wait, and naming a failed
//! write.

use serde_json::Value;
use tinyagents_core::RunId;
use tinyagents_harness::{ApprovalDecision, PendingCall, SuspendedRun};

use super::{QueueError, QueueStatus, QueuedRun, RunOutcome};
use crate::database::PgDatabase;
use crate::error::{PgError, detail};

pub(super) fn write_error(
    db: &PgDatabase,
    operation: &'static str,
    err: &tokio_postgres::Error,
) -> PgError {
    if crate::error::is_read_only(err) {
        PgError::ReadOnly {
            target: db.target().to_owned(),
            operation,
            detail: detail(err),
        }
    } else {
        PgError::Query {
            operation,
            detail: detail(err),
        }
    }
}

pub(crate) fn status_of(run: &RunId, text: &str) -> Result<QueueStatus, QueueError> {
    QueueStatus::parse(text).ok_or_else(|| QueueError::Unreadable {
        run: run.clone(),
        what: "status",
        detail: format!("unknown status '{text}'"),
    })
}

pub(crate) fn suspended_of(
    run: &RunId,
    value: Option<Value>,
) -> Result<Option<SuspendedRun>, QueueError> {
    value
        .map(|value| {
            let suspended: SuspendedRun =
                serde_json::from_value(value).map_err(|e| QueueError::Unreadable {
                    run: run.clone(),
                    what: "suspended state",
                    detail: e.to_string(),
                })?;
            suspended
                .check_format()
                .map_err(|e| QueueError::Unreadable {
                    run: run.clone(),
                    what: "suspended state",
                    detail: e.to_string(),
                })?;
            Ok(suspended)
        })
        .transpose()
}

/// Every waiting call decided once, and nothing else.
pub(super) fn check_decisions(
    run: &RunId,
    suspended: &SuspendedRun,
    decisions: &[ApprovalDecision],
) -> Result<(), QueueError> {
    let waiting: Vec<&PendingCall> = suspended.pending().collect();
    let undecided: Vec<&str> = waiting
        .iter()
        .filter(|p| !decisions.iter().any(|d| d.call_id == p.call.id))
        .map(|p| p.call.id.as_str())
        .collect();
    if !undecided.is_empty() {
        return Err(QueueError::Decisions {
            run: run.clone(),
            problem: format!("calls left undecided: {}", undecided.join(", ")),
        });
    }
    let strangers: Vec<&str> = decisions
        .iter()
        .filter(|d| !waiting.iter().any(|p| p.call.id == d.call_id))
        .map(|d| d.call_id.as_str())
        .collect();
    if !strangers.is_empty() {
        return Err(QueueError::Decisions {
            run: run.clone(),
            problem: format!(
                "decisions for calls that do not wait: {}",
                strangers.join(", ")
            ),
        });
    }
    Ok(())
}

pub(super) fn decode_run(row: &tokio_postgres::Row) -> Result<QueuedRun, QueueError> {
    let id = RunId::from(row.get::<_, String>(0));
    let status = status_of(&id, row.get(1))?;
    let epoch: i64 = row.get(3);
    let attempts: i32 = row.get(4);
    let outcome: Option<Value> = row.get(5);
    let outcome = outcome
        .map(|v| {
            serde_json::from_value::<RunOutcome>(v).map_err(|e| QueueError::Unreadable {
                run: id.clone(),
                what: "outcome",
                detail: e.to_string(),
            })
        })
        .transpose()?;
    let suspended = if status == QueueStatus::AwaitingApproval {
        suspended_of(&id, row.get(7))?
    } else {
        None
    };
    Ok(QueuedRun {
        pending: suspended
            .map(|s| s.pending().cloned().collect())
            .unwrap_or_default(),
        status,
        owner: row.get(2),
        epoch: u64::try_from(epoch).unwrap_or(0),
        attempts: u32::try_from(attempts).unwrap_or(0),
        outcome,
        error: row.get(6),
        id,
    })
}
