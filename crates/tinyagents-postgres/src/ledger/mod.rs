//! `PostgresLedger`: the effect ledger in PostgreSQL, for workers on many
//! machines sharing one database.
//!
//! The reference is the SQLite backend of `tinyagents-ledger`, and it
//! decides as that does (the shared rules of
//! [`tinyagents_ledger::backend`]). All the ledger's SQL runs on one
//! writer task owning a dedicated connection (`writer.rs`), which
//! group-commits concurrent started rows: one transaction and one durable
//! commit for every row waiting when it commits. A worker's writes carry
//! its lease and are fenced ([`FencedLedger`], `fence.rs`).
//!
//! Tables (component `ledger` of `tinyagents_schema`, `schema.rs`):
//! `tinyagents_calls`, `tinyagents_checkpoints`,
//! `tinyagents_checkpoint_entries`, `tinyagents_ledger_runs`. Opening a
//! ledger also brings the runs queue's schema up to date, so the table of
//! epochs its fences read always exists.

mod conn;
mod fence;
mod handle;
mod request;
mod runs;
mod schema;
mod store;
mod writer;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::{
    Checkpoint, Clock, DEFAULT_MAX_RESULT_BYTES, EffectLedger, InDoubt, LedgerError, LedgerResult,
    LedgerRow, Outcome, PruneReport, Resolve, RunState, SharedClock, StartedRow, SystemClock,
    Timestamp,
};
use tokio::sync::mpsc;

pub use fence::FencedLedger;

use crate::PgDatabase;
use crate::error::PgError;
use conn::Conn;
use handle::Core;
use request::Deferred;
use writer::{Tuning, Writer};

/// The ledger's schema version this build writes (in `tinyagents_schema`,
/// component `ledger`).
pub const LEDGER_SCHEMA_VERSION: i64 = schema::MIGRATIONS.len() as i64;

/// How many requests may wait for the writer before callers wait for room
/// (back-pressure instead of unbounded memory).
const IN_FLIGHT: usize = 4096;

/// How a [`PostgresLedger`] is opened.
#[derive(Debug, Clone)]
pub struct PostgresLedgerOptions {
    /// The cut of a stored result, in bytes.
    pub max_result_bytes: usize,
    /// Where row time stamps come from (stored as milliseconds).
    pub clock: SharedClock,
    /// The most requests the writer takes from the queue at once.
    pub max_batch: usize,
    /// How long a transaction holding only rows that may ride (settled
    /// rows, checkpoints, …) stays open before it is committed: the longest
    /// a riding row waits to become durable when no call starts. Keep it
    /// far below the database's `idle_in_transaction_timeout`.
    pub linger: Duration,
}

impl Default for PostgresLedgerOptions {
    fn default() -> Self {
        Self {
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            clock: Arc::new(SystemClock),
            max_batch: 256,
            linger: Duration::from_millis(2),
        }
    }
}

impl PostgresLedgerOptions {
    /// Sets [`max_result_bytes`](Self::max_result_bytes).
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

    /// Sets [`max_batch`](Self::max_batch) (at least 1).
    #[must_use]
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// Sets [`linger`](Self::linger).
    #[must_use]
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }
}

/// An [`EffectLedger`] in a PostgreSQL database (versioned schema, group
/// commit on one writer connection).
///
/// Dropping the ledger and every [`FencedLedger`] made from it commits
/// what rode on the open transaction and stops the writer;
/// [`shutdown`](Self::shutdown) does so and waits.
pub struct PostgresLedger {
    core: Arc<Core>,
    /// Calls this handle started and has not settled: their settled rows
    /// can only fail on storage, so they are sent without waiting.
    in_flight: Mutex<HashSet<(RunId, CallId)>>,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger")
            .field("target", &self.core.target)
            .finish_non_exhaustive()
    }
}

impl PostgresLedger {
    /// Opens the ledger in `database` with default options, creating or
    /// migrating its tables.
    pub async fn open(database: &PgDatabase) -> LedgerResult<Self> {
        Self::open_with(database, PostgresLedgerOptions::default()).await
    }

    /// Opens the ledger in `database` with `options`. A schema newer than
    /// this build knows is refused ([`LedgerError::UnsupportedVersion`]);
    /// an up-to-date schema is only read, so a read-only server opens (and
    /// refuses writes, naming itself read-only).
    pub async fn open_with(
        database: &PgDatabase,
        options: PostgresLedgerOptions,
    ) -> LedgerResult<Self> {
        let mut client = database.dedicated().await?;
        schema::ensure(&mut client)
            .await
            .map_err(|err| open_error(database, err))?;
        drop(client);
        // The writer's own connection, whose I/O it drives itself.
        let (client, driver) = database.dedicated_driven().await?;
        let (tx, rx) = mpsc::channel(IN_FLIGHT);
        let deferred = Arc::new(Deferred::default());
        let core = Arc::new(Core {
            tx,
            deferred: deferred.clone(),
            target: database.target().to_owned(),
            max_result_bytes: options.max_result_bytes,
        });
        let tuning = Tuning {
            max_batch: options.max_batch,
            linger: options.linger,
        };
        let writer = Writer::new(
            database.clone(),
            Conn::new(client, driver),
            options.clock,
            tuning,
            deferred,
        );
        tokio::spawn(writer.run(rx));
        Ok(Self {
            core,
            in_flight: Mutex::new(HashSet::new()),
        })
    }

    /// A handle whose writes carry the lease of a worker on `run` at
    /// `epoch` (see [`FencedLedger`]), sharing this ledger's writer.
    pub fn fenced(&self, run: RunId, epoch: u64) -> FencedLedger {
        FencedLedger::new(self.core.clone(), run, epoch)
    }

    /// Host, port and database of the ledger (never the password).
    pub fn target(&self) -> &str {
        &self.core.target
    }

    /// Makes everything durable, stops the writer and closes its
    /// connection. Later calls of every handle fail with
    /// [`LedgerError::Closed`].
    pub async fn shutdown(&self) -> LedgerResult<()> {
        self.core.shutdown().await
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<(RunId, CallId)>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// An error met opening the ledger, naming the database.
fn open_error(database: &PgDatabase, err: PgError) -> LedgerError {
    match err {
        PgError::TooNew {
            component,
            found,
            supported,
        } => LedgerError::UnsupportedVersion {
            path: format!(
                "postgres at {} (tinyagents_schema: {component})",
                database.target()
            )
            .into(),
            found,
            supported,
        },
        err @ (PgError::Unreachable { .. } | PgError::Url { .. }) => err.into(),
        other => LedgerError::Open {
            path: database.target().into(),
            detail: other.to_string(),
            source: Some(other.into()),
        },
    }
}

#[async_trait]
impl EffectLedger for PostgresLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        let key = (row.run_id.clone(), row.call_id.clone());
        self.core.started(row, None).await?;
        self.in_flight().insert(key);
        Ok(())
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        // Started by this handle and not settled since: the row is there
        // and open, so the write can only fail on storage, which the next
        // flush reports. Otherwise, wait for the writer's verdict.
        let known = self.in_flight().remove(&(run.clone(), call.clone()));
        self.core.settled(run, call, outcome, None, !known).await
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.core.rows(run, true).await
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.core.in_doubt().await
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.core.resolve(run, call, resolve, None).await?;
        // A row this handle started and that is now settled or deferred is
        // no longer in flight; a restart puts it back.
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
        self.core.begin_run(run, None).await
    }

    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.core.run_state(run).await
    }

    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        self.core.save_checkpoint(run, version, data, None).await
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.core.append_checkpoint(run, version, entry, None).await
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.core.load_checkpoint(run).await
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        self.core.finish(run, None).await?;
        // Calls of the run dropped mid-flight never settle; forget them.
        self.in_flight().retain(|(r, _)| r != run);
        Ok(())
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        self.core.prune(finished_before, None).await
    }

    async fn flush(&self) -> LedgerResult<()> {
        self.core.flush().await
    }

    fn max_result_bytes(&self) -> usize {
        self.core.max_result_bytes
    }
}
