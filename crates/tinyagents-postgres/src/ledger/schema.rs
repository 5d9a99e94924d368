//! The ledger's tables in PostgreSQL (component `ledger` of
//! `tinyagents_schema`), and bringing a database up to date when a ledger
//! opens.
//!
//! Every id column is `COLLATE "C"`, so that rows sort by their bytes (as
//! Rust's `String` and the SQLite backend do) whatever the database's
//! locale. Time stamps are BIGINT milliseconds by the ledger's clock.

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::error::PgError;
use crate::migrate::migrate;
use crate::runs::schema as runs_schema;

/// The schema component of the ledger in `tinyagents_schema`.
pub(crate) const COMPONENT: &str = "ledger";

/// The SQL predicate of a call whose effect is unknown, as a literal for
/// `concat!`; the same text as [`tinyagents_ledger::backend::UNRESOLVED_SQL`]
/// (a test holds them equal). Part of the schema (the partial index of
/// version 1): never change it.
macro_rules! unresolved_predicate {
    () => {
        "(status = 'started' OR (status = 'interrupted' AND replay = 'never' AND \
         (resolved_effect IS NULL OR resolved_effect = 'unknown')))"
    };
}
pub(crate) use unresolved_predicate;

/// One migration per version: `MIGRATIONS[k]` takes the ledger from version
/// `k` to `k + 1`. Append only; never edit a released entry.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Version 1: call rows (`seq` keeps the order calls first started),
    // checkpoints (a base and the entries appended to it), the ledger's
    // view of runs (a claim, a finished mark), and the partial index of the
    // calls whose effect is unknown.
    concat!(
        "CREATE TABLE tinyagents_calls (
        seq BIGSERIAL NOT NULL,
        run_id TEXT COLLATE \"C\" NOT NULL,
        call_id TEXT COLLATE \"C\" NOT NULL,
        parent_call_id TEXT COLLATE \"C\",
        tool_name TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        replay TEXT NOT NULL CHECK (replay IN ('safe', 'never')),
        status TEXT NOT NULL CHECK (status IN
            ('started', 'completed', 'failed', 'interrupted', 'deferred')),
        attempts INTEGER NOT NULL,
        started_at BIGINT NOT NULL,
        settled_at BIGINT,
        -- The result's text as UTF-8 bytes: a tool's text may hold NUL,
        -- which a TEXT column cannot.
        content BYTEA,
        is_error BOOLEAN,
        metadata TEXT,
        control TEXT,
        original_bytes BIGINT,
        truncated BOOLEAN,
        resolved_effect TEXT,
        resolved_by TEXT,
        resolved_at BIGINT,
        resolved_note TEXT,
        -- One index for the rows: a settle changes `status`, so it is never
        -- a HOT update, and every index costs it an entry (`seq` orders a
        -- run's rows in a sort, without one of its own).
        PRIMARY KEY (run_id, call_id)
    );
    CREATE TABLE tinyagents_checkpoints (
        run_id TEXT COLLATE \"C\" PRIMARY KEY,
        version BIGINT NOT NULL,
        data BYTEA NOT NULL,
        saved_at BIGINT NOT NULL
    );
    CREATE TABLE tinyagents_checkpoint_entries (
        run_id TEXT COLLATE \"C\" NOT NULL,
        seq BIGINT NOT NULL,
        version BIGINT NOT NULL,
        data BYTEA NOT NULL,
        saved_at BIGINT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE tinyagents_ledger_runs (
        run_id TEXT COLLATE \"C\" PRIMARY KEY,
        claimed_at BIGINT,
        finished_at BIGINT
    );
    CREATE INDEX tinyagents_calls_unresolved ON tinyagents_calls (run_id, seq) WHERE ",
        unresolved_predicate!(),
        ";"
    ),
];

/// Brings the ledger's schema and that of the run store (whose epochs
/// fence the ledger's writes) to this build's versions, refusing newer
/// ones. When both are current already, it only reads, so a ledger opens
/// on a read-only server (a standby) to be read.
pub(crate) async fn ensure(client: &mut Client) -> Result<(), PgError> {
    for (component, migrations) in [
        (COMPONENT, MIGRATIONS),
        (runs_schema::COMPONENT, runs_schema::MIGRATIONS),
    ] {
        let supported = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
        let found = stored_version(client, component).await?;
        if found == Some(supported) {
            continue;
        }
        if let Some(found) = found.filter(|found| *found > supported) {
            return Err(PgError::TooNew {
                component,
                found,
                supported,
            });
        }
        migrate(client, component, migrations).await?;
    }
    Ok(())
}

/// The component's recorded version; `None` when none is recorded (or the
/// schema table does not exist yet).
async fn stored_version(client: &Client, component: &str) -> Result<Option<i64>, PgError> {
    match client
        .query_opt(
            "SELECT version FROM tinyagents_schema WHERE component = $1",
            &[&component],
        )
        .await
    {
        Ok(row) => row
            .map(|row| row.try_get::<_, i64>(0))
            .transpose()
            .map_err(|e| PgError::query("read schema version", e)),
        Err(err) if err.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(err) => Err(PgError::query("read schema version", err)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_predicate_is_the_shared_one() {
        assert_eq!(
            unresolved_predicate!(),
            tinyagents_ledger::backend::UNRESOLVED_SQL
        );
    }
}
