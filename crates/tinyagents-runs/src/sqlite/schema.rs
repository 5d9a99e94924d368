//! The run store's SQLite schema and its migrations.

use rusqlite::Connection;

use super::classify;
use crate::error::{RunStoreError, RunStoreResult};

/// The SQLite `application_id` of a run store: the bytes `tARs`.
pub const RUN_STORE_APPLICATION_ID: i32 = 0x7441_5273;

/// One migration per version: `MIGRATIONS[k]` takes a file from version
/// `k` to `k + 1`. Append only.
///
/// Version 1 is the command line's `runs.db` of before the run store (no
/// application id); version 2 keeps that table as `runs_v1`, unread, and
/// starts the run store beside it; version 3 adds the runs' journals.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        file TEXT NOT NULL,
        session TEXT,
        status TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        pid INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        suspended TEXT,
        decisions TEXT NOT NULL,
        error TEXT
    ) STRICT;",
    "ALTER TABLE runs RENAME TO runs_v1;
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        file_path TEXT,
        file_sha256 TEXT,
        session TEXT,
        -- What it was asked (JSON text, as sealed).
        request TEXT NOT NULL,
        -- The seal of the identity above.
        seal TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval',
            'completed', 'terminated', 'limit_reached', 'cancelled', 'failed')),
        -- The holder (running only), and until when its lease runs (ms).
        owner TEXT,
        host TEXT,
        pid INTEGER,
        lease_until INTEGER,
        -- Raised by every claim; a holder's writes name it.
        epoch INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        updated_at INTEGER NOT NULL,
        ended_at INTEGER,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        final_text TEXT,
        error TEXT,
        -- Suspensions so far; the waiting calls of the last one count.
        suspension INTEGER NOT NULL DEFAULT 0,
        -- The state it waits in, sealed (JSON of a SealedRun), until the
        -- claim that resumes it.
        suspended TEXT
    ) STRICT;
    CREATE INDEX runs_by_status ON runs (status, created_at, run_id);
    CREATE TABLE waiting_calls (
        run_id TEXT NOT NULL,
        suspension INTEGER NOT NULL,
        position INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        reason TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        arguments TEXT NOT NULL,
        requested_at INTEGER NOT NULL,
        seal TEXT NOT NULL,
        approved INTEGER,
        decision_reason TEXT,
        decided_by TEXT,
        decided_at INTEGER,
        decision_seal TEXT,
        PRIMARY KEY (run_id, suspension, call_id)
    ) STRICT;
    CREATE TABLE run_history (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        by TEXT NOT NULL,
        event TEXT NOT NULL
    ) STRICT;
    CREATE INDEX run_history_by_run ON run_history (run_id, seq);
    CREATE TABLE store_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        key BLOB NOT NULL
    ) STRICT;",
    "CREATE TABLE run_journal (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        -- An AgentEvent, JSON text.
        event TEXT NOT NULL
    ) STRICT;
    CREATE INDEX run_journal_by_run ON run_journal (run_id, seq);",
];

/// The schema version this build writes.
pub const RUN_STORE_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Checks the file's marks and brings its schema to this version.
pub(super) fn migrate(conn: &mut Connection, shown: &str) -> RunStoreResult<()> {
    let classify = |error: rusqlite::Error| classify(shown, "migrate", error);
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |row| row.get(0))
        .map_err(classify)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(classify)?;
    // The command line's earlier `runs.db` had version 1 and no id.
    let earlier = app_id == 0 && version == 1;
    if app_id != RUN_STORE_APPLICATION_ID && app_id != 0 {
        return Err(RunStoreError::NotARunStore {
            path: shown.to_owned(),
            found: app_id,
        });
    }
    if app_id == 0 && version != 0 && !earlier {
        return Err(RunStoreError::NotARunStore {
            path: shown.to_owned(),
            found: app_id,
        });
    }
    if version > RUN_STORE_SCHEMA_VERSION {
        return Err(RunStoreError::TooNew {
            path: shown.to_owned(),
            found: version,
            supported: RUN_STORE_SCHEMA_VERSION,
        });
    }
    let _mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(classify)?;
    if version == RUN_STORE_SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(classify)?;
    // Another process may have migrated while this one waited.
    let now: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(classify)?;
    let from = usize::try_from(now).unwrap_or(0);
    for step in MIGRATIONS.iter().skip(from) {
        tx.execute_batch(step).map_err(classify)?;
    }
    tx.pragma_update(None, "application_id", RUN_STORE_APPLICATION_ID)
        .map_err(classify)?;
    tx.pragma_update(None, "user_version", RUN_STORE_SCHEMA_VERSION)
        .map_err(classify)?;
    tx.commit().map_err(classify)
}
