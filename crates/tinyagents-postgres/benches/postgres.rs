//! The PostgreSQL backend measured on a cluster of its own (the tests'
//! throwaway cluster, fsync on, `synchronous_commit = on`), beside the
//! disk's fdatasync time and a raw durable commit round trip: `BEGIN;
//! INSERT …; COMMIT` sent together (one round trip, the baseline),
//! and a lone `INSERT` in autocommit beside it.
//!
//! A tool call is `record_started` (durable) + `record_settled` on a ledger
//! fenced with the run's epoch, as a worker writes. Claims (the run
//! store's `claim_next`, as a worker claims) are measured against 10,000
//! queued runs.
//!
//! `cargo bench -p tinyagents-postgres`. Prints plain lines.

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
use tinyagents_harness::RunRequest;
use tinyagents_ledger::{EffectLedger, Outcome, StartedRow, args_hash};
use tinyagents_postgres::testing::TestCluster;
use tinyagents_postgres::{PgDatabase, PgOptions, PostgresLedger, PostgresRunStore};
use tinyagents_runs::{ClaimFilter, Hold, NewRun, RunStore as _};

const REPS: usize = 5;
const RUNS: usize = 64;
const SEQUENTIAL_CALLS: usize = 1_000;
const CALLS_PER_RUN: usize = 200;
const QUEUED: usize = 10_000;
const CLAIMS: usize = 300;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let cluster = TestCluster::start().unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cores} cores; PostgreSQL cluster on loopback, data in {}",
        std::env::temp_dir().display()
    );
    let fdatasync = median(&fdatasync_times(&std::env::temp_dir(), 300));
    println!(
        "fdatasync (64-byte append, median of 300): {:.1} us",
        micros(fdatasync)
    );

    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect_with(PgOptions::new(url.clone()).pool_size(16))
        .await
        .unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    let raw = raw_commit(&url, 1_000, true).await;
    let autocommit = raw_commit(&url, 1_000, false).await;
    println!(
        "raw commit round trip (BEGIN; INSERT; COMMIT sent together, median of 1000): {:.1} us; \
         a lone INSERT in autocommit: {:.1} us",
        micros(raw),
        micros(autocommit)
    );

    let ledger = Arc::new(PostgresLedger::open(&db).await.unwrap());
    let mut sequential = Vec::new();
    let mut ratios = Vec::new();
    let mut unfenced_ratios = Vec::new();
    let mut concurrent = Vec::new();
    for rep in 0..REPS {
        let raw_now = raw_commit(&url, 200, true).await;
        let elapsed = drive(
            &ledger,
            false,
            &store,
            &format!("open{rep}"),
            1,
            SEQUENTIAL_CALLS,
        )
        .await;
        let unfenced = elapsed / u32::try_from(SEQUENTIAL_CALLS).unwrap();
        unfenced_ratios.push(unfenced.as_secs_f64() / raw_now.as_secs_f64());
        let elapsed = drive(
            &ledger,
            true,
            &store,
            &format!("seq{rep}"),
            1,
            SEQUENTIAL_CALLS,
        )
        .await;
        let per_call = elapsed / u32::try_from(SEQUENTIAL_CALLS).unwrap();
        sequential.push(per_call);
        ratios.push(per_call.as_secs_f64() / raw_now.as_secs_f64());
        let elapsed = drive(
            &ledger,
            true,
            &store,
            &format!("par{rep}"),
            RUNS,
            CALLS_PER_RUN,
        )
        .await;
        concurrent.push((RUNS * CALLS_PER_RUN) as f64 / elapsed.as_secs_f64());
    }
    let per_call = median(&sequential);
    let ratio = median_f64(&mut ratios);
    let unfenced_ratio = median_f64(&mut unfenced_ratios);
    println!(
        "ledger, 1 run, {SEQUENTIAL_CALLS} sequential calls, unfenced: {unfenced_ratio:.2} x the raw commit"
    );
    let rate = median_f64(&mut concurrent);
    println!(
        "ledger, 1 run, {SEQUENTIAL_CALLS} sequential calls, reps={REPS}: median {:.1} us/call, \
         {ratio:.2} x the raw commit measured before each repetition",
        micros(per_call)
    );
    println!(
        "ledger, {RUNS} concurrent runs x {CALLS_PER_RUN} calls, reps={REPS}: median {rate:.0} durable calls/s"
    );

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    ledger.flush().await.unwrap();
    let sized = client
        .query_one(
            "SELECT pg_total_relation_size('tinyagents_calls')::float8 / greatest(count(*), 1), \
             count(*) FROM tinyagents_calls",
            &[],
        )
        .await
        .unwrap();
    let (bytes, rows): (f64, i64) = (sized.get(0), sized.get(1));
    println!(
        "call rows: {rows}, {bytes:.0} bytes per row with its index (settled, a 35-byte result)"
    );

    let claim = claim_latency(&cluster).await;
    println!(
        "claim of one run with {QUEUED} queued (median of {CLAIMS}): {:.0} us",
        micros(claim)
    );
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    println!(
        "target: sequential per call <= 1.5 x raw commit: {ratio:.2}: {}",
        verdict(ratio <= 1.5)
    );
    println!(
        "target: 64 runs >= 5000 durable calls/s: {rate:.0}: {}",
        verdict(rate >= 5_000.0)
    );
    println!(
        "target: claim <= 1 ms at {QUEUED} queued: {:.0} us: {}",
        micros(claim),
        verdict(claim <= Duration::from_millis(1))
    );
    ledger.shutdown().await.unwrap();
}

/// `runs` runs, each calling `calls` tools one after the other, on a ledger
/// fenced with the run's epoch (the runs are recorded held at once: running,
/// epoch 1).
async fn drive(
    ledger: &Arc<PostgresLedger>,
    fence: bool,
    store: &PostgresRunStore,
    prefix: &str,
    runs: usize,
    calls: usize,
) -> Duration {
    let hold = Hold::this_process(Some("bench"), Duration::from_secs(3_600));
    let mut fenced = Vec::with_capacity(runs);
    for r in 0..runs {
        let run = RunId::from(format!("{prefix}-{r}"));
        let request = RunRequest::new("bench").with_run_id(run.clone());
        let claim = store
            .create(NewRun::new("bench", &request), Some(&hold))
            .await
            .unwrap();
        let handle: Arc<dyn EffectLedger> = if fence {
            Arc::new(ledger.fenced(run.clone(), claim.epoch))
        } else {
            Arc::clone(ledger) as Arc<dyn EffectLedger>
        };
        fenced.push((run, handle));
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for (run, ledger) in fenced {
        tasks.push(tokio::spawn(async move {
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

/// One durable INSERT per round trip, `n` times; the median. With
/// `transaction`, `BEGIN`, the `INSERT` and `COMMIT` are sent together.
async fn raw_commit(url: &str, n: usize, transaction: bool) -> Duration {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "SET synchronous_commit = on; \
             CREATE TABLE IF NOT EXISTS raw_commits (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)",
        )
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO raw_commits (v) VALUES ($1)")
        .await
        .unwrap();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let v = format!("row {i}");
        let start = Instant::now();
        if transaction {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&v];
            let (begun, inserted, committed) = tokio::join!(
                client.batch_execute("BEGIN"),
                client.execute(&insert, &params),
                client.batch_execute("COMMIT")
            );
            begun.unwrap();
            inserted.unwrap();
            committed.unwrap();
        } else {
            client.execute(&insert, &[&v]).await.unwrap();
        }
        times.push(start.elapsed());
    }
    median(&times)
}

/// Claims one run at a time from `QUEUED` queued runs, as a worker does
/// (`claim_next`); the median.
async fn claim_latency(cluster: &TestCluster) -> Duration {
    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect_with(PgOptions::new(url.clone()).pool_size(16))
        .await
        .unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    // Queued through the store (each record is sealed with the store's
    // key, so rows written around it would be refused as tampered), by
    // 16 writers at once.
    let total = QUEUED + CLAIMS;
    let writers = 16;
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..total).step_by(writers) {
                let request = RunRequest::new("bench").with_run_id(RunId::from(format!("q{i:06}")));
                store
                    .create(NewRun::new("bench", &request), None)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("ANALYZE tinyagents_runs")
        .await
        .unwrap();
    let hold = Hold::this_process(Some("bench"), Duration::from_secs(60));
    let filter = ClaimFilter::default();
    let mut times = Vec::with_capacity(CLAIMS);
    for _ in 0..CLAIMS {
        let start = Instant::now();
        let claimed = store.claim_next(&hold, 1, &filter).await.unwrap();
        times.push(start.elapsed());
        assert_eq!(claimed.len(), 1);
    }
    median(&times)
}

fn fdatasync_times(dir: &Path, n: usize) -> Vec<Duration> {
    let path = dir.join(format!("tinyagents-fdatasync-{}.probe", std::process::id()));
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
        file.sync_data().unwrap();
        times.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(path).unwrap();
    times
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
