//! The ledger under simulation: a memory or SQLite ledger behind a wrapper
//! that counts every write, fails the writes the history names, and at the
//! write it names "kills the process": that write lands or not, and from
//! then on every call of this process waits forever, while the driver
//! drops the run as a dead process would leave it.
//!
//! SQLite writes complete on the ledger's own thread. Under tokio's paused
//! clock an idle runtime jumps to its next timer, and while a write is in
//! flight the other futures of the run would go on: how far they got would
//! depend on how long the disk took, and a seed would no longer fix the
//! history. The wrapper waits for every SQLite call with the runtime's
//! thread blocked ([`settle`]): each call is one step of the simulation, as
//! a memory ledger's is.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

use tinyagents::ledger::{InDoubt, LedgerResult, Resolve, Timestamp};
use tinyagents::{
    async_trait, core::CallId, core::RunId, ledger::Checkpoint, ledger::EffectLedger,
    ledger::LedgerError, ledger::LedgerRow, ledger::Outcome, ledger::PruneReport, ledger::RunState,
    ledger::StartedRow,
};
use tokio::sync::Notify;

/// Waits for `future` (one that completes on another thread) with the
/// calling thread blocked: nothing else on the runtime moves meanwhile.
pub(crate) fn settle<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// [`settle`], as an `async` step.
pub(crate) async fn blocking<F: Future>(future: F) -> F::Output {
    settle(future)
}

/// The history's death: the write it happens at, and whether that write
/// lands first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Death {
    /// The write, counted from 1 across the process's life.
    pub at: u32,
    /// Whether it lands before the death.
    pub after_write: bool,
}

/// The wrapper.
pub(crate) struct SimLedger {
    inner: Arc<dyn EffectLedger>,
    blocks: bool,
    writes: AtomicU32,
    death: Option<Death>,
    failing: Vec<u32>,
    dead: AtomicBool,
    died: Arc<Notify>,
    log: std::sync::Mutex<Vec<String>>,
}

impl SimLedger {
    /// Wraps `inner`; with `blocks`, its calls complete on another thread
    /// and are waited for with the thread blocked.
    pub(crate) fn new(
        inner: Arc<dyn EffectLedger>,
        blocks: bool,
        death: Option<Death>,
        failing: Vec<u32>,
    ) -> Self {
        Self {
            inner,
            blocks,
            writes: AtomicU32::new(0),
            death,
            failing,
            dead: AtomicBool::new(false),
            died: Arc::new(Notify::new()),
            log: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Told once when the process dies.
    pub(crate) fn died(&self) -> Arc<Notify> {
        Arc::clone(&self.died)
    }

    /// Whether the process died.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// The writes asked for, in order, for the account.
    pub(crate) fn writes(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn wait<T>(&self, future: impl Future<Output = T>) -> T {
        if self.is_dead() {
            return std::future::pending().await;
        }
        if self.blocks {
            settle(future)
        } else {
            future.await
        }
    }

    async fn write(
        &self,
        what: String,
        future: impl Future<Output = LedgerResult<()>>,
    ) -> LedgerResult<()> {
        if self.is_dead() {
            return std::future::pending().await;
        }
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let note = |how: &str| {
            self.log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(format!("write {n} {what}{how}"));
        };
        if let Some(death) = self.death.filter(|d| d.at == n) {
            note(if death.after_write {
                " (lands, then the process dies)"
            } else {
                " (the process dies first)"
            });
            if death.after_write {
                let _ = self.wait(future).await;
            }
            self.dead.store(true, Ordering::SeqCst);
            self.died.notify_one();
            return std::future::pending().await;
        }
        if self.failing.contains(&n) {
            note(" (fails)");
            return Err(LedgerError::Storage {
                operation: "simulated write",
                detail: format!("planted failure of write {n}"),
                source: None,
            });
        }
        note("");
        self.wait(future).await
    }
}

#[async_trait]
impl EffectLedger for SimLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        let what = format!("started {} {}", row.run_id, row.call_id);
        self.write(what, self.inner.record_started(row)).await
    }
    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        let what = format!("settled {run} {call}");
        self.write(what, self.inner.record_settled(run, call, outcome))
            .await
    }
    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.wait(self.inner.unresolved(run)).await
    }
    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.wait(self.inner.in_doubt()).await
    }
    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        let what = format!("resolved {run} {call}");
        self.write(what, self.inner.resolve(run, call, resolve))
            .await
    }
    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        self.wait(self.inner.get(run, call)).await
    }
    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.wait(self.inner.rows(run)).await
    }
    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.wait(self.inner.unfinished_runs()).await
    }
    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        self.write(format!("begin {run}"), self.inner.begin_run(run))
            .await
    }
    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.wait(self.inner.run_state(run)).await
    }
    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        let what = format!("checkpoint base {run} v{version}");
        self.write(what, self.inner.save_checkpoint(run, version, data))
            .await
    }
    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        let what = format!("checkpoint entry {run} v{version}");
        self.write(what, self.inner.append_checkpoint(run, version, entry))
            .await
    }
    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.wait(self.inner.load_checkpoint(run)).await
    }
    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        self.write(format!("finished {run}"), self.inner.mark_run_finished(run))
            .await
    }
    async fn prune_finished(&self, before: Timestamp) -> LedgerResult<PruneReport> {
        self.wait(self.inner.prune_finished(before)).await
    }
    async fn flush(&self) -> LedgerResult<()> {
        self.write("flush".to_owned(), self.inner.flush()).await
    }
    fn max_result_bytes(&self) -> usize {
        self.inner.max_result_bytes()
    }
}
