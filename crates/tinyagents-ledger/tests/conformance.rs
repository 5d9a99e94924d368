//! The conformance suite against every backend.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use tinyagents_ledger::MemoryLedger;
use tinyagents_ledger::conformance::{self, RESULT_LIMIT};
#[cfg(feature = "sqlite")]
use tinyagents_ledger::{SqliteLedger, SqliteOptions};

#[tokio::test]
async fn memory_ledger_conforms() {
    let ledger = MemoryLedger::new().with_max_result_bytes(RESULT_LIMIT);
    conformance::run_all(&ledger).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_ledger_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions::default().max_result_bytes(RESULT_LIMIT);
    let ledger = SqliteLedger::open_with(dir.path().join("ledger.db"), options)
        .await
        .unwrap();
    conformance::run_all(&ledger).await;
    ledger.shutdown().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_ledger_conforms_after_reopening() {
    // The same checks against a file that was closed and opened again, so
    // that rows are read from disk rather than from a warm connection.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let options = SqliteOptions::default().max_result_bytes(RESULT_LIMIT);
    let first = SqliteLedger::open_with(&path, options.clone())
        .await
        .unwrap();
    conformance::started_then_settled(&first).await;
    first.shutdown().await.unwrap();
    let again = SqliteLedger::open_with(&path, options).await.unwrap();
    conformance::run_all(&again).await;
}

#[test]
fn args_hash_is_sha256_hex_of_canonical_json() {
    use serde_json::json;
    use tinyagents_ledger::{args_hash, canonical_json};
    // SHA-256 of the two bytes `{}`.
    assert_eq!(
        args_hash(&json!({})),
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    );
    let a = json!({"b": 1, "a": {"y": [1, 2], "x": "é"}});
    let b: serde_json::Value = serde_json::from_str(r#"{"a":{"x":"é","y":[1,2]},"b":1}"#).unwrap();
    assert_eq!(canonical_json(&a), r#"{"a":{"x":"é","y":[1,2]},"b":1}"#);
    assert_eq!(args_hash(&a), args_hash(&b));
    assert_ne!(args_hash(&json!({"n": 1})), args_hash(&json!({"n": 1.0})));
}
