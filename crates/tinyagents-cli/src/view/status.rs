//! How a node of the tree stands: what a run's end, a limit that stopped
//! it, or a call's ledger row (a segment shown from the ledger) says.

use tinyagents::core::{Cost, LimitKind};
use tinyagents::ledger::{CallStatus, LedgerRow};
use tinyagents::prelude::RunStatus;

use super::spend;

/// How a node stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Status {
    /// Still going.
    Running,
    /// Ended well.
    Done,
    /// Ended with an error (the text) or the tool's own error result.
    Failed(String),
    /// Waits for a person (the reason).
    Waiting(String),
    /// Cancelled, or ended by a limit (what).
    Stopped(String),
}

/// How a call's ledger row shows in the tree.
pub(super) fn seeded_status(row: &LedgerRow) -> Status {
    let content = || {
        row.result
            .as_ref()
            .map(|r| r.content.clone())
            .unwrap_or_default()
    };
    match row.status {
        CallStatus::Started => Status::Stopped("in doubt".to_owned()),
        CallStatus::Deferred => Status::Waiting(content()),
        CallStatus::Completed if row.result.as_ref().is_some_and(|r| r.is_error) => {
            Status::Failed(content())
        }
        CallStatus::Completed => Status::Done,
        CallStatus::Failed | CallStatus::Interrupted => Status::Failed(content()),
    }
}

pub(super) fn run_status(status: RunStatus) -> Status {
    match status {
        RunStatus::Completed | RunStatus::Terminated => Status::Done,
        RunStatus::AwaitingApproval => Status::Waiting("awaiting approval".to_owned()),
        RunStatus::Cancelled => Status::Stopped("cancelled".to_owned()),
        RunStatus::LimitReached(kind) => Status::Stopped(format!("limit reached: {kind}")),
    }
}

/// What a limit that stopped a run says: `max_cost 3 USD (2.5 spent or
/// held)`; money in billionths of the smallest unit on the event.
pub(super) fn limit_said(kind: LimitKind, limit: u64, used: u64, currency: Option<&str>) -> String {
    match kind {
        LimitKind::Cost => {
            let currency = currency.unwrap_or("");
            format!(
                "{kind} {} ({} spent or held)",
                spend::money(Cost::from_nanos(limit), currency),
                spend::money(Cost::from_nanos(used), currency)
            )
        }
        LimitKind::Tokens => format!("{kind} {limit} ({used} spent or held)"),
        _ => format!("{kind} {limit}"),
    }
}
