//! `PostgresRunStore`: the run store (`tinyagents_runs::RunStore`) in a
//! PostgreSQL database every process of a deployment shares: the command
//! line, the workers, a console.
//!
//! It behaves as the SQLite store of `tinyagents-runs` does, transaction
//! for transaction (the conformance suite holds both to it): the same
//! seals (`tinyagents_runs::backend`), the same refusals, the same history.
//! Every write is one transaction (a read, one statement); what a
//! check-then-write reads it locks first (`SELECT … FOR UPDATE`), so two claimers of one run, or two
//! people deciding one call, never both succeed; a worker's claim of the
//! next runs locks each `FOR UPDATE SKIP LOCKED`, so two workers never
//! take the same run and neither waits for the other.
//!
//! Times are the server's clock, read once at the start of each
//! transaction ([`clock`]) and written as BIGINT milliseconds: every host
//! stamps with one clock, and a decision's seal covers the time stored.
//!
//! The tables are in `schema.rs` (component `runs` of `tinyagents_schema`,
//! [`RUN_STORE_SCHEMA_VERSION`]); reading rows back in `read.rs`; claims,
//! leases and the runs a worker takes in `claim.rs`; how a segment ends in
//! `end.rs`; decisions in `decide.rs`; journals in `journal.rs`; the rest
//! of the trait in `store.rs`.

mod claim;
mod decide;
mod end;
mod journal;
mod read;
pub(crate) mod schema;
mod store;

use std::fmt;

use deadpool_postgres::Object;
use tinyagents_core::RunId;
use tinyagents_ledger::Timestamp;
use tinyagents_runs::backend::{to_i64, to_u64};
use tinyagents_runs::{RunEvent, RunStoreError, RunStoreResult, SealKey};
use tokio_postgres::GenericClient;

use crate::database::PgDatabase;
use crate::error::detail;
use crate::migrate::migrate;

/// The schema version of the run store's tables (component `runs` of
/// `tinyagents_schema`) this build writes. Version 1 was the earlier
/// build's runs queue; a database at version 1 is migrated, its runs kept
/// aside in `tinyagents_runs_v1`, unread. Version 3 added runs' journals.
pub const RUN_STORE_SCHEMA_VERSION: i64 = schema::MIGRATIONS.len() as i64;

/// How a [`PostgresRunStore`] is opened.
#[derive(Debug, Clone, Default)]
pub struct PostgresRunStoreOptions {
    /// The key to seal with; the store's own (generated once and kept in
    /// the database, in `tinyagents_run_store_key`) when `None`. See
    /// [`SealKey`] for what each protects against: with the store's own
    /// key, a seal detects edits made without this code; only a key kept
    /// outside the database also stops someone who can write to it and
    /// read the key.
    pub seal_key: Option<SealKey>,
}

/// The run store in a PostgreSQL database. Cheap to clone (the database's
/// pool is shared).
#[derive(Clone)]
pub struct PostgresRunStore {
    db: PgDatabase,
    key: SealKey,
}

impl fmt::Debug for PostgresRunStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresRunStore")
            .field("target", &self.db.target())
            .finish_non_exhaustive()
    }
}

impl PostgresRunStore {
    /// Opens the run store of `db` with its own sealing key, creating or
    /// migrating its tables; a schema newer than this build is refused
    /// ([`RunStoreError::TooNew`]).
    pub async fn open(db: &PgDatabase) -> RunStoreResult<Self> {
        Self::open_with(db, PostgresRunStoreOptions::default()).await
    }

    /// Opens the run store of `db` with `options`.
    pub async fn open_with(
        db: &PgDatabase,
        options: PostgresRunStoreOptions,
    ) -> RunStoreResult<Self> {
        let operation = "open";
        let mut client = db.pooled().await.map_err(|e| e.into_run_store(operation))?;
        migrate(&mut client, schema::COMPONENT, schema::MIGRATIONS)
            .await
            .map_err(|e| match e.into_run_store(operation) {
                RunStoreError::TooNew {
                    found, supported, ..
                } => RunStoreError::TooNew {
                    path: format!("{} (tinyagents_schema: runs)", db.target()),
                    found,
                    supported,
                },
                other => other,
            })?;
        let key = match options.seal_key {
            Some(key) => key,
            None => own_key(connection(&client)).await?,
        };
        Ok(Self {
            db: db.clone(),
            key,
        })
    }

    /// The database.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    /// A connection of the pool, for `operation`.
    async fn client(&self, operation: &'static str) -> RunStoreResult<Object> {
        self.db
            .pooled()
            .await
            .map_err(|e| e.into_run_store(operation))
    }
}

/// The client of a pooled connection.
fn connection(object: &Object) -> &tokio_postgres::Client {
    object
}

/// The store's own key: read from the database, or generated and kept
/// there the first time (one row, inserted once however many processes
/// race).
async fn own_key<C: GenericClient + Sync>(client: &C) -> RunStoreResult<SealKey> {
    let operation = "read the sealing key";
    let candidate = SealKey::generate()?;
    client
        .execute(
            "INSERT INTO tinyagents_run_store_key (id, key) VALUES (1, $1) \
             ON CONFLICT (id) DO NOTHING",
            &[&candidate.as_bytes()],
        )
        .await
        .map_err(failed(operation))?;
    let stored: Option<Vec<u8>> = client
        .query_opt("SELECT key FROM tinyagents_run_store_key WHERE id = 1", &[])
        .await
        .map_err(failed(operation))?
        .map(|row| row.try_get(0))
        .transpose()
        .map_err(failed(operation))?;
    SealKey::from_bytes(&stored.unwrap_or_default())
}

/// The server's clock, as the run store stamps rows: milliseconds since
/// the Unix epoch of the transaction's start (`now()` does not move
/// within a transaction), read once and passed to every write of it.
const NOW_MS: &str = "SELECT (extract(epoch from now()) * 1000)::bigint";

/// The time of the transaction `tx`.
async fn clock(tx: &Tx<'_>, operation: &'static str) -> RunStoreResult<Timestamp> {
    let statement = cached(tx, NOW_MS, operation).await?;
    let row = tx
        .query_one(&statement, &[])
        .await
        .map_err(failed(operation))?;
    let ms: i64 = row.try_get(0).map_err(failed(operation))?;
    Ok(Timestamp::from_millis(to_u64(ms)))
}

/// A failed statement of `operation`, as the run store reports it (the
/// server's message and SQLSTATE, or the client's error with its cause).
fn failed(operation: &'static str) -> impl Fn(tokio_postgres::Error) -> RunStoreError {
    move |err| RunStoreError::Storage {
        operation,
        detail: detail(&err),
        source: Some(err.into()),
    }
}

/// A transaction on a pooled connection, whose statements are prepared
/// once per connection ([`cached`]).
type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// `sql` prepared on `tx`'s connection, once per connection: a statement
/// is one round trip, not two (prepare, then run).
async fn cached(
    tx: &Tx<'_>,
    sql: &str,
    operation: &'static str,
) -> RunStoreResult<tokio_postgres::Statement> {
    tx.prepare_cached(sql).await.map_err(failed(operation))
}

/// Adds `event` to the run's history, by `by` at `at`.
async fn note(
    tx: &Tx<'_>,
    run: &RunId,
    by: &str,
    at: Timestamp,
    event: &RunEvent,
) -> RunStoreResult<()> {
    let text = tinyagents_runs::backend::history_text(run, event)?;
    let operation = "write a run's history";
    let statement = cached(
        tx,
        "INSERT INTO tinyagents_run_history (run_id, at, by, event) VALUES ($1, $2, $3, $4)",
        operation,
    )
    .await?;
    tx.execute(
        &statement,
        &[&run.as_str(), &to_i64(at.as_millis()), &by, &text],
    )
    .await
    .map_err(failed(operation))?;
    Ok(())
}
