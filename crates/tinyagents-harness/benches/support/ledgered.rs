//! The ledger-backed workloads of the agent-loop bench: `seq N` with the
//! memory ledger and with the SQLite ledger, and the fsync time the SQLite
//! figure is held to.
//!
//! The SQLite file lives under the target directory (`CARGO_TARGET_TMPDIR`),
//! on the real disk: a tmpfs would make its fsync free and the comparison
//! meaningless. It is removed before each workload opens it.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tinyagents_ledger::{EffectLedger, MemoryLedger, SqliteLedger};

/// Which ledger a workload runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LedgerKind {
    Memory,
    Sqlite,
}

impl LedgerKind {
    /// The `--instr` workload name of `seq` with this ledger.
    pub(crate) fn workload(self) -> &'static str {
        match self {
            Self::Memory => "seq-ledger",
            Self::Sqlite => "seq-sqlite",
        }
    }
}

fn bench_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A fresh ledger of `kind`.
pub(crate) fn open(rt: &tokio::runtime::Runtime, kind: LedgerKind) -> Arc<dyn EffectLedger> {
    match kind {
        LedgerKind::Memory => Arc::new(MemoryLedger::new()),
        LedgerKind::Sqlite => {
            // One file per process: `cargo xtask bench --instructions` runs
            // two valgrind jobs at once, which must not share a database.
            let path = bench_file(&format!("agent_loop-ledger-{}.sqlite", std::process::id()));
            for suffix in ["", "-wal", "-shm"] {
                let mut file = path.clone().into_os_string();
                file.push(suffix);
                let _ = fs::remove_file(file);
            }
            let ledger = rt
                .block_on(SqliteLedger::open(&path))
                .unwrap_or_else(|e| panic!("bench ledger {}: {e}", path.display()));
            Arc::new(ledger)
        }
    }
}

/// Median, 10th and 90th percentile in µs of appending 200 bytes to a file
/// next to the SQLite ledger's and syncing its data (`fdatasync`, as SQLite
/// syncs its write-ahead log): the floor of one durable write on this disk.
pub(crate) fn fsync_micros(samples: usize) -> (f64, f64, f64) {
    let path = bench_file("agent_loop-fsync.bin");
    let mut file = File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let block = [b'x'; 200];
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            file.write_all(&block)
                .and_then(|()| file.sync_data())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    drop(file);
    let _ = fs::remove_file(&path);
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}
