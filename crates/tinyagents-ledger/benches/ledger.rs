//! Ledger throughput: one run calling sequentially, and 64 runs calling
//! concurrently, against both backends; next to the fsync time of the same
//! disk. A tool call here is `record_started` (durable) + `record_settled`.
//!
//! `cargo bench -p tinyagents-ledger`. Prints plain lines.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{EffectLedger, MemoryLedger, Outcome, SqliteLedger, StartedRow, args_hash};

const REPS: usize = 5;
const RUNS: usize = 64;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    describe_machine(dir.path());

    let fsync = median(&fsync_times(dir.path(), 500, false));
    let fdatasync = median(&fsync_times(dir.path(), 500, true));
    println!(
        "fsync (64-byte append + fsync, median of 500): {:.1} us; fdatasync: {:.1} us",
        micros(fsync),
        micros(fdatasync)
    );

    let mut results = Vec::new();
    for (backend, sequential_calls, per_run_calls) in
        [("memory", 200_000, 4_000), ("sqlite", 10_000, 1_000)]
    {
        for (shape, runs, calls) in [
            ("sequential, 1 run", 1, sequential_calls),
            ("concurrent, 64 runs", RUNS, per_run_calls),
        ] {
            let mut rates = Vec::new();
            let mut per_call = Vec::new();
            let mut ratios = Vec::new();
            for rep in 0..REPS {
                // The disk's fsync time drifts with the load of the machine:
                // measure it again right before each repetition.
                let fsync_now = median(&fsync_times(dir.path(), 200, false));
                let ledger: Arc<dyn EffectLedger> = match backend {
                    "memory" => Arc::new(MemoryLedger::new()),
                    _ => {
                        let path = dir
                            .path()
                            .join(format!("{shape}-{rep}.db").replace(' ', "_"));
                        Arc::new(runtime.block_on(SqliteLedger::open(path)).unwrap())
                    }
                };
                let elapsed = runtime.block_on(drive(ledger, runs, calls));
                let total = (runs * calls) as f64;
                rates.push(total / elapsed.as_secs_f64());
                let call = elapsed / u32::try_from(runs * calls).unwrap();
                per_call.push(call);
                ratios.push(call.as_secs_f64() / fsync_now.as_secs_f64());
            }
            let rate = median_f64(&mut rates);
            let call = median(&per_call);
            println!(
                "{backend:<6} {shape:<20} calls={:<7} reps={REPS}: median {:>9.0} calls/s, {:>7.2} us/call (wall time / calls)",
                runs * calls,
                rate,
                micros(call)
            );
            let ratio = median_f64(&mut ratios);
            if backend == "sqlite" {
                println!(
                    "{backend:<6} {shape:<20} per call / fsync measured just before each repetition: median {ratio:.2}"
                );
            }
            results.push((backend, runs, rate, call, ratio));
        }
    }

    let sqlite_concurrent = results
        .iter()
        .find(|r| r.0 == "sqlite" && r.1 == RUNS)
        .unwrap();
    let sqlite_sequential = results
        .iter()
        .find(|r| r.0 == "sqlite" && r.1 == 1)
        .unwrap();
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "target: sqlite, 64 concurrent runs >= 20000 calls/s: {:.0} calls/s: {}",
        sqlite_concurrent.2,
        verdict(sqlite_concurrent.2 >= 20_000.0)
    );
    let ratio = sqlite_sequential.4;
    println!(
        "target: sqlite sequential per call <= 1.5 x fsync: {:.1} us/call, {:.2} x the fsync time \
         (median of the per-repetition ratios; {:.1} us against the first fsync figure): {}",
        micros(sqlite_sequential.3),
        ratio,
        micros(fsync),
        verdict(ratio <= 1.5)
    );
}

/// `runs` tasks, each one run calling `calls` tools one after the other.
async fn drive(ledger: Arc<dyn EffectLedger>, runs: usize, calls: usize) -> Duration {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for r in 0..runs {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let run = RunId::from(format!("bench-{r}"));
            let outcome =
                Outcome::Completed(ToolResult::text("{\"temperature\": 21, \"unit\": \"C\"}"));
            for k in 1..=calls {
                let call = CallId::model(k as u64);
                let hash = args_hash(&json!({"city": "Lyon", "n": k}));
                let row =
                    StartedRow::new(run.clone(), call.clone(), "weather", hash, ToolReplay::Safe);
                ledger.record_started(row).await.unwrap();
                ledger.record_settled(&run, &call, &outcome).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed();
    ledger.flush().await.unwrap();
    elapsed
}

fn fsync_times(dir: &Path, n: usize, data_only: bool) -> Vec<Duration> {
    let path = dir.join(if data_only {
        "fdatasync.probe"
    } else {
        "fsync.probe"
    });
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let block = [0x5a_u8; 64];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        file.write_all(&block).unwrap();
        if data_only {
            file.sync_data().unwrap();
        } else {
            file.sync_all().unwrap();
        }
        times.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(path).unwrap();
    times
}

fn describe_machine(dir: &Path) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("machine: {cores} cores, {cpu}, Linux {}", kernel.trim());
    println!(
        "database dir: {} on {}",
        dir.display(),
        mount_of(dir).unwrap_or_else(|| "unknown file system".into())
    );
}

/// The device and type of the file system holding `dir`, from /proc/mounts.
fn mount_of(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let point = fields.next()?;
            let kind = fields.next()?;
            dir.starts_with(point).then(|| {
                (
                    point.len(),
                    format!("{device} ({kind}, mounted at {point})"),
                )
            })
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, text)| text)
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
