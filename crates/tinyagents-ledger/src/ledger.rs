//! The `EffectLedger` trait: what every backend offers the harness.

use std::sync::Arc;

use async_trait::async_trait;
use tinyagents_core::{CallId, RunId};

use crate::clock::Timestamp;
use crate::error::LedgerResult;
use crate::row::{LedgerRow, Outcome, StartedRow};

/// A run's state saved at a turn boundary, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The version the harness gave it (the turn index, increasing per run).
    pub version: u64,
    /// The state, serialized by the harness (which puts its own format
    /// version inside).
    pub data: Vec<u8>,
    /// When it was saved.
    pub saved_at: Timestamp,
}

/// What [`EffectLedger::prune_finished`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Finished runs whose records were removed.
    pub runs: u64,
    /// Call rows removed.
    pub rows: u64,
    /// Checkpoints removed.
    pub checkpoints: u64,
}

/// A ledger shared by the harness and its tasks.
pub type SharedLedger = Arc<dyn EffectLedger>;

/// The effect ledger: one row per tool call, written before the tool runs
/// (started) and after it ends (settled), plus one checkpoint per run.
///
/// Rows are keyed by (run id, call id). The trait makes no single-process
/// assumption: every operation goes through the store, so several processes
/// (or, with a server backend, several machines) may share one ledger.
///
/// Durability contract (see `docs/effect-ledger.md`):
/// - when [`record_started`](Self::record_started) returns `Ok`, the row
///   survives a crash of the process and of the machine;
/// - a settled row, a checkpoint, a finished mark and a prune may ride on the
///   next durable commit: a crash can lose the last of them, and a call
///   whose settled row was lost is seen as in doubt. [`flush`](Self::flush)
///   makes everything acknowledged so far durable.
#[async_trait]
pub trait EffectLedger: Send + Sync {
    /// Records that a call is about to run. Durable when it returns `Ok`.
    ///
    /// Starting a call whose row already exists is a restart (recovery of a
    /// replay-safe call): it counts one more attempt. It is refused when the
    /// row settled ([`LedgerError::AlreadySettled`]), names another tool or
    /// other arguments ([`LedgerError::Mismatch`]), or belongs to a
    /// `ToolReplay::Never` tool ([`LedgerError::ReplayRefused`]). A run marked
    /// finished refuses new calls ([`LedgerError::RunFinished`]).
    ///
    /// [`LedgerError::AlreadySettled`]: crate::LedgerError::AlreadySettled
    /// [`LedgerError::Mismatch`]: crate::LedgerError::Mismatch
    /// [`LedgerError::ReplayRefused`]: crate::LedgerError::ReplayRefused
    /// [`LedgerError::RunFinished`]: crate::LedgerError::RunFinished
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()>;

    /// Records how a started call ended. The result is cut at the ledger's
    /// limit ([`max_result_bytes`](Self::max_result_bytes)); redact it before
    /// it gets here. May ride on the next durable commit.
    ///
    /// `Ok` means the row is accepted. A call with no started row is refused
    /// ([`LedgerError::NotStarted`]), and so is a second settle
    /// ([`LedgerError::AlreadySettled`]). A backend may queue the row of a
    /// call it knows to be in flight without waiting for it to be applied;
    /// a storage failure of such a row is then reported by the next
    /// [`flush`](Self::flush) ([`LedgerError::Deferred`]).
    ///
    /// [`LedgerError::NotStarted`]: crate::LedgerError::NotStarted
    /// [`LedgerError::AlreadySettled`]: crate::LedgerError::AlreadySettled
    /// [`LedgerError::Deferred`]: crate::LedgerError::Deferred
    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()>;

    /// The run's calls that started and never settled (in doubt), in the
    /// order they first started.
    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>>;

    /// One call's row, settled or not.
    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>>;

    /// Every row of the run, in the order the calls first started.
    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>>;

    /// The runs that have rows or a checkpoint and are not marked finished:
    /// where recovery starts after a restart. Sorted by run id.
    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>>;

    /// Saves the run's checkpoint, replacing the previous one. A version
    /// lower than the stored one is refused ([`LedgerError::StaleCheckpoint`]);
    /// an equal one replaces it. May ride on the next durable commit.
    ///
    /// [`LedgerError::StaleCheckpoint`]: crate::LedgerError::StaleCheckpoint
    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()>;

    /// The run's last checkpoint.
    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>>;

    /// Marks the run finished: no call of it starts again, and its records
    /// may be pruned. Idempotent (the first time stamp is kept). Do not mark
    /// a run that may still be resumed (a deferred run).
    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()>;

    /// Removes the rows and checkpoints of every run marked finished at or
    /// before `finished_before` (retention: pass now minus the retention
    /// period, or [`Timestamp::MAX`] for every finished run). Unfinished runs
    /// are never pruned.
    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport>;

    /// Makes every write acknowledged so far durable, and reports the
    /// background writes that failed since the last flush
    /// ([`LedgerError::Deferred`](crate::LedgerError::Deferred)).
    async fn flush(&self) -> LedgerResult<()>;

    /// The cut applied to a stored result's content (and to its metadata's
    /// JSON text), in bytes.
    fn max_result_bytes(&self) -> usize;
}
