//! The state machine of a row, shared by every backend so that they refuse
//! the same things with the same errors.

use tinyagents_core::{CallId, RunId, ToolReplay};

use crate::error::{CallIdentity, LedgerError, LedgerResult};
use crate::row::{CallStatus, StartedRow};

/// What a backend knows of an existing row when the same call starts again.
#[derive(Debug)]
pub(crate) struct Existing<'a> {
    pub(crate) status: CallStatus,
    pub(crate) tool_name: &'a str,
    pub(crate) args_hash: &'a str,
    pub(crate) replay: ToolReplay,
}

/// Whether a call whose row exists may start again (a restart): only an
/// in-doubt, replay-safe call of the same tool with the same arguments.
pub(crate) fn check_restart(existing: &Existing<'_>, new: &StartedRow) -> LedgerResult<()> {
    if existing.status.is_settled() {
        return Err(LedgerError::AlreadySettled {
            run: new.run_id.clone(),
            call: new.call_id.clone(),
            status: existing.status,
        });
    }
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
    if existing.replay == ToolReplay::Never || new.replay == ToolReplay::Never {
        return Err(LedgerError::ReplayRefused {
            run: new.run_id.clone(),
            call: new.call_id.clone(),
            tool: new.tool_name.clone(),
        });
    }
    Ok(())
}

/// Whether a call may settle, given the status of its row (`None`: no row).
pub(crate) fn check_settle(
    run: &RunId,
    call: &CallId,
    status: Option<CallStatus>,
) -> LedgerResult<()> {
    match status {
        None => Err(LedgerError::NotStarted {
            run: run.clone(),
            call: call.clone(),
        }),
        Some(CallStatus::Started) => Ok(()),
        Some(status) => Err(LedgerError::AlreadySettled {
            run: run.clone(),
            call: call.clone(),
            status,
        }),
    }
}

/// Whether a checkpoint of `offered` version may replace the `stored` one.
pub(crate) fn check_checkpoint(run: &RunId, stored: Option<u64>, offered: u64) -> LedgerResult<()> {
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
pub(crate) fn replay_str(replay: ToolReplay) -> &'static str {
    match replay {
        ToolReplay::Safe => "safe",
        ToolReplay::Never => "never",
    }
}

/// Parses a stored replay class.
pub(crate) fn parse_replay(text: &str) -> Option<ToolReplay> {
    match text {
        "safe" => Some(ToolReplay::Safe),
        "never" => Some(ToolReplay::Never),
        _ => None,
    }
}
