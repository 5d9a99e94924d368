//! Versioned migrations, one list per component (the ledger, the session
//! store, the run store), recorded in `tinyagents_schema`.
//!
//! Opening a component takes a transaction-scoped advisory lock (so two
//! processes opening one database at once migrate it once), reads the
//! component's version, refuses a version newer than this build knows
//! (fail closed: never a fresh start over data it cannot read) and applies
//! the missing migrations in that same transaction.

use tokio_postgres::Client;

use crate::error::PgError;

/// The advisory lock key of migrations (the bytes `tALm`).
const MIGRATION_LOCK: i64 = 0x7441_4c6d;

/// Brings `component` to `migrations.len()` (its schema version):
/// `migrations[k]` takes it from version `k` to `k + 1`. Append only; never
/// edit a released entry. Returns the version found before migrating.
pub(crate) async fn migrate(
    client: &mut Client,
    component: &'static str,
    migrations: &[&str],
) -> Result<i64, PgError> {
    let supported = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
    let tx = client
        .transaction()
        .await
        .map_err(|e| PgError::query("begin migration", e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| PgError::query("lock migrations", e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS tinyagents_schema (
            component TEXT PRIMARY KEY,
            version BIGINT NOT NULL,
            migrated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(|e| PgError::query("create tinyagents_schema", e))?;
    let found: i64 = tx
        .query_opt(
            "SELECT version FROM tinyagents_schema WHERE component = $1",
            &[&component],
        )
        .await
        .map_err(|e| PgError::query("read schema version", e))?
        .map_or(0, |row| row.get(0));
    if found > supported {
        return Err(PgError::TooNew {
            component,
            found,
            supported,
        });
    }
    let start = usize::try_from(found).unwrap_or(0);
    for (version, sql) in migrations.iter().enumerate().skip(start) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| PgError::Migration {
                component,
                version: i64::try_from(version + 1).unwrap_or(i64::MAX),
                detail: crate::error::detail(&e),
                source: Some(e.into()),
            })?;
    }
    if found < supported {
        tx.execute(
            "INSERT INTO tinyagents_schema (component, version) VALUES ($1, $2) \
             ON CONFLICT (component) DO UPDATE SET version = $2, migrated_at = now()",
            &[&component, &supported],
        )
        .await
        .map_err(|e| PgError::query("record schema version", e))?;
    }
    tx.commit()
        .await
        .map_err(|e| PgError::query("commit migration", e))?;
    Ok(found)
}
