//! `SqliteLedger`: the embedded durable default, one SQLite file in WAL mode.
//!
//! All SQLite work runs on one dedicated writer thread (never on the async
//! runtime), which group-commits concurrent started rows: one transaction
//! and one fsync for every row waiting when it commits. Other processes may
//! open the same file (a recovery tool, a crash test reopening it); SQLite's
//! locks serialise their writes.

mod runs;
mod schema;
mod store;
mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use std::sync::mpsc;
use tinyagents_core::{CallId, RunId};

use tokio::sync::{Semaphore, oneshot};

use crate::clock::{Clock, SharedClock, Timestamp, system_clock};
use crate::error::{LedgerError, LedgerResult};
use crate::ledger::{Checkpoint, EffectLedger, PruneReport, RunState};
use crate::resolution::{InDoubt, Resolve};
use crate::row::{DEFAULT_MAX_RESULT_BYTES, LedgerRow, Outcome, StartedRow, StoredResult};
use writer::{Deferred, Reply, Request, Tuning, Writer};

/// The schema version this build writes (the file's `user_version`).
pub const SCHEMA_VERSION: i64 = schema::MIGRATIONS.len() as i64;

/// The SQLite `application_id` that marks a file as an effect ledger.
pub const APPLICATION_ID: i32 = schema::APPLICATION_ID;

/// How many requests may wait for the writer before callers wait for room
/// (back-pressure instead of unbounded memory).
const IN_FLIGHT: usize = 4096;

/// A point of a commit, reported to a [`CommitHook`]. Every commit is
/// durable (`synchronous = FULL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPoint {
    /// The transaction's rows are written but nothing of it is durable yet:
    /// a crash here loses its started rows (whose callers were not answered,
    /// so their tools never ran) and the settled rows riding on it.
    BeforeCommit {
        /// Started rows in the transaction.
        started: usize,
    },
    /// The commit is durable and no caller of a started row in it has been
    /// answered: a crash here leaves started rows whose tools never ran
    /// (in doubt).
    AfterCommit {
        /// Started rows in the transaction.
        started: usize,
    },
}

/// A function the writer thread calls around every commit. For crash tests:
/// a hook that blocks (or kills the process) stops the ledger exactly at
/// that point. It runs on the writer thread, so it delays every caller.
pub type CommitHook = Arc<dyn Fn(CommitPoint) + Send + Sync>;

/// How a [`SqliteLedger`] is opened.
#[derive(Clone)]
pub struct SqliteOptions {
    /// Create the file when it is missing (default). When false, a missing
    /// file is [`LedgerError::Missing`]: a recovery that expects a ledger
    /// never starts an empty one by mistake.
    pub create_if_missing: bool,
    /// Run `PRAGMA quick_check` when opening (default), so that a damaged
    /// file is refused up front. Its cost grows with the file.
    pub verify_on_open: bool,
    /// The cut of a stored result, in bytes.
    pub max_result_bytes: usize,
    /// How long a write waits for a lock held by another process.
    pub busy_timeout: Duration,
    /// The most requests the writer takes from the queue at once.
    pub max_batch: usize,
    /// How long a transaction holding only rows that may ride (settled rows,
    /// checkpoints, …) stays open before it is committed: the longest a
    /// riding row waits to become durable when no call starts.
    pub linger: Duration,
    /// Where row time stamps come from.
    pub clock: SharedClock,
    /// Called around each durable commit (crash tests).
    pub commit_hook: Option<CommitHook>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            create_if_missing: true,
            verify_on_open: true,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            busy_timeout: Duration::from_secs(5),
            max_batch: 1024,
            linger: Duration::from_millis(2),
            clock: system_clock(),
            commit_hook: None,
        }
    }
}

impl fmt::Debug for SqliteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOptions")
            .field("create_if_missing", &self.create_if_missing)
            .field("verify_on_open", &self.verify_on_open)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("busy_timeout", &self.busy_timeout)
            .field("max_batch", &self.max_batch)
            .field("linger", &self.linger)
            .field("clock", &self.clock)
            .field("commit_hook", &self.commit_hook.as_ref().map(|_| ".."))
            .finish()
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::create_if_missing`].
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Sets [`SqliteOptions::max_result_bytes`].
    #[must_use]
    pub fn max_result_bytes(mut self, max_bytes: usize) -> Self {
        self.max_result_bytes = max_bytes;
        self
    }

    /// Sets the clock.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Installs a commit hook.
    #[must_use]
    pub fn commit_hook(mut self, hook: impl Fn(CommitPoint) + Send + Sync + 'static) -> Self {
        self.commit_hook = Some(Arc::new(hook));
        self
    }
}

/// An [`EffectLedger`] in one SQLite file (WAL mode, versioned schema).
pub struct SqliteLedger {
    tx: mpsc::Sender<Request>,
    permits: Arc<Semaphore>,
    /// Calls this handle started and has not settled: their settled rows
    /// can only fail on a storage error, so they are sent without waiting.
    in_flight: DashMap<(RunId, CallId), ()>,
    deferred: Arc<Deferred>,
    path: PathBuf,
    max_result_bytes: usize,
}

impl fmt::Debug for SqliteLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLedger")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteLedger {
    /// Opens the ledger at `path` with default options, creating it if it is
    /// missing. The file is checked, migrated and opened on the writer
    /// thread, off the async runtime.
    pub async fn open(path: impl AsRef<Path>) -> LedgerResult<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the ledger at `path` with `options`.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> LedgerResult<Self> {
        let path = path.as_ref().to_owned();
        let (ready_tx, ready_rx) = oneshot::channel();
        let ledger = Self::spawn(path.clone(), options, move |opened| {
            // The opener may have stopped waiting; then nobody needs the answer.
            drop(ready_tx.send(opened));
        })?;
        match ready_rx.await {
            Ok(Ok(())) => Ok(ledger),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(closed("the writer thread stopped while opening")),
        }
    }

    /// Opens the ledger from synchronous code (blocks the calling thread
    /// while the file is checked; do not call it on an async runtime's
    /// thread).
    pub fn open_blocking(path: impl AsRef<Path>, options: SqliteOptions) -> LedgerResult<Self> {
        let path = path.as_ref().to_owned();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let ledger = Self::spawn(path, options, move |opened| {
            drop(ready_tx.send(opened));
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(ledger),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(closed("the writer thread stopped while opening")),
        }
    }

    fn spawn(
        path: PathBuf,
        options: SqliteOptions,
        ready: impl FnOnce(LedgerResult<()>) + Send + 'static,
    ) -> LedgerResult<Self> {
        let (tx, rx) = mpsc::channel();
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        let deferred = Arc::new(Deferred::default());
        let ledger = Self {
            tx,
            permits: permits.clone(),
            in_flight: DashMap::new(),
            deferred: deferred.clone(),
            path: path.clone(),
            max_result_bytes: options.max_result_bytes,
        };
        let thread_path = path.clone();
        std::thread::Builder::new()
            .name("tinyagents-ledger".into())
            .spawn(move || {
                let spec = schema::OpenSpec {
                    create_if_missing: options.create_if_missing,
                    verify: options.verify_on_open,
                    busy_timeout: options.busy_timeout,
                    path: &thread_path,
                };
                match schema::open(&spec) {
                    Ok(conn) => {
                        ready(Ok(()));
                        let tuning = Tuning {
                            max_batch: options.max_batch,
                            linger: options.linger,
                        };
                        Writer::new(
                            conn,
                            options.clock,
                            options.commit_hook,
                            tuning,
                            permits,
                            deferred,
                        )
                        .run(rx);
                    }
                    Err(err) => ready(Err(err)),
                }
            })
            .map_err(|err| LedgerError::Open {
                path,
                detail: format!("cannot start the writer thread: {err}"),
                source: Some(err.into()),
            })?;
        Ok(ledger)
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes everything durable, stops the writer thread and closes the
    /// file. Later calls fail with [`LedgerError::Closed`]. Dropping the
    /// ledger does the same without waiting.
    pub async fn shutdown(&self) -> LedgerResult<()> {
        self.call(Request::Shutdown).await?;
        self.deferred.take()
    }

    /// Queues a request without waiting for the writer.
    async fn send(&self, request: Request) -> LedgerResult<()> {
        // The writer gives the permit back when it takes the request.
        self.permits
            .acquire()
            .await
            .map_err(|_| closed("the ledger was shut down"))?
            .forget();
        self.tx
            .send(request)
            .map_err(|_| closed("the ledger was shut down"))
    }

    async fn call<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> LedgerResult<T> {
        let (reply, answer) = oneshot::channel();
        self.send(request(reply)).await?;
        answer
            .await
            .map_err(|_| closed("the writer thread stopped before answering"))?
    }
}

fn closed(detail: &str) -> LedgerError {
    LedgerError::Closed {
        detail: detail.to_owned(),
    }
}

#[async_trait]
impl EffectLedger for SqliteLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        let key = (row.run_id.clone(), row.call_id.clone());
        self.call(|reply| Request::Started(row, reply)).await?;
        self.in_flight.insert(key, ());
        Ok(())
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        let (status, result) = StoredResult::from_outcome(outcome, self.max_result_bytes);
        let key = (run.clone(), call.clone());
        if self.in_flight.remove(&key).is_some() {
            // Started by this handle and not settled since: the row is there
            // and open, so the write can only fail on storage, which the
            // next flush reports. The row rides on the next commit.
            let (run, call) = key;
            return self
                .send(Request::Settled {
                    run,
                    call,
                    status,
                    result,
                    reply: None,
                })
                .await;
        }
        // Unknown to this handle (started by another process, before a
        // restart, or never): wait for the writer's verdict.
        self.call(|reply| Request::Settled {
            run: run.clone(),
            call: call.clone(),
            status,
            result,
            reply: Some(reply),
        })
        .await
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.call(|reply| Request::Rows {
            run: run.clone(),
            unresolved: true,
            reply,
        })
        .await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.call(Request::InDoubt).await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.call(|reply| Request::Resolve {
            run: run.clone(),
            call: call.clone(),
            resolve: resolve.clone(),
            max_bytes: self.max_result_bytes,
            reply,
        })
        .await?;
        // A row this handle started and that is now settled or deferred is
        // no longer in flight; a restart puts it back.
        self.in_flight.remove(&(run.clone(), call.clone()));
        Ok(())
    }

    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        self.call(|reply| Request::Get(run.clone(), call.clone(), reply))
            .await
    }

    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.call(|reply| Request::Rows {
            run: run.clone(),
            unresolved: false,
            reply,
        })
        .await
    }

    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.call(Request::UnfinishedRuns).await
    }

    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        self.call(|reply| Request::SaveCheckpoint {
            run: run.clone(),
            version,
            data,
            reply,
        })
        .await
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.call(|reply| Request::AppendCheckpoint {
            run: run.clone(),
            version,
            entry,
            reply,
        })
        .await
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.call(|reply| Request::LoadCheckpoint(run.clone(), reply))
            .await
    }

    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        self.call(|reply| Request::BeginRun(run.clone(), reply))
            .await
    }

    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.call(|reply| Request::RunState(run.clone(), reply))
            .await
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        self.call(|reply| Request::Finish(run.clone(), reply))
            .await?;
        // Calls of the run dropped mid-flight never settle; forget them.
        self.in_flight.retain(|(r, _), ()| r != run);
        Ok(())
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.call(|reply| Request::Prune(finished_before, reply))
            .await
    }

    async fn flush(&self) -> LedgerResult<()> {
        self.call(Request::Flush).await?;
        self.deferred.take()
    }

    fn max_result_bytes(&self) -> usize {
        self.max_result_bytes
    }
}
