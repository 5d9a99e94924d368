//! The ledger a claimed run writes through: the worker's fenced ledger,
//! with two differences for the claimed run itself (its delegated runs are
//! untouched):
//!
//! - its finished mark waits until the run store has recorded how the run
//!   ended ([`RunLedger::finish_now`]), so that a worker dying between the
//!   two leaves a run the store knows ended (and a startup sweep finishes in
//!   the ledger), never a run the ledger closed whose answer nobody kept;
//! - a claim left bare by the worker before it (it died during the first
//!   model call: a claim, and no checkpoint, no call) is taken over by a
//!   fresh start under the same id: nothing of the run acted, and the lease
//!   says the run is this worker's now.
//!
//! A write the fence refused (another worker claimed the run) stops the run
//! at once: the harness would otherwise go on asking its model with every
//! call refused. The refusals are counted for the worker's report.

use async_trait::async_trait;
use parking_lot::Mutex;
use tinyagents_core::{CallId, CancellationToken, RunId};
use tinyagents_ledger::{
    Checkpoint, EffectLedger, InDoubt, LedgerError, LedgerResult, LedgerRow, Outcome, PruneReport,
    Resolve, RunState, StartedRow, Timestamp,
};

use tinyagents_runs::is_bare_claim;

use crate::ledger::FencedLedger;

/// See the module docs.
pub(crate) struct RunLedger {
    inner: FencedLedger,
    run: RunId,
    /// The harness asked to mark the claimed run finished.
    finish_asked: Mutex<bool>,
    /// Writes refused because another worker claimed the run.
    fenced: std::sync::atomic::AtomicU64,
    /// The run's token: cancelled on the first refusal.
    stop: CancellationToken,
}

impl RunLedger {
    pub(crate) fn new(inner: FencedLedger, run: RunId, stop: CancellationToken) -> Self {
        Self {
            inner,
            run,
            stop,
            finish_asked: Mutex::new(false),
            fenced: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Writes the fence refused so far.
    pub(crate) fn fenced_writes(&self) -> u64 {
        self.fenced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `result`, counted when the fence refused it, and so are the settles
    /// queued without waiting that the fence has refused since.
    fn counted<T>(&self, result: LedgerResult<T>) -> LedgerResult<T> {
        if let Err(LedgerError::Fenced { .. }) = &result {
            self.refused();
        }
        self.take_background_failures();
        result
    }

    /// Counts the background failures of the run's settles; a refusal of
    /// the fence stops the run.
    pub(crate) fn take_background_failures(&self) {
        for failure in self.inner.take_background_failures() {
            if matches!(failure, LedgerError::Fenced { .. }) {
                self.refused();
            } else {
                tracing::warn!(run = %self.run, error = %failure, "a settle failed in the background");
            }
        }
    }

    /// Once the run has ended: waits for the verdicts of its last settles,
    /// and counts them as [`flush`](EffectLedger::flush) does.
    pub(crate) async fn finish_background(&self) {
        if let Err(err) = self.flush().await {
            tracing::warn!(run = %self.run, error = %err, "writes of the run failed in the background");
        }
    }

    fn refused(&self) {
        self.fenced
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.stop.cancel();
    }

    /// Marks the claimed run finished if the harness asked to: called once
    /// the run store has recorded the run's end.
    pub(crate) async fn finish_now(&self) -> LedgerResult<()> {
        let asked = *self.finish_asked.lock();
        if asked {
            self.inner.mark_run_finished(&self.run).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl EffectLedger for RunLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        self.counted(self.inner.record_started(row).await)
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        self.counted(self.inner.record_settled(run, call, outcome).await)
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.unresolved(run).await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.inner.in_doubt().await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.counted(self.inner.resolve(run, call, resolve).await)
    }

    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        self.inner.get(run, call).await
    }

    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.rows(run).await
    }

    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.inner.unfinished_runs().await
    }

    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        match self.counted(self.inner.begin_run(run).await) {
            Err(LedgerError::RunExists { .. })
                if *run == self.run && is_bare_claim(&self.inner, run).await? =>
            {
                Ok(())
            }
            other => other,
        }
    }

    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.inner.run_state(run).await
    }

    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        self.counted(self.inner.save_checkpoint(run, version, data).await)
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.counted(self.inner.append_checkpoint(run, version, entry).await)
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.inner.load_checkpoint(run).await
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        if *run == self.run {
            *self.finish_asked.lock() = true;
            return Ok(());
        }
        self.counted(self.inner.mark_run_finished(run).await)
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.counted(self.inner.prune_finished(finished_before).await)
    }

    async fn flush(&self) -> LedgerResult<()> {
        // The handle's flush, with its settles' refusals counted.
        let mut failures = self.inner.settle_verdicts().await;
        for failure in &failures {
            if matches!(failure, LedgerError::Fenced { .. }) {
                self.refused();
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        let count = failures.len();
        Err(LedgerError::Deferred {
            count,
            first: Box::new(failures.swap_remove(0)),
        })
    }

    fn max_result_bytes(&self) -> usize {
        self.inner.max_result_bytes()
    }
}
