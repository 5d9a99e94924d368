//! A memory ledger that shows each write to a hook first, which may pass it
//! on, fail it, or accept it and drop it: for tests that watch or break
//! what the harness writes to its ledger.

use std::sync::Arc;

use tinyagents::async_trait;
use tinyagents::ledger::{InDoubt, LedgerResult, Resolve, Timestamp};
use tinyagents::{
    core::CallId, core::RunId, ledger::Checkpoint, ledger::EffectLedger, ledger::LedgerError,
    ledger::LedgerRow, ledger::MemoryLedger, ledger::Outcome, ledger::PruneReport,
    ledger::RunState, ledger::StartedRow,
};

/// A write the ledger is asked for.
#[derive(Debug, Clone, Copy)]
pub enum LedgerWrite<'a> {
    Started(&'a StartedRow),
    Settled(&'a CallId),
    /// A resolution of a call in doubt.
    Resolve(&'a CallId),
    /// A base checkpoint of this many bytes.
    Base(usize),
    /// An appended checkpoint entry of this many bytes.
    Entry(usize),
    Finished,
    Flush,
}

/// What the hook makes of a write.
#[derive(Debug)]
pub enum Verdict {
    /// Write it.
    Pass,
    /// Refuse it with this error.
    Fail(LedgerError),
    /// Answer `Ok` and write nothing (a write lost in storage).
    Drop,
}

type Hook = dyn Fn(LedgerWrite<'_>) -> Verdict + Send + Sync;

/// A [`MemoryLedger`] behind a hook on its writes; reads go straight to it.
pub struct HookedLedger {
    inner: MemoryLedger,
    hook: Arc<Hook>,
}

impl std::fmt::Debug for HookedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedLedger")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl HookedLedger {
    pub fn new(hook: impl Fn(LedgerWrite<'_>) -> Verdict + Send + Sync + 'static) -> Self {
        Self {
            inner: MemoryLedger::new(),
            hook: Arc::new(hook),
        }
    }

    /// Runs the hook on `write`; `Ok(true)` when it is to be written.
    fn allow(&self, write: LedgerWrite<'_>) -> LedgerResult<bool> {
        match (self.hook)(write) {
            Verdict::Pass => Ok(true),
            Verdict::Fail(error) => Err(error),
            Verdict::Drop => Ok(false),
        }
    }
}

#[async_trait]
impl EffectLedger for HookedLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Started(&row))? {
            return Ok(());
        }
        self.inner.record_started(row).await
    }
    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Settled(call))? {
            return Ok(());
        }
        self.inner.record_settled(run, call, outcome).await
    }
    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.unresolved(run).await
    }
    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.inner.in_doubt().await
    }
    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Resolve(call))? {
            return Ok(());
        }
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
        self.inner.begin_run(run).await
    }
    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.inner.run_state(run).await
    }
    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Base(data.len()))? {
            return Ok(());
        }
        self.inner.save_checkpoint(run, version, data).await
    }
    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Entry(entry.len()))? {
            return Ok(());
        }
        self.inner.append_checkpoint(run, version, entry).await
    }
    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.inner.load_checkpoint(run).await
    }
    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Finished)? {
            return Ok(());
        }
        self.inner.mark_run_finished(run).await
    }
    async fn prune_finished(&self, before: Timestamp) -> LedgerResult<PruneReport> {
        self.inner.prune_finished(before).await
    }
    async fn flush(&self) -> LedgerResult<()> {
        if !self.allow(LedgerWrite::Flush)? {
            return Ok(());
        }
        self.inner.flush().await
    }
    fn max_result_bytes(&self) -> usize {
        self.inner.max_result_bytes()
    }
}
