//! Opening a ledger file: bad files are refused with an error naming the
//! file and the problem, never overwritten and never replaced by a fresh
//! ledger; versions are checked and migrated.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{
    APPLICATION_ID, CallStatus, EffectLedger, LedgerError, Outcome, SCHEMA_VERSION, SqliteLedger,
    SqliteOptions, StartedRow, args_hash,
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
