//! Fencing: a worker's ledger writes carry the epoch of its lease on the
//! run it claimed, and are refused once another worker claimed the run
//! since (a higher epoch in `tinyagents_runs`).
//!
//! A fenced write checks the run's epoch and locks the run's row
//! `FOR KEY SHARE` to the commit, in its own statement (the pipelined
//! started and settled rows: `WITH held AS (…)`, `store.rs`) or, on the
//! one-by-one path, in `SELECT epoch … FOR KEY SHARE` the first time the
//! open transaction meets the fence. A claim takes the row `FOR UPDATE
//! SKIP LOCKED` before it bumps the epoch, so it skips the run rather than
//! interleave with writes that passed. A fenced-out write changes nothing;
//! the other requests of the batch are unaffected. Reads are not fenced.
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

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

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
/// A settle of a call this handle started is queued without waiting, as
/// the unfenced handle's are, to ride on the next commit; its verdict (a
/// refusal of the fence, say) is kept for this handle: its next
/// [`flush`](EffectLedger::flush) reports it, as does
/// [`take_background_failures`](Self::take_background_failures). Its
/// `flush` also reports the background failures of the ledger's other
/// handles.
#[derive(Clone)]
pub struct FencedLedger {
    core: Arc<Core>,
    fence: Fence,
    /// Calls this handle started and has not settled: their settle is
    /// queued without waiting, to ride on the next commit.
    in_flight: Arc<Mutex<HashSet<(RunId, CallId)>>>,
    /// The verdicts of those settles, read by [`flush`](EffectLedger::flush)
    /// and [`take_background_failures`](Self::take_background_failures).
    verdicts: Arc<Mutex<Verdicts>>,
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

/// The verdicts of a fenced handle's queued settles.
#[derive(Default)]
struct Verdicts {
    /// Still to come.
    pending: Vec<oneshot::Receiver<LedgerResult<()>>>,
    /// Come, and failed: kept until taken.
    failed: Vec<LedgerError>,
}

impl Verdicts {
    /// Moves the verdicts that have come out of `pending`, keeping the
    /// failures.
    fn sweep(&mut self) {
        let failed = &mut self.failed;
        self.pending.retain_mut(|verdict| match verdict.try_recv() {
            Ok(Ok(())) => false,
            Ok(Err(err)) => {
                failed.push(err);
                false
            }
            Err(oneshot::error::TryRecvError::Empty) => true,
            Err(oneshot::error::TryRecvError::Closed) => {
                failed.push(LedgerError::Closed {
                    detail: "the writer stopped before answering a settle".into(),
                });
                false
            }
        });
    }
}

impl FencedLedger {
    pub(crate) fn new(core: Arc<Core>, run: RunId, epoch: u64) -> Self {
        Self {
            core,
            fence: Fence { run, epoch },
            in_flight: Arc::default(),
            verdicts: Arc::default(),
        }
    }

    /// Waits until every write sent so far is applied and durable, and
    /// returns the failures that brings: the ledger's background failures
    /// (as one [`LedgerError::Deferred`]) and this handle's settles that
    /// failed (a refusal of the fence, say), each reported once.
    pub async fn settle_verdicts(&self) -> Vec<LedgerError> {
        let mut failures = Vec::new();
        if let Err(err) = self.core.flush().await {
            failures.push(err);
        }
        failures.extend(self.take_background_failures());
        failures
    }

    /// The failures of this handle's settles queued without waiting whose
    /// verdict has come (a refusal of the fence, a storage failure), taken:
    /// each is reported once. Verdicts still to come stay.
    pub fn take_background_failures(&self) -> Vec<LedgerError> {
        let mut verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        verdicts.sweep();
        std::mem::take(&mut verdicts.failed)
    }
    fn in_flight(&self) -> MutexGuard<'_, HashSet<(RunId, CallId)>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
        let key = (row.run_id.clone(), row.call_id.clone());
        self.core.started(row, self.lease()).await?;
        self.in_flight().insert(key);
        Ok(())
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        // Started through this handle and not settled since: queued, to
        // ride on the next commit; a refusal (the fence, storage) is
        // reported by the next flush, and the run's next write meets the
        // fence itself. Otherwise, wait for the writer's verdict.
        let known = self.in_flight().remove(&(run.clone(), call.clone()));
        if !known {
            return self
                .core
                .settled(run, call, outcome, self.lease(), true)
                .await;
        }
        let verdict = self
            .core
            .settled_detached(run, call, outcome, self.lease())
            .await?;
        let mut verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        // Settled verdicts go as they come, so a long run keeps only the
        // ones still to come and the failures.
        verdicts.sweep();
        verdicts.pending.push(verdict);
        Ok(())
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.core.rows(run, true).await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.core.in_doubt().await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.core.resolve(run, call, resolve, self.lease()).await?;
        self.in_flight().remove(&(run.clone(), call.clone()));
        Ok(())
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
        self.core.finish(run, self.lease()).await?;
        self.in_flight().retain(|(r, _)| r != run);
        Ok(())
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.core.prune(finished_before, self.lease()).await
    }

    async fn flush(&self) -> LedgerResult<()> {
        let flushed = self.core.flush().await;
        // Every settle queued before the flush has its verdict now.
        let mut failures = self.take_background_failures();
        if flushed.is_err() || failures.is_empty() {
            return flushed;
        }
        let count = failures.len();
        Err(LedgerError::Deferred {
            count,
            first: Box::new(failures.swap_remove(0)),
        })
    }

    fn max_result_bytes(&self) -> usize {
        self.core.max_result_bytes
    }
}
