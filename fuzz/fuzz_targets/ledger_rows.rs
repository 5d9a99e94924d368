//! Ledger rows read back from a SQLite file whose columns someone (a bug,
//! a disk, a person with `sqlite3`) changed: each input rewrites cells of a
//! real ledger (any column of calls, checkpoints, entries, runs and claims,
//! as text, an integer, a blob or NULL), then the ledger is opened and read
//! every way the harness reads it. Each read answers rows or a clear error;
//! nothing panics.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tinyagents::{core::CallId, ledger::EffectLedger, core::RunId, ledger::SqliteLedger, ledger::SqliteOptions};
use tinyagents_fuzz::{RUN, runtime};

const CELLS: [(&str, &str); 28] = [
    ("calls", "run_id"),
    ("calls", "call_id"),
    ("calls", "parent_call_id"),
    ("calls", "tool_name"),
    ("calls", "args_hash"),
    ("calls", "replay"),
    ("calls", "status"),
    ("calls", "attempts"),
    ("calls", "started_at"),
    ("calls", "settled_at"),
    ("calls", "content"),
    ("calls", "is_error"),
    ("calls", "metadata"),
    ("calls", "control"),
    ("calls", "original_bytes"),
    ("calls", "truncated"),
    ("calls", "resolved_effect"),
    ("calls", "resolved_by"),
    ("calls", "resolved_at"),
    ("calls", "resolved_note"),
    ("checkpoints", "data"),
    ("checkpoints", "version"),
    ("checkpoints", "saved_at"),
    ("checkpoint_entries", "data"),
    ("checkpoint_entries", "version"),
    ("runs", "finished_at"),
    ("claims", "claimed_at"),
    ("calls", "seq"),
];

/// A real ledger file: rows started, completed, failed, interrupted,
/// deferred and resolved, nested ones, a checkpoint with entries, a
/// finished run.
fn template() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("ledger.db");
        runtime().block_on(tinyagents_fuzz::seed_ledger(&path));
        let connection = rusqlite::Connection::open(&path).expect("the seeded ledger opens");
        connection
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .expect("the seeded ledger checkpoints");
        drop(connection);
        std::fs::read(&path).expect("the seeded ledger reads")
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("ledger.db");
    std::fs::write(&path, template()).expect("the template writes");
    {
        let Ok(connection) = rusqlite::Connection::open(&path) else {
            return;
        };
        let mut rest = data;
        while let [cell, kind, row, len, tail @ ..] = rest {
            let (table, column) = CELLS[usize::from(*cell) % CELLS.len()];
            let len = usize::from(*len).min(tail.len());
            let (bytes, after) = tail.split_at(len);
            rest = after;
            let value = match kind % 4 {
                0 => rusqlite::types::Value::Text(String::from_utf8_lossy(bytes).into_owned()),
                1 => rusqlite::types::Value::Integer(i64::from_le_bytes({
                    let mut word = [0u8; 8];
                    for (slot, b) in word.iter_mut().zip(bytes) {
                        *slot = *b;
                    }
                    word
                })),
                2 => rusqlite::types::Value::Blob(bytes.to_vec()),
                _ => rusqlite::types::Value::Null,
            };
            let sql = format!(
                "UPDATE {table} SET {column} = ?1 WHERE rowid IN (SELECT rowid FROM {table} LIMIT 1 OFFSET ?2)"
            );
            // WITHOUT ROWID tables have no rowid: rewrite their first row.
            let fallback = format!("UPDATE {table} SET {column} = ?1");
            if connection
                .execute(&sql, rusqlite::params![value, i64::from(*row % 8)])
                .is_err()
            {
                let _ = connection.execute(&fallback, rusqlite::params![value]);
            }
        }
    }
    let Ok(ledger) = SqliteLedger::open_blocking(&path, SqliteOptions::default()) else {
        return;
    };
    runtime().block_on(async {
        let run = RunId::new(RUN);
        let _ = ledger.rows(&run).await;
        let _ = ledger.unresolved(&run).await;
        let _ = ledger.in_doubt().await;
        let _ = ledger.unfinished_runs().await;
        let _ = ledger.run_state(&run).await;
        let _ = ledger.load_checkpoint(&run).await;
        for id in ["p1", "p2", "p1/1", "p3"] {
            let _ = ledger.get(&run, &CallId::new(id)).await;
        }
        let _ = ledger.shutdown().await;
    });
});
