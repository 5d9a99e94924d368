//! The state machine of a row, shared by every backend so that they refuse
//! the same things with the same errors.

use tinyagents_core::{CallId, RunId, ToolControl, ToolReplay};

use crate::error::{CallIdentity, LedgerError, LedgerResult};
use crate::resolution::Resolve;
use crate::row::{CallStatus, LedgerRow, StartedRow, StoredResult};

/// What a backend knows of an existing row when the same call starts again.
#[derive(Debug)]
pub struct Existing<'a> {
    /// The row's status.
    pub status: CallStatus,
    /// The tool it was recorded as.
    pub tool_name: &'a str,
    /// The hash of the arguments it was recorded with.
    pub args_hash: &'a str,
    /// Its replay class.
    pub replay: ToolReplay,
}

impl<'a> Existing<'a> {
    /// What `row` says of its call.
    pub fn of(row: &'a LedgerRow) -> Self {
        Self {
            status: row.status,
            tool_name: &row.tool_name,
            args_hash: &row.args_hash,
            replay: row.replay,
        }
    }
}

/// What a permitted `record_started` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// No row: write a new one (one attempt).
    Insert,
    /// A deferred row, or an in-doubt replay-safe one: back to started, one
    /// more attempt, the settled time and result cleared.
    Restart,
}

/// Whether a call may start, given its row (`None`: no row) and whether its
/// run is marked finished. The precedence, the same for every backend:
///
/// 1. a row naming another tool or other arguments: [`LedgerError::Mismatch`],
///    whatever its state and the run's;
/// 2. a settled row (completed, failed, interrupted):
///    [`LedgerError::AlreadySettled`];
/// 3. a finished run: [`LedgerError::RunFinished`] (a started or deferred row,
///    or no row);
/// 4. a deferred row: a restart, whatever the replay class;
/// 5. a started row: [`LedgerError::ReplayRefused`] when the row's or the new
///    replay class is `Never`, else a restart;
/// 6. no row: an insert.
///
/// A refused start changes nothing (the backend writes only on `Ok`).
pub fn check_start(
    existing: Option<&Existing<'_>>,
    run_finished: bool,
    new: &StartedRow,
) -> LedgerResult<Start> {
    if let Some(existing) = existing {
        if existing.tool_name != new.tool_name || existing.args_hash != new.args_hash {
            return Err(LedgerError::Mismatch {
                run: new.run_id.clone(),
                call: new.call_id.clone(),
                recorded: Box::new(CallIdentity {
                    tool_name: existing.tool_name.to_owned(),
                    args_hash: existing.args_hash.to_owned(),
                }),
                offered: Box::new(CallIdentity {
                    tool_name: new.tool_name.clone(),
                    args_hash: new.args_hash.clone(),
                }),
            });
        }
        if existing.status.is_settled() {
            return Err(already_settled(new, existing.status));
        }
    }
    if run_finished {
        return Err(LedgerError::RunFinished {
            run: new.run_id.clone(),
        });
    }
    let Some(existing) = existing else {
        return Ok(Start::Insert);
    };
    let never = existing.replay == ToolReplay::Never || new.replay == ToolReplay::Never;
    match existing.status {
        // A deferred call did not act: it starts again whatever its class.
        CallStatus::Deferred => Ok(Start::Restart),
        CallStatus::Started if never => Err(LedgerError::ReplayRefused {
            run: new.run_id.clone(),
            call: new.call_id.clone(),
            tool: new.tool_name.clone(),
        }),
        CallStatus::Started => Ok(Start::Restart),
        // Refused above, before the finished run; named here so that a new
        // status has to be placed.
        CallStatus::Completed | CallStatus::Failed | CallStatus::Interrupted => {
            Err(already_settled(new, existing.status))
        }
    }
}

fn already_settled(new: &StartedRow, status: CallStatus) -> LedgerError {
    LedgerError::AlreadySettled {
        run: new.run_id.clone(),
        call: new.call_id.clone(),
        status,
    }
}

/// Whether a call may settle, given the status of its row (`None`: no row):
/// only a started row settles. A deferred row must start again first.
pub fn check_settle(run: &RunId, call: &CallId, status: Option<CallStatus>) -> LedgerResult<()> {
    match status {
        None => Err(LedgerError::NotStarted {
            run: run.clone(),
            call: call.clone(),
        }),
        Some(CallStatus::Started) => Ok(()),
        Some(CallStatus::Deferred) => Err(LedgerError::CallDeferred {
            run: run.clone(),
            call: call.clone(),
        }),
        Some(status) => Err(LedgerError::AlreadySettled {
            run: run.clone(),
            call: call.clone(),
            status,
        }),
    }
}

/// What a permitted `resolve` writes, besides the resolution itself.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolveWrite {
    /// A row still in doubt settles: completed with the result found,
    /// deferred (it never acted), or interrupted (still unknown).
    Settle {
        /// The status it settles with.
        status: CallStatus,
        /// The result it settles with.
        result: StoredResult,
    },
    /// An interrupted row keeps its status and result; only the resolution
    /// is recorded.
    Record,
}

/// Whether `resolve` may be recorded on `row` (`None`: no row), and what it
/// writes:
///
/// - no row: [`LedgerError::NotStarted`];
/// - started (in doubt): it settles as [`ResolveWrite::Settle`] says
///   (`Happened` → completed with its result, `NotHappened` → deferred,
///   `Unknown` → interrupted);
/// - interrupted, with no resolution or an unknown one: the resolution is
///   recorded ([`ResolveWrite::Record`]);
/// - interrupted with a known effect: [`LedgerError::AlreadyResolved`];
/// - completed, failed or deferred: [`LedgerError::NotInDoubt`].
pub fn check_resolve(
    run: &RunId,
    call: &CallId,
    row: Option<&LedgerRow>,
    resolve: &Resolve,
    max_bytes: usize,
) -> LedgerResult<ResolveWrite> {
    let Some(row) = row else {
        return Err(LedgerError::NotStarted {
            run: run.clone(),
            call: call.clone(),
        });
    };
    match row.status {
        CallStatus::Started => {
            let (status, result) = resolve.settles_as(max_bytes);
            Ok(ResolveWrite::Settle { status, result })
        }
        CallStatus::Interrupted => match &row.resolution {
            Some(known) if known.effect.is_known() => Err(LedgerError::AlreadyResolved {
                run: run.clone(),
                call: call.clone(),
                by: known.by.clone(),
                effect: known.effect,
            }),
            _ => Ok(ResolveWrite::Record),
        },
        status @ (CallStatus::Completed | CallStatus::Failed | CallStatus::Deferred) => {
            Err(LedgerError::NotInDoubt {
                run: run.clone(),
                call: call.clone(),
                status,
            })
        }
    }
}

/// Whether a checkpoint (a base or an appended entry) of `offered` version
/// may follow the `stored` one: only when it is not older.
pub fn check_checkpoint(run: &RunId, stored: Option<u64>, offered: u64) -> LedgerResult<()> {
    match stored {
        Some(stored) if offered < stored => Err(LedgerError::StaleCheckpoint {
            run: run.clone(),
            stored,
            offered,
        }),
        _ => Ok(()),
    }
}

/// The stored text of a replay class.
pub fn replay_str(replay: ToolReplay) -> &'static str {
    match replay {
        ToolReplay::Safe => "safe",
        ToolReplay::Never => "never",
    }
}

/// Parses a stored replay class.
pub fn parse_replay(text: &str) -> Option<ToolReplay> {
    match text {
        "safe" => Some(ToolReplay::Safe),
        "never" => Some(ToolReplay::Never),
        _ => None,
    }
}

/// The stored text of a tool's control of the run.
pub fn control_str(control: ToolControl) -> &'static str {
    match control {
        ToolControl::Terminate => "terminate",
        ToolControl::ReturnDirect => "return_direct",
    }
}

/// Parses a stored control.
pub fn parse_control(text: &str) -> Option<ToolControl> {
    match text {
        "terminate" => Some(ToolControl::Terminate),
        "return_direct" => Some(ToolControl::ReturnDirect),
        _ => None,
    }
}
