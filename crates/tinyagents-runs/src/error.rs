//! Why a run store refused or failed.

use tinyagents_core::{CallId, ErrorSource, RunId};

use crate::record::RecordStatus;

/// The result of a run store operation.
pub type RunStoreResult<T> = Result<T, RunStoreError>;

/// Why a run store operation was refused or failed. Every refusal changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunStoreError {
    /// The database failed.
    #[error("the run store failed to {operation}: {detail}")]
    Storage {
        /// What it was doing.
        operation: &'static str,
        /// What the database said.
        detail: String,
        /// The database's error (`detail` already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The file is damaged or not a database.
    #[error("run store {path} is damaged or not a run store: {detail}")]
    Corrupt {
        /// The file.
        path: String,
        /// What SQLite said.
        detail: String,
        /// SQLite's error (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// The file belongs to another application.
    #[error("{path} is not a tinyagents run store (application id {found:#x})")]
    NotARunStore {
        /// The file.
        path: String,
        /// Its application id.
        found: i32,
    },
    /// The store was written by a newer version.
    #[error("run store {path} has schema version {found}; this version reads up to {supported}")]
    TooNew {
        /// The file or database.
        path: String,
        /// Its version.
        found: i64,
        /// The newest this build reads.
        supported: i64,
    },
    /// A run of that id is recorded already.
    #[error("run {run} is in the run store already; a new run needs a new id")]
    Exists {
        /// The run.
        run: RunId,
    },
    /// No run of that id is recorded.
    #[error("run {run} is not in the run store")]
    NotFound {
        /// The run.
        run: RunId,
    },
    /// The run is not where the operation needs it.
    #[error("run {run} is {status}, not {expected}")]
    WrongStatus {
        /// The run.
        run: RunId,
        /// Where it is.
        status: RecordStatus,
        /// Where the operation needs it.
        expected: &'static str,
    },
    /// A decision named a call that does not wait in the run's last
    /// suspension.
    #[error("call {call} of run {run} does not wait for a decision; waiting: {}", list(.waiting))]
    NotWaiting {
        /// The run.
        run: RunId,
        /// The call named.
        call: CallId,
        /// The calls that do wait, undecided.
        waiting: Vec<CallId>,
    },
    /// A decision named a call decided already (a decision is made once).
    #[error("call {call} of run {run} is decided already ({verdict} by {by})")]
    AlreadyDecided {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// `approved` or `denied`.
        verdict: &'static str,
        /// Who decided it.
        by: String,
    },
    /// The run was not started from an agents file (a code agent's run).
    #[error("run {run} was not started from an agents file")]
    NoFile {
        /// The run.
        run: RunId,
    },
    /// The run was taken by another claim since it was read (its epoch
    /// moved on), or the claim's holder no longer holds it.
    #[error("run {run} was taken by another holder (epoch {found}, expected {expected})")]
    Taken {
        /// The run.
        run: RunId,
        /// The epoch the caller saw.
        expected: u64,
        /// The epoch it has.
        found: u64,
    },
    /// A sealed part of the run does not match its seal: it was edited
    /// outside the store, or sealed with another key. Nothing of it was
    /// used.
    #[error(
        "run {run}: its {what} does not match its seal (edited outside the store, or sealed with another key); nothing of it was used"
    )]
    Tampered {
        /// The run.
        run: RunId,
        /// Which part: `record`, `suspended state`, `waiting call p3`, …
        what: String,
    },
    /// A stored value this build cannot read.
    #[error("run {run}: its stored {what} is unreadable: {detail}")]
    Unreadable {
        /// The run.
        run: RunId,
        /// Which value.
        what: &'static str,
        /// What the decoder said.
        detail: String,
        /// The decoder's error (`detail` already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The sealing key is unusable.
    #[error("the run store's sealing key {detail}")]
    Key {
        /// What is wrong with it.
        detail: String,
        /// The operating system's or the key reader's error, when one was met (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
}

fn list(calls: &[CallId]) -> String {
    if calls.is_empty() {
        return "none".to_owned();
    }
    calls
        .iter()
        .map(CallId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}
