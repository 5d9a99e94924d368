//! The ledger a held run writes through: the host's ledger, with two
//! differences for the held run itself (its delegated runs are untouched):
//!
//! - its finished mark waits until the run store has recorded how the run
//!   ended ([`HeldLedger::finish_now`]), so a process dying between the two
//!   leaves a run the store says is running (and is recovered, finding
//!   nothing left to do), never a run the ledger closed whose end the store
//!   never heard of;
//! - a claim left bare by the holder before (it died during the first
//!   model call: a claim, no checkpoint, no call) is taken over by a fresh
//!   start under the same id: nothing of the run acted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::{
    Checkpoint, CheckpointEntry, EffectLedger, InDoubt, LedgerError, LedgerResult, LedgerRow,
    Outcome, PruneReport, Resolve, RunState, SharedLedger, StartedRow, Timestamp,
};

use crate::plan::is_bare_claim;

/// See the module docs.
pub struct HeldLedger {
    inner: SharedLedger,
    run: RunId,
    finish_asked: AtomicBool,
}

impl std::fmt::Debug for HeldLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLedger")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl HeldLedger {
    /// `inner`, for the held run `run`.
    pub fn new(inner: SharedLedger, run: RunId) -> Self {
        Self {
            inner,
            run,
            finish_asked: AtomicBool::new(false),
        }
    }

    /// Marks the held run finished if the harness asked to: call it once
    /// the store has recorded the run's end.
    pub async fn finish_now(&self) -> LedgerResult<()> {
        if self.finish_asked.load(Ordering::SeqCst) {
            self.inner.mark_run_finished(&self.run).await?;
            self.inner.flush().await?;
        }
        Ok(())
    }
}

#[async_trait]
impl EffectLedger for HeldLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        self.inner.record_started(row).await
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        self.inner.record_settled(run, call, outcome).await
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.unresolved(run).await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.inner.in_doubt().await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.inner.resolve(run, call, resolve).await
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
        match self.inner.begin_run(run).await {
            Err(LedgerError::RunExists { .. })
                if *run == self.run && is_bare_claim(self.inner.as_ref(), run).await? =>
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
        self.inner.save_checkpoint(run, version, data).await
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.inner.append_checkpoint(run, version, entry).await
    }

    fn keeps_entries_unencoded(&self) -> bool {
        self.inner.keeps_entries_unencoded()
    }

    async fn append_checkpoint_entry(
        &self,
        run: &RunId,
        version: u64,
        entry: Arc<dyn CheckpointEntry>,
    ) -> LedgerResult<()> {
        self.inner
            .append_checkpoint_entry(run, version, entry)
            .await
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.inner.load_checkpoint(run).await
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        if *run == self.run {
            self.finish_asked.store(true, Ordering::SeqCst);
            return Ok(());
        }
        self.inner.mark_run_finished(run).await
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.inner.prune_finished(finished_before).await
    }

    async fn flush(&self) -> LedgerResult<()> {
        self.inner.flush().await
    }

    fn max_result_bytes(&self) -> usize {
        self.inner.max_result_bytes()
    }
}
