//! Opening a ledger file: bad files are refused with an error naming the
//! file and the problem, never overwritten and never replaced by a fresh
//! ledger; versions are checked and migrated.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{
    APPLICATION_ID, CallStatus, Effect, EffectLedger, Found, LedgerError, Outcome, Resolve,
    ResolvedBy, RunState, SCHEMA_VERSION, SqliteLedger, SqliteOptions, StartedRow, args_hash,
};

async fn open(path: &Path) -> Result<SqliteLedger, LedgerError> {
    SqliteLedger::open(path).await
}

fn row(run: &str, call: &str) -> StartedRow {
    StartedRow::new(
        RunId::from(run),
        CallId::new(call),
        "t",
        args_hash(&json!({})),
        ToolReplay::Safe,
    )
}

/// Opens, refuses, and checks that the file was left exactly as it was.
async fn refused(path: &Path) -> LedgerError {
    let before = std::fs::read(path).unwrap();
    let err = open(path).await.expect_err("a bad file must be refused");
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "a refused file was modified"
    );
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "{text} does not name the file"
    );
    err
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    (dir, path)
}

#[tokio::test]
async fn random_bytes_are_a_corrupt_file() {
    let (_dir, path) = temp();
    // Deterministic noise: an LCG, not a real database header.
    let mut x: u32 = 12345;
    let noise: Vec<u8> = (0..8192)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    std::fs::write(&path, noise).unwrap();
    let err = refused(&path).await;
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn a_ledger_with_damaged_pages_is_refused() {
    let (_dir, path) = temp();
    let ledger = open(&path).await.unwrap();
    for i in 0..400 {
        ledger
            .record_started(row(&format!("run-{i}"), "p1"))
            .await
            .unwrap();
    }
    ledger.shutdown().await.unwrap();
    // Overwrite pages 2 and 3 (the tables' roots) with garbage; page 1, the
    // header and schema, stays intact.
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.len() > 4 * 4096,
        "the ledger should span several pages"
    );
    for (i, b) in bytes[4096..3 * 4096].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = refused(&path).await;
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn another_applications_database_is_not_a_ledger() {
    let (_dir, path) = temp();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL);
         INSERT INTO users (name) VALUES ('ada');",
    )
    .unwrap();
    drop(conn);
    let err = refused(&path).await;
    match &err {
        LedgerError::NotALedger { detail, .. } => {
            assert!(detail.contains("orders, users"), "{detail}");
        }
        other => panic!("expected NotALedger, got {other:?}"),
    }
    let conn = Connection::open(&path).unwrap();
    let name: String = conn
        .query_row("SELECT name FROM users", [], |r| r.get(0))
        .unwrap();
    assert_eq!(name, "ada", "the other database was not left alone");
}

#[tokio::test]
async fn a_foreign_application_id_is_not_a_ledger() {
    let (_dir, path) = temp();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA application_id = 42; CREATE TABLE calls (x);")
        .unwrap();
    drop(conn);
    let err = refused(&path).await;
    assert!(
        matches!(&err, LedgerError::NotALedger { detail, .. } if detail.contains("0x0000002a")),
        "{err:?}"
    );
}

#[tokio::test]
async fn empty_files_and_empty_databases_are_not_adopted() {
    let (dir, path) = temp();
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        refused(&path).await,
        LedgerError::NotALedger { .. }
    ));

    let blank = dir.path().join("blank.db");
    let conn = Connection::open(&blank).unwrap();
    conn.execute_batch("CREATE TABLE scratch (a); DROP TABLE scratch;")
        .unwrap();
    drop(conn);
    assert!(std::fs::metadata(&blank).unwrap().len() > 0);
    match refused(&blank).await {
        LedgerError::NotALedger { detail, .. } => assert!(detail.contains("empty"), "{detail}"),
        other => panic!("expected NotALedger, got {other:?}"),
    }
}

#[tokio::test]
async fn a_newer_schema_version_is_refused() {
    let (_dir, path) = temp();
    let ledger = open(&path).await.unwrap();
    ledger.record_started(row("r", "p1")).await.unwrap();
    ledger.shutdown().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = refused(&path).await;
    match err {
        LedgerError::UnsupportedVersion {
            found, supported, ..
        } => assert_eq!((found, supported), (99, SCHEMA_VERSION)),
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn a_marked_file_at_version_zero_is_migrated() {
    let (_dir, path) = temp();
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .unwrap();
    drop(conn);
    let ledger = open(&path).await.unwrap();
    ledger.record_started(row("r", "p1")).await.unwrap();
    ledger.shutdown().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[tokio::test]
async fn a_new_file_is_created_in_wal_mode_and_reopens() {
    let (dir, path) = temp();
    let ledger = open(&path).await.unwrap();
    assert_eq!(ledger.path(), path);
    ledger.record_started(row("r", "p1")).await.unwrap();
    // A second handle on the same file (as another process would open it)
    // sees the durable row.
    let other = open(&path).await.unwrap();
    assert!(
        other
            .get(&RunId::from("r"), &CallId::new("p1"))
            .await
            .unwrap()
            .is_some()
    );
    other.shutdown().await.unwrap();
    ledger.shutdown().await.unwrap();
    assert!(matches!(
        ledger.flush().await,
        Err(LedgerError::Closed { .. })
    ));
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(conn);
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".init-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[tokio::test]
async fn missing_files_and_directories_are_clear_errors() {
    let (dir, path) = temp();
    let options = SqliteOptions::default().create_if_missing(false);
    let err = SqliteLedger::open_with(&path, options).await.unwrap_err();
    assert!(matches!(err, LedgerError::Missing { .. }), "{err:?}");
    assert!(
        !path.exists(),
        "a ledger was created although creation was off"
    );

    let err = open(dir.path()).await.unwrap_err();
    assert!(matches!(err, LedgerError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("directory"), "{err}");

    let nowhere = dir.path().join("no/such/dir/ledger.db");
    let err = open(&nowhere).await.unwrap_err();
    assert!(matches!(err, LedgerError::Open { .. }), "{err:?}");
}

#[tokio::test]
async fn shutdown_commits_the_settled_rows_riding_on_it() {
    let (_dir, path) = temp();
    let ledger = open(&path).await.unwrap();
    let run = RunId::from("r");
    ledger.record_started(row("r", "p1")).await.unwrap();
    let outcome = Outcome::Completed(ToolResult::text("done"));
    ledger
        .record_settled(&run, &CallId::new("p1"), &outcome)
        .await
        .unwrap();
    ledger
        .save_checkpoint(&run, 3, b"state".to_vec())
        .await
        .unwrap();
    ledger.shutdown().await.unwrap();
    let again = open(&path).await.unwrap();
    let settled = again.get(&run, &CallId::new("p1")).await.unwrap().unwrap();
    assert_eq!(settled.status, CallStatus::Completed);
    assert_eq!(
        again.load_checkpoint(&run).await.unwrap().unwrap().version,
        3
    );
    again.flush().await.unwrap();
}

#[test]
fn open_blocking_works_outside_a_runtime() {
    let (_dir, path) = temp();
    let ledger = SqliteLedger::open_blocking(&path, SqliteOptions::default()).unwrap();
    drop(ledger);
    let err = SqliteLedger::open_blocking(
        path.with_file_name("absent.db"),
        SqliteOptions::default().create_if_missing(false),
    )
    .unwrap_err();
    assert!(matches!(err, LedgerError::Missing { .. }));
}

/// The version-1 schema, verbatim as released (the file format a build of
/// schema version 1 wrote).
const SCHEMA_V1: &str = "CREATE TABLE calls (
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
    ) WITHOUT ROWID;";

/// Writes a version-1 ledger at `path` as a version-1 build left it: run
/// `r1` with a completed call `p1`, a call in doubt `p2` and a checkpoint
/// at version 3, and a finished run `r0`. `extra` runs after the schema.
fn write_v1_ledger(path: &Path, extra: &str) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA page_size = 1024;").unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(SCHEMA_V1).unwrap();
    conn.execute_batch(extra).unwrap();
    let hash = args_hash(&json!({}));
    conn.execute(
        "INSERT INTO calls (run_id, call_id, tool_name, args_hash, replay, status, attempts, \
         started_at, settled_at, content, is_error, original_bytes, truncated) \
         VALUES ('r1', 'p1', 'pay', ?1, 'never', 'completed', 1, 10, 11, 'paid', 0, 4, 0)",
        [&hash],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO calls (run_id, call_id, tool_name, args_hash, replay, status, attempts, \
         started_at) VALUES ('r1', 'p2', 'read', ?1, 'safe', 'started', 2, 12)",
        [&hash],
    )
    .unwrap();
    conn.execute_batch(
        "INSERT INTO checkpoints (run_id, version, data, saved_at) VALUES ('r1', 3, X'737461', 13);
         INSERT INTO runs (run_id, finished_at) VALUES ('r0', 9);",
    )
    .unwrap();
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    conn.close().unwrap();
}

fn user_version(path: &Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_version_1_file_migrates_in_place_and_keeps_its_rows_and_checkpoint() {
    assert_eq!(SCHEMA_VERSION, 3);
    let (_dir, path) = temp();
    write_v1_ledger(&path, "");
    let ledger = open(&path).await.unwrap();
    let r1 = RunId::from("r1");
    let paid = ledger.get(&r1, &CallId::new("p1")).await.unwrap().unwrap();
    assert_eq!(
        (paid.status, paid.replay),
        (CallStatus::Completed, ToolReplay::Never)
    );
    assert_eq!(paid.result.unwrap().content, "paid");
    let open_rows: Vec<String> = ledger
        .unresolved(&r1)
        .await
        .unwrap()
        .into_iter()
        .map(|row| format!("{}:{}", row.call_id, row.attempts))
        .collect();
    assert_eq!(open_rows, ["p2:2"]);
    let checkpoint = ledger.load_checkpoint(&r1).await.unwrap().unwrap();
    assert_eq!(
        (checkpoint.version, checkpoint.data.as_slice()),
        (3, &b"sta"[..])
    );
    assert!(checkpoint.appended.is_empty());
    // The version-2 tables work on the migrated file.
    ledger
        .append_checkpoint(&r1, 4, b"more".to_vec())
        .await
        .unwrap();
    assert!(matches!(
        ledger.begin_run(&r1).await,
        Err(LedgerError::RunExists { .. })
    ));
    assert_eq!(
        ledger.run_state(&RunId::from("r0")).await.unwrap(),
        RunState::Finished
    );
    assert_eq!(
        ledger.unfinished_runs().await.unwrap(),
        std::slice::from_ref(&r1)
    );
    // The version-3 columns work on it: the call in doubt is listed, and a
    // person's resolution settles it.
    let listed: Vec<String> = ledger
        .in_doubt()
        .await
        .unwrap()
        .iter()
        .map(|d| format!("{}:{}", d.row.run_id, d.row.call_id))
        .collect();
    assert_eq!(listed, ["r1:p2"]);
    let found = Found::Happened(ToolResult::text("read 3"));
    ledger
        .resolve(&r1, &CallId::new("p2"), &Resolve::by_person("ops", found))
        .await
        .unwrap();
    ledger.shutdown().await.unwrap();
    assert_eq!(user_version(&path), SCHEMA_VERSION);
    let again = open(&path).await.unwrap();
    let reloaded = again.load_checkpoint(&r1).await.unwrap().unwrap();
    assert_eq!(
        (reloaded.version, reloaded.appended),
        (4, vec![b"more".to_vec()])
    );
    let read = again.get(&r1, &CallId::new("p2")).await.unwrap().unwrap();
    assert_eq!(read.status, CallStatus::Completed);
    let resolution = read.resolution.unwrap();
    assert_eq!(
        (resolution.effect, resolution.by),
        (Effect::Happened, ResolvedBy::Person("ops".into()))
    );
    assert!(again.in_doubt().await.unwrap().is_empty());
    again.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_migration_leaves_the_version_1_file_as_it_was() {
    let (_dir, path) = temp();
    // A stray table in the way of version 2's `claims`: the migration fails
    // half way, and its one transaction rolls back whole.
    write_v1_ledger(&path, "CREATE TABLE claims (x);");
    let err = refused(&path).await;
    assert!(
        matches!(&err, LedgerError::Open { detail, .. } if detail.contains("claims")),
        "{err:?}"
    );
    assert_eq!(user_version(&path), 1);
    let conn = Connection::open(&path).unwrap();
    let entries: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'checkpoint_entries'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(entries, 0, "the first table of the migration was kept");
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn a_version_2_file_missing_a_table_is_corrupt() {
    let (_dir, path) = temp();
    let ledger = open(&path).await.unwrap();
    ledger.record_started(row("r", "p1")).await.unwrap();
    ledger.shutdown().await.unwrap();
    for table in ["claims", "checkpoint_entries"] {
        let copy = path.with_file_name(format!("without-{table}.db"));
        std::fs::copy(&path, &copy).unwrap();
        let conn = Connection::open(&copy).unwrap();
        conn.execute_batch(&format!("DROP TABLE {table}")).unwrap();
        conn.close().unwrap();
        match refused(&copy).await {
            LedgerError::Corrupt { detail, .. } => assert!(detail.contains(table), "{detail}"),
            other => panic!("expected Corrupt for a file without {table}, got {other:?}"),
        }
    }
}
