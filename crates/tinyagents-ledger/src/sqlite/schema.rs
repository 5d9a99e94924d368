//! Opening a ledger file: atomic creation, recognising the file as ours,
//! versioned migrations, integrity check, and the connection's settings.
//!
//! A ledger file carries two marks in its SQLite header: `application_id`
//! (ours, [`APPLICATION_ID`]) and `user_version` (the schema version, one
//! per entry of [`MIGRATIONS`]). A file without our mark is never written to,
//! and a file of a newer version is refused.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::error::{LedgerError, LedgerResult};
use tinyagents_core::ErrorSource;

/// The SQLite `application_id` of a ledger file: the bytes `tALg`.
pub(crate) const APPLICATION_ID: i32 = 0x7441_4c67;

/// The SQL predicate of a call whose effect is unknown
/// ([`LedgerRow::is_unresolved`](crate::LedgerRow::is_unresolved)): started,
/// or interrupted, never replayed and without a known resolution. Part of
/// the schema (the partial index of version 3): never change it.
macro_rules! unresolved_predicate {
    () => {
        "(status = 'started' OR (status = 'interrupted' AND replay = 'never' \
         AND (resolved_effect IS NULL OR resolved_effect = 'unknown')))"
    };
}

/// [`unresolved_predicate`] for the queries.
pub(crate) const UNRESOLVED: &str = unresolved_predicate!();

/// The schema, one migration per version: `MIGRATIONS[k]` takes a file from
/// version `k` to `k + 1`. Append only; never edit a released entry.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Version 1.
    "CREATE TABLE calls (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        parent_call_id TEXT,
        tool_name TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        replay TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        settled_at INTEGER,
        content TEXT,
        is_error INTEGER,
        metadata TEXT,
        control TEXT,
        original_bytes INTEGER,
        truncated INTEGER,
        UNIQUE (run_id, call_id)
    );
    CREATE TABLE checkpoints (
        run_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        data BLOB NOT NULL,
        saved_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        finished_at INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // Version 2: checkpoint entries appended after the base (`checkpoints`
    // keeps the base and its version; an entry carries the version it set,
    // so an append never rewrites the base's row), and run claims
    // (`begin_run`). `calls.status` may now hold 'deferred', which a
    // version-1 build would not read: the version bump keeps it out.
    "CREATE TABLE checkpoint_entries (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        version INTEGER NOT NULL,
        data BLOB NOT NULL,
        saved_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE claims (
        run_id TEXT PRIMARY KEY,
        claimed_at INTEGER NOT NULL
    ) WITHOUT ROWID;",
    // Version 3: what a tool's reconciliation or a person found out about a
    // call in doubt (`resolve`), and an index of the calls whose effect is
    // unknown (`unresolved`, `in_doubt`, `unfinished_runs`, pruning), so
    // finding them never scans the settled rows. Its predicate is
    // `UNRESOLVED`, which the queries repeat so that SQLite uses it.
    concat!(
        "ALTER TABLE calls ADD COLUMN resolved_effect TEXT;
    ALTER TABLE calls ADD COLUMN resolved_by TEXT;
    ALTER TABLE calls ADD COLUMN resolved_at INTEGER;
    ALTER TABLE calls ADD COLUMN resolved_note TEXT;
    CREATE INDEX calls_unresolved ON calls (run_id, seq) WHERE ",
        unresolved_predicate!(),
        ";"
    ),
];

/// The page size of a new ledger. Small pages because every commit writes
/// each page it touched to the write-ahead log before the fsync: a started
/// row touches two pages (the table's last leaf and the key index), and with
/// 1 KiB pages the commit that must be durable writes a quarter of the bytes
/// it would with SQLite's default 4 KiB, which measurably shortens it.
const PAGE_SIZE: u32 = 1024;

/// The tables of the current version (checked after migrating); a file that
/// lacks one is damaged.
const REQUIRED_TABLES: &[&str] = &[
    "calls",
    "checkpoint_entries",
    "checkpoints",
    "claims",
    "runs",
];

/// The schema version this build writes.
pub(crate) fn current_version() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// How a ledger file is opened.
pub(crate) struct OpenSpec<'a> {
    pub(crate) create_if_missing: bool,
    pub(crate) verify: bool,
    pub(crate) busy_timeout: std::time::Duration,
    pub(crate) path: &'a Path,
}

/// Opens (creating it when allowed and missing) the ledger at `spec.path`,
/// migrated to the current version, in WAL mode with `synchronous = FULL`.
pub(crate) fn open(spec: &OpenSpec<'_>) -> LedgerResult<Connection> {
    let path = spec.path;
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return Err(open_error(path, "the path is a directory")),
        Ok(meta) if meta.len() == 0 => {
            return Err(LedgerError::NotALedger {
                path: path.to_owned(),
                detail: "the file is empty (0 bytes); a ledger is never created in place, so \
                         this is not one (remove it to start a new ledger)"
                    .into(),
            });
        }
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if !spec.create_if_missing {
                return Err(LedgerError::Missing {
                    path: path.to_owned(),
                });
            }
            create(path)?;
        }
        Err(err) => return Err(open_failed(path, err)),
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|err| classify(path, err))?;
    conn.busy_timeout(spec.busy_timeout)
        .map_err(|err| classify(path, err))?;
    recognise(path, &conn)?;
    if spec.verify {
        verify(path, &conn)?;
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|err| classify(path, err))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open_error(
            path,
            format!("the file system does not allow WAL mode (journal mode is {mode})"),
        ));
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = OFF;")
        .map_err(|err| classify(path, err))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Creates a ledger file atomically: built and made durable under a
/// temporary name, then linked into place, so that a file at `path` is
/// always either a whole ledger or not ours. Losing a race to another
/// process creating the same file is not an error.
fn create(path: &Path) -> LedgerResult<()> {
    let name = path
        .file_name()
        .map_or_else(|| "ledger".into(), |n| n.to_string_lossy().into_owned());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let temp = path.with_file_name(format!(".{name}.init-{}-{nanos}", std::process::id()));
    let result = build_new(&temp).and_then(|()| link_into_place(&temp, path));
    // The temporary name is gone on success; after a failure it is removed
    // here, best effort (a stray one is harmless and never opened).
    let _ = fs::remove_file(&temp);
    result
}

fn build_new(temp: &Path) -> LedgerResult<()> {
    let mut conn = Connection::open(temp).map_err(|err| classify(temp, err))?;
    let built = (|| -> rusqlite::Result<()> {
        conn.execute_batch(&format!("PRAGMA page_size = {PAGE_SIZE}"))?;
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for migration in MIGRATIONS {
            tx.execute_batch(migration)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.pragma_update(None, "user_version", current_version())?;
        tx.commit()
    })();
    built.map_err(|err| classify(temp, err))?;
    // Closing the last connection checkpoints the WAL into the file.
    conn.close().map_err(|(_, err)| classify(temp, err))?;
    fs::File::open(temp)
        .and_then(|file| file.sync_all())
        .map_err(|err| open_failed(temp, err))
}

fn link_into_place(temp: &Path, path: &Path) -> LedgerResult<()> {
    match fs::hard_link(temp, path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        // A file system without hard links: rename, which is atomic too but
        // may replace a file another process created at the same moment.
        Err(_) if !path.exists() => {
            fs::rename(temp, path).map_err(|err| open_failed(path, err))?;
        }
        Err(err) => return Err(open_failed(path, err)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Make the new directory entry durable too.
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|err| open_failed(path, err))?;
    }
    Ok(())
}

/// Checks the marks in the header, and migrates an older schema.
fn recognise(path: &Path, conn: &Connection) -> LedgerResult<()> {
    let (app_id, version) = header(conn).map_err(|err| classify(path, err))?;
    if app_id != APPLICATION_ID {
        let tables = table_names(conn).map_err(|err| classify(path, err))?;
        let detail = if app_id != 0 {
            format!(
                "its application_id is {app_id:#010x}, not the ledger's {APPLICATION_ID:#010x}; \
                 it belongs to another application"
            )
        } else if tables.is_empty() {
            "an empty SQLite database without the ledger's application_id; \
             a ledger is never adopted in place"
                .to_owned()
        } else {
            format!(
                "a SQLite database without the ledger's application_id, holding the tables {}",
                tables.join(", ")
            )
        };
        return Err(LedgerError::NotALedger {
            path: path.to_owned(),
            detail,
        });
    }
    if version > current_version() {
        return Err(LedgerError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
            supported: current_version(),
        });
    }
    if version < 0 {
        return Err(corrupt(path, format!("negative schema version {version}")));
    }
    if version < current_version() {
        migrate(conn).map_err(|err| classify(path, err))?;
    }
    let tables = table_names(conn).map_err(|err| classify(path, err))?;
    if let Some(missing) = REQUIRED_TABLES
        .iter()
        .find(|t| !tables.iter().any(|have| have == *t))
    {
        return Err(corrupt(
            path,
            format!("schema version {version} but the table '{missing}' is missing"),
        ));
    }
    Ok(())
}

fn header(conn: &Connection) -> rusqlite::Result<(i32, i64)> {
    let app_id = conn.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    let version = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    Ok((app_id, version))
}

/// Applies the missing migrations in one transaction, re-reading the
/// version inside it (another process may have migrated meanwhile).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let applied = (|| {
        let from: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let from = usize::try_from(from).unwrap_or(MIGRATIONS.len());
        for migration in MIGRATIONS.iter().skip(from) {
            conn.execute_batch(migration)?;
        }
        conn.pragma_update(None, "user_version", current_version())?;
        conn.execute_batch("COMMIT")
    })();
    if applied.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    applied
}

fn table_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    stmt.query_map([], |row| row.get(0))?.collect()
}

/// `PRAGMA quick_check`: every page readable and every b-tree well formed.
fn verify(path: &Path, conn: &Connection) -> LedgerResult<()> {
    let problems = (|| -> rusqlite::Result<Vec<String>> {
        let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
        stmt.query_map([], |row| row.get(0))?.collect()
    })()
    .map_err(|err| classify(path, err))?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(corrupt(
        path,
        format!("integrity check failed: {}", problems.join("; ")),
    ))
}

/// Maps an SQLite error met while opening `path` to the error that says what
/// is wrong with the file.
pub(crate) fn classify(path: &Path, err: rusqlite::Error) -> LedgerError {
    let detail = match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => format!(
            "not a readable SQLite database (its header is damaged or it is another kind of file): {err}"
        ),
        Some(ErrorCode::DatabaseCorrupt) => err.to_string(),
        _ => return open_failed(path, err),
    };
    LedgerError::Corrupt {
        path: PathBuf::from(path),
        detail,
        source: Some(ErrorSource::new(err)),
    }
}

fn corrupt(path: &Path, detail: impl Into<String>) -> LedgerError {
    LedgerError::Corrupt {
        path: PathBuf::from(path),
        detail: detail.into(),
        source: None,
    }
}

fn open_error(path: &Path, detail: impl Into<String>) -> LedgerError {
    LedgerError::Open {
        path: path.to_owned(),
        detail: detail.into(),
        source: None,
    }
}

/// The file at `path` could not be opened because of `err`.
fn open_failed(path: &Path, err: impl std::error::Error + Send + Sync + 'static) -> LedgerError {
    LedgerError::Open {
        path: path.to_owned(),
        detail: err.to_string(),
        source: Some(ErrorSource::new(err)),
    }
}
