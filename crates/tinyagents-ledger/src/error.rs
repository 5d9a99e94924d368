//! What can go wrong in a ledger, and what the harness does when a started
//! row cannot be written.

use std::path::PathBuf;

use tinyagents_core::{CallId, ErrorSource, RunId};

use crate::resolution::{Effect, ResolvedBy};
use crate::row::CallStatus;

/// The policy the harness applies when the started row of a call cannot be
/// written.
///
/// The default is [`LedgerFailure::Abort`]: fail closed, because a call that
/// runs without a started row is invisible to recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LedgerFailure {
    /// Refuse the call: the tool does not run, and its result says why.
    #[default]
    Abort,
    /// Run the call anyway and emit a warning event. After a crash, recovery
    /// cannot see that this call ever started.
    Continue,
}

/// What identifies a call's effect besides its id: the tool and the hash of
/// its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallIdentity {
    /// The tool's name.
    pub tool_name: String,
    /// The hash of the prepared arguments.
    pub args_hash: String,
}

/// An error of an [`EffectLedger`](crate::EffectLedger) operation or of
/// opening a ledger store.
///
/// The variants carry the run, call or file they concern, so that a message
/// names what is wrong without its caller having to add context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The ledger file could not be opened or created (permissions, a
    /// directory in its place, a missing parent directory, …).
    #[error("effect ledger {path}: cannot open: {detail}")]
    Open {
        /// The ledger file.
        path: PathBuf,
        /// What the storage engine or the operating system said.
        detail: String,
        /// The storage engine's or the operating system's error, when one
        /// was met (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// The file exists but its content is damaged (not a database at all, or
    /// a database whose pages fail the integrity check).
    #[error("effect ledger {path}: the file is corrupt: {detail}")]
    Corrupt {
        /// The ledger file.
        path: PathBuf,
        /// What is damaged.
        detail: String,
        /// The storage engine's error, when it is what found the damage
        /// (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// The file is a readable database but not an effect ledger (another
    /// application's database, or an empty file). It is never overwritten.
    #[error("effect ledger {path}: not a tinyagents effect ledger: {detail}")]
    NotALedger {
        /// The file.
        path: PathBuf,
        /// Why it is not recognised.
        detail: String,
    },
    /// The ledger was written by a newer version of this crate, whose schema
    /// this version cannot read safely.
    #[error(
        "effect ledger {path}: schema version {found} is newer than the newest this build \
         knows ({supported}); upgrade tinyagents-ledger to open it"
    )]
    UnsupportedVersion {
        /// The ledger file.
        path: PathBuf,
        /// The version in the file.
        found: i64,
        /// The newest version this build can migrate to.
        supported: i64,
    },
    /// The file does not exist and the options forbid creating it.
    #[error("effect ledger {path}: the file does not exist (creation was not allowed)")]
    Missing {
        /// The path that was looked up.
        path: PathBuf,
    },
    /// Reading or writing the store failed (I/O error, disk full, a lock that
    /// was not released in time, a row that cannot be decoded).
    #[error("effect ledger: {operation} failed: {detail}")]
    Storage {
        /// The operation, such as `record_started` or `commit`.
        operation: &'static str,
        /// What the storage engine said.
        detail: String,
        /// The storage engine's (or decoder's) error, when one was met
        /// (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// The ledger has been shut down, or its writer stopped.
    #[error("effect ledger is closed: {detail}")]
    Closed {
        /// Why it is closed.
        detail: String,
    },
    /// A started row for a call that already settled: a settled call is never
    /// executed again, its recorded result is used instead.
    #[error("call {call} of run {run} already settled ({status}); it is not started again")]
    AlreadySettled {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// How it settled.
        status: CallStatus,
    },
    /// A call restarted under an id whose row names another tool or other
    /// arguments: the replay is not the same call.
    #[error(
        "call {call} of run {run} was recorded as tool '{}' with arguments {}; refusing to \
         record it as '{}' with arguments {}",
        recorded.tool_name, recorded.args_hash, offered.tool_name, offered.args_hash
    )]
    Mismatch {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// What the row holds.
        recorded: Box<CallIdentity>,
        /// What the new start names.
        offered: Box<CallIdentity>,
    },
    /// A call whose tool must not repeat (`ToolReplay::Never`) is in doubt
    /// (started, never settled); starting it again could repeat its effect.
    #[error(
        "call {call} of run {run} (tool '{tool}') started before and its outcome is unknown; \
         the tool must not be replayed (ToolReplay::Never)"
    )]
    ReplayRefused {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// The tool.
        tool: String,
    },
    /// A settled row for a call that has no started row.
    #[error("call {call} of run {run} has no started row; it cannot settle")]
    NotStarted {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
    },
    /// A started row for a run that was marked finished.
    #[error("run {run} is finished; no call of it can start")]
    RunFinished {
        /// The run.
        run: RunId,
    },
    /// Writes whose callers did not wait for them failed after they were
    /// accepted (a settled row of a call in flight, applied in the
    /// background); reported by the next `flush`. Those calls are in doubt.
    #[error("{count} background ledger write(s) failed since the last flush; the first: {first}")]
    Deferred {
        /// How many failed.
        count: usize,
        /// The first failure.
        first: Box<LedgerError>,
    },
    /// A settle of a deferred call: a deferred row rests until the call
    /// starts again (`record_started`), and only then settles.
    #[error(
        "call {call} of run {run} is deferred (it asked for an approval and did not act); it \
         settles only after it starts again"
    )]
    CallDeferred {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
    },
    /// `begin_run` of a run id the ledger already knows (rows, a checkpoint,
    /// a finished mark or an earlier claim).
    #[error(
        "run {run} already exists in the effect ledger: a new run needs a new id; resume or \
         recover it instead"
    )]
    RunExists {
        /// The run.
        run: RunId,
    },
    /// `append_checkpoint` of a run without a base checkpoint: an entry
    /// appends to a base saved with `save_checkpoint`.
    #[error("run {run} has no checkpoint to append to; save a base checkpoint first")]
    NoCheckpoint {
        /// The run.
        run: RunId,
    },
    /// `resolve` of a call whose effect is known already: it settled with a
    /// result or a failure, or it is deferred (it did not act).
    #[error(
        "call {call} of run {run} is not in doubt ({status}); only a started call, or one \
         answered \"interrupted, outcome unknown\", can be resolved"
    )]
    NotInDoubt {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// Its status.
        status: CallStatus,
    },
    /// `resolve` of a call whose effect was already found out (happened or
    /// not): a decision is recorded once.
    #[error("call {call} of run {run} was resolved before by {by}: {effect}")]
    AlreadyResolved {
        /// The run.
        run: RunId,
        /// The call.
        call: CallId,
        /// Who resolved it.
        by: ResolvedBy,
        /// What they found.
        effect: Effect,
    },
    /// The write came from a worker whose lease on the run ended: another
    /// worker claimed it since (a higher epoch). Nothing was written; the
    /// worker must stop the run.
    #[error(
        "run {run} was claimed by another worker (epoch {current}) since this worker's lease \
         (epoch {held}) ended; the write is refused and this worker must stop the run"
    )]
    Fenced {
        /// The claimed run the writer works for.
        run: RunId,
        /// The epoch the writer holds.
        held: u64,
        /// The run's epoch in the database (0: the run is gone).
        current: u64,
    },
    /// A checkpoint older than the one stored (a stale writer).
    #[error("run {run}: checkpoint version {offered} is older than the stored version {stored}")]
    StaleCheckpoint {
        /// The run.
        run: RunId,
        /// The stored version.
        stored: u64,
        /// The version offered.
        offered: u64,
    },
}

impl LedgerError {
    /// A storage error of `operation`, said in words only.
    pub(crate) fn storage(operation: &'static str, detail: impl Into<String>) -> Self {
        Self::Storage {
            operation,
            detail: detail.into(),
            source: None,
        }
    }

    /// A storage error of `operation` that `error` caused: its text is the
    /// detail, and it is the source.
    #[cfg(feature = "sqlite")]
    pub(crate) fn storage_error(
        operation: &'static str,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Storage {
            operation,
            detail: error.to_string(),
            source: Some(ErrorSource::new(error)),
        }
    }
}

/// The result type of ledger operations.
pub type LedgerResult<T> = Result<T, LedgerError>;
