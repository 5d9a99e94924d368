//! The `EffectLedger` trait: what every backend offers the harness.

use std::sync::Arc;

use async_trait::async_trait;
use tinyagents_core::{CallId, RunId};

use crate::clock::Timestamp;
use crate::error::LedgerResult;
use crate::resolution::{InDoubt, Resolve};
use crate::row::{LedgerRow, Outcome, StartedRow};

/// A run's state saved at a turn boundary, as read back: a base and the
/// entries appended to it since.
///
/// The harness saves a base with [`EffectLedger::save_checkpoint`] (which
/// also compacts: it drops every appended entry) and adds what each later
/// turn changed with [`EffectLedger::append_checkpoint`], so that a turn's
/// write does not grow with the run. It rebuilds the state from `data`
/// followed by `appended`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The version of the last write, base or entry (the harness's turn
    /// index, never decreasing per run).
    pub version: u64,
    /// The base state, serialized by the harness (which puts its own format
    /// version inside).
    pub data: Vec<u8>,
    /// The entries appended since the base was saved, oldest first.
    pub appended: Vec<Vec<u8>>,
    /// When the last write (base or entry) was made.
    pub saved_at: Timestamp,
}

/// A checkpoint entry as a value, encoded only when its bytes are needed
/// ([`EffectLedger::append_checkpoint_entry`]). Its bytes are exactly those
/// the harness would have appended with [`EffectLedger::append_checkpoint`].
pub trait CheckpointEntry: Send + Sync + std::fmt::Debug {
    /// The entry's bytes.
    fn encode(&self) -> LedgerResult<Vec<u8>>;
}

/// What the ledger knows of a run id ([`EffectLedger::run_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    /// Nothing is recorded under the id (never used, or pruned).
    Unknown,
    /// A claim, rows or a checkpoint, and no finished mark.
    Open,
    /// Marked finished.
    Finished,
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
    /// Finished runs in the cut-off that were kept because they hold calls
    /// whose effect is unknown ([`LedgerRow::is_unresolved`]).
    pub kept_unresolved: u64,
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
/// - a settled row, a checkpoint (base or appended entry), a claim, a
///   finished mark and a prune may ride on the
///   next durable commit: a crash can lose the last of them, and a call
///   whose settled row was lost is seen as in doubt. [`flush`](Self::flush)
///   makes everything acknowledged so far durable.
#[async_trait]
pub trait EffectLedger: Send + Sync {
    /// Records that a call is about to run. Durable when it returns `Ok`.
    ///
    /// Starting a call whose row already exists is a restart: status back to
    /// started, one more attempt, the settled time and result cleared. Every
    /// backend decides in this order (identity first):
    ///
    /// 1. the row names another tool or other arguments:
    ///    [`LedgerError::Mismatch`], whatever its state and the run's;
    /// 2. the row settled (completed, failed, interrupted):
    ///    [`LedgerError::AlreadySettled`];
    /// 3. the run is marked finished: [`LedgerError::RunFinished`] (a
    ///    started or deferred row, or no row);
    /// 4. the row is deferred: a restart, whatever the replay class;
    /// 5. the row is started (in doubt): [`LedgerError::ReplayRefused`] when
    ///    the row's or the new replay class is `ToolReplay::Never`, else a
    ///    restart;
    /// 6. no row: a new row, one attempt.
    ///
    /// A refused start changes nothing and counts no attempt.
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
    /// [`Outcome::Deferred`] leaves the row deferred: the call asked for an
    /// approval and did not act. It is not in doubt (not in
    /// [`unresolved`](Self::unresolved)) and may start again.
    ///
    /// `Ok` means the row is accepted. A call with no started row is refused
    /// ([`LedgerError::NotStarted`]), and so is a second settle
    /// ([`LedgerError::AlreadySettled`]) and a settle of a deferred row,
    /// which must start again first ([`LedgerError::CallDeferred`]). A
    /// backend may queue the row of a
    /// call it knows to be in flight without waiting for it to be applied;
    /// a storage failure of such a row is then reported by the next
    /// [`flush`](Self::flush) ([`LedgerError::Deferred`]).
    ///
    /// [`LedgerError::NotStarted`]: crate::LedgerError::NotStarted
    /// [`LedgerError::AlreadySettled`]: crate::LedgerError::AlreadySettled
    /// [`LedgerError::CallDeferred`]: crate::LedgerError::CallDeferred
    /// [`LedgerError::Deferred`]: crate::LedgerError::Deferred
    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()>;

    /// The run's calls whose effect is unknown ([`LedgerRow::is_unresolved`]):
    /// started and never settled, or answered "interrupted, outcome unknown"
    /// (a `ToolReplay::Never` call) with no known resolution. In the order
    /// they first started. Deferred rows are not listed: their calls did not
    /// act.
    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>>;

    /// Every call whose effect is unknown, across every run, finished or
    /// not, oldest start first: with its idempotency key and its age by the
    /// ledger's clock. What a person looks at to find out whether money
    /// moved.
    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>>;

    /// Records what became known of a call whose effect was unknown: a
    /// tool's reconciliation or a person ([`Resolve`]), with who and when
    /// (the ledger's clock). Durable when it returns `Ok`.
    ///
    /// - A started row (in doubt) settles: [`Found::Happened`] completes it
    ///   with the result found (which answers the call from then on),
    ///   [`Found::NotHappened`] makes it deferred (it did not act, and may
    ///   start again if its run goes on), [`Found::Unknown`] settles it
    ///   interrupted ("interrupted, outcome unknown", still unresolved).
    /// - An interrupted row keeps its status and result and records the
    ///   resolution; once a known effect is recorded it is refused
    ///   ([`LedgerError::AlreadyResolved`]).
    /// - A completed, failed or deferred row is not in doubt
    ///   ([`LedgerError::NotInDoubt`]); no row is
    ///   [`LedgerError::NotStarted`].
    ///
    /// [`Found::Happened`]: crate::Found::Happened
    /// [`Found::NotHappened`]: crate::Found::NotHappened
    /// [`Found::Unknown`]: crate::Found::Unknown
    /// [`LedgerError::AlreadyResolved`]: crate::LedgerError::AlreadyResolved
    /// [`LedgerError::NotInDoubt`]: crate::LedgerError::NotInDoubt
    /// [`LedgerError::NotStarted`]: crate::LedgerError::NotStarted
    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()>;

    /// One call's row, settled or not.
    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>>;

    /// Every row of the run, in the order the calls first started.
    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>>;

    /// The runs that need someone: those with rows or a checkpoint that are
    /// not marked finished (where recovery starts after a restart), and
    /// those marked finished that still hold calls whose effect is unknown
    /// ([`LedgerRow::is_unresolved`]), until each is settled or resolved.
    /// Sorted by run id. A run with only a claim
    /// ([`begin_run`](Self::begin_run)) is not listed: there is nothing to
    /// recover. [`run_state`](Self::run_state) tells the two kinds apart.
    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>>;

    /// Claims a new run id. Refused with [`LedgerError::RunExists`] when the
    /// ledger holds any row, checkpoint, finished mark or earlier claim of
    /// `run`, so that a new run never meets an old run's rows. The check and
    /// the claim are one atomic step. The claim may ride on the next durable
    /// commit (a crash can lose it, with nothing else of the run). A pruned
    /// run's id is unknown again.
    ///
    /// [`LedgerError::RunExists`]: crate::LedgerError::RunExists
    async fn begin_run(&self, run: &RunId) -> LedgerResult<()>;

    /// What the ledger knows of `run`: [`RunState::Unknown`] (nothing),
    /// [`RunState::Open`] (a claim, rows or a checkpoint, no finished mark)
    /// or [`RunState::Finished`].
    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState>;

    /// Saves the run's base checkpoint, replacing the previous base and
    /// dropping every appended entry (compaction). A version lower than the
    /// stored one (that of the last base or entry) is refused
    /// ([`LedgerError::StaleCheckpoint`]); an equal one replaces it. May
    /// ride on the next durable commit.
    ///
    /// [`LedgerError::StaleCheckpoint`]: crate::LedgerError::StaleCheckpoint
    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()>;

    /// Appends `entry` after the run's checkpoint and sets its version to
    /// `version`. Refused with [`LedgerError::NoCheckpoint`] when the run has
    /// no base checkpoint, and with [`LedgerError::StaleCheckpoint`] when
    /// `version` is lower than the stored one. Its cost does not depend on
    /// the size of the base or the number of entries before it. May ride on
    /// the next durable commit.
    ///
    /// [`LedgerError::NoCheckpoint`]: crate::LedgerError::NoCheckpoint
    /// [`LedgerError::StaleCheckpoint`]: crate::LedgerError::StaleCheckpoint
    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()>;

    /// Whether the ledger keeps a checkpoint entry as a value until it is
    /// read ([`Self::append_checkpoint_entry`]). `false` by default: the
    /// harness then encodes each entry itself and appends its bytes.
    fn keeps_entries_unencoded(&self) -> bool {
        false
    }

    /// Appends an entry given as a value, with the rules of
    /// [`Self::append_checkpoint`]. A ledger in memory may keep it as it is
    /// and encode it only when the checkpoint is read (no JSON per turn for
    /// a checkpoint that is seldom read); the default encodes it now.
    async fn append_checkpoint_entry(
        &self,
        run: &RunId,
        version: u64,
        entry: Arc<dyn CheckpointEntry>,
    ) -> LedgerResult<()> {
        let bytes = entry.encode()?;
        self.append_checkpoint(run, version, bytes).await
    }

    /// The run's checkpoint: its base and the entries appended since, in
    /// order.
    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>>;

    /// Marks the run finished: no call of it starts again, and its records
    /// may be pruned. Idempotent (the first time stamp is kept). Do not mark
    /// a run that may still be resumed (a deferred run).
    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()>;

    /// Removes the rows, checkpoints (base and entries) and claims of every
    /// run marked finished at or before `finished_before` (retention: pass now minus the retention
    /// period, or [`Timestamp::MAX`] for every finished run). Unfinished runs
    /// are never pruned, and neither is a finished run that holds a call
    /// whose effect is unknown ([`PruneReport::kept_unresolved`] counts
    /// them): an unresolved row is never deleted.
    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport>;

    /// Makes every write acknowledged so far durable, and reports the
    /// background writes that failed since the last flush
    /// ([`LedgerError::Deferred`](crate::LedgerError::Deferred)).
    async fn flush(&self) -> LedgerResult<()>;

    /// The cut applied to a stored result's content (and to its metadata's
    /// JSON text), in bytes.
    fn max_result_bytes(&self) -> usize;
}
