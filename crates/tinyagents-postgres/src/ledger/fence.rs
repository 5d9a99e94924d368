//! Fencing: a worker's ledger writes carry the epoch of its lease on the
//! run it claimed, and are refused once another worker claimed the run
//! since (a higher epoch in `tinyagents_runs`).
//!
//! The writer checks a fence the first time its open transaction meets it:
//! `SELECT epoch … FOR KEY SHARE` on the claimed run's row, a lock held to
//! the commit, so a claim (which takes the row `FOR UPDATE SKIP LOCKED`
//! before it bumps the epoch) skips the run rather than interleave with
//! the writes that passed. A fenced-out write changes nothing; the other
//! requests of the batch are unaffected. Reads are not fenced.
//!
//! The fence names the claimed run, not the row's run: a worker's fenced
//! handle writes every run its run touches (delegated child runs
//! included) under the one lease.

use async_trait::async_trait;
use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::{
    Checkpoint, EffectLedger, InDoubt, LedgerError, LedgerResult, LedgerRow, Outcome, PruneReport,
    Resolve, RunState, StartedRow, Timestamp,
};

use std::sync::Arc;

use super::conn::{Conn, Fail, column};
use super::handle::Core;

const EPOCH: &str = "SELECT epoch FROM tinyagents_runs WHERE id = $1 FOR KEY SHARE";

/// The lease a write is made under: the claimed run and its epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Fence {
    pub(crate) run: RunId,
    pub(crate) epoch: u64,
}

/// Checks `fence` against the run's epoch, locking its row to the commit.
/// A run without a row is fenced out (`current` 0): its lease is gone.
pub(crate) async fn check_fence(conn: &mut Conn, fence: &Fence) -> Result<(), Fail> {
    let op = "fence";
    let row = conn.query_opt(op, EPOCH, &[&fence.run.as_str()]).await?;
    let current = match row {
        Some(row) => Some(u64::try_from(column::<i64>(&row, 0, op)?).unwrap_or(0)),
        None => None,
    };
    if current == Some(fence.epoch) {
        return Ok(());
    }
    Err(Fail::Refused(LedgerError::Fenced {
        run: fence.run.clone(),
        held: fence.epoch,
        current: current.unwrap_or(0),
    }))
}

/// An [`EffectLedger`] whose every write carries a worker's lease on a run
/// (from [`PostgresLedger::fenced`](super::PostgresLedger::fenced)), sharing
/// the writer of the ledger it came from. Writes are refused with
/// [`LedgerError::Fenced`] once the run's epoch moved on; reads are not
/// fenced.
///
/// Every settle waits for the writer's verdict (unlike the unfenced
/// handle's settles of calls in flight), so a fenced-out worker learns it
/// at once. Its `flush` reports the background failures of every handle of
/// the ledger.
#[derive(Clone)]
pub struct FencedLedger {
    core: Arc<Core>,
    fence: Fence,
}

impl std::fmt::Debug for FencedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedLedger")
            .field("target", &self.core.target)
            .field("run", &self.fence.run)
            .field("epoch", &self.fence.epoch)
            .finish()
    }
}

impl FencedLedger {
    pub(crate) fn new(core: Arc<Core>, run: RunId, epoch: u64) -> Self {
        Self {
            core,
            fence: Fence { run, epoch },
        }
    }

    /// The claimed run and the epoch this handle's writes carry.
    pub fn fence(&self) -> (RunId, u64) {
        (self.fence.run.clone(), self.fence.epoch)
    }

    fn lease(&self) -> Option<Fence> {
        Some(self.fence.clone())
    }
}

#[async_trait]
impl EffectLedger for FencedLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        self.core.started(row, self.lease()).await
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        self.core
            .settled(run, call, outcome, self.lease(), true)
            .await
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.core.rows(run, true).await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.core.in_doubt().await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.core.resolve(run, call, resolve, self.lease()).await
    }

    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        self.core.get(run, call).await
    }

    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.core.rows(run, false).await
    }

    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.core.unfinished_runs().await
    }

    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        self.core.begin_run(run, self.lease()).await
    }

    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.core.run_state(run).await
    }

    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        self.core
            .save_checkpoint(run, version, data, self.lease())
            .await
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.core
            .append_checkpoint(run, version, entry, self.lease())
            .await
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.core.load_checkpoint(run).await
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        self.core.finish(run, self.lease()).await
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.core.prune(finished_before, self.lease()).await
    }

    async fn flush(&self) -> LedgerResult<()> {
        self.core.flush().await
    }

    fn max_result_bytes(&self) -> usize {
        self.core.max_result_bytes
    }
}
