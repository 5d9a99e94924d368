//! Workers on PostgreSQL (issue 17): four worker processes share one
//! database the test starts itself; one is killed, one is stopped past its
//! lease (a zombie) and woken; every run completes once, no payment happens
//! twice, the calls whose effect is unknown are listed, and the zombie's
//! writes are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests

mod agent;
mod faults;
mod fleet;
mod journal;
mod lifecycle;

use std::sync::Arc;
use std::time::Duration;

use tinyagents::core::CancellationToken;
use tinyagents::postgres::{PgDatabase, PgOptions, PostgresRunStore, Worker};
use tinyagents::prelude::*;
use tinyagents::runs::{RecordStatus, RunStore as _};

/// The environment a worker process reads: the database, and its name.
pub(crate) const DB_ENV: &str = "TINYAGENTS_FLEET_DB";
pub(crate) const NAME_ENV: &str = "TINYAGENTS_FLEET_WORKER";

/// The lease of the fleet's workers: short, so that the test is short.
pub(crate) const LEASE: Duration = Duration::from_millis(1_000);

/// A worker process of `fleet::four_workers_survive_a_kill_and_a_zombie`:
/// that test starts this binary with `--ignored --exact worker_process`.
/// It works until no run is queued or running, then prints its report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the fleet test, started by it"]
async fn worker_process() {
    let url = std::env::var(DB_ENV).expect("started by the fleet test");
    let name = std::env::var(NAME_ENV).expect("started by the fleet test");
    let options = PgOptions::new(url.clone())
        .pool_size(8)
        // A stopped worker's open transaction is aborted soon, so that its
        // row locks do not keep its runs from the others for long.
        .idle_in_transaction_timeout(Duration::from_millis(800));
    let db = PgDatabase::connect_with(options)
        .await
        .expect("the database");
    let store = PostgresRunStore::open(&db).await.expect("the run store");
    let url: Arc<str> = Arc::from(url.as_str());
    let worker = Worker::new(&db, move |run: &tinyagents::postgres::LeasedRun| {
        agent::harness(&url, run)
    })
    .id(name.clone())
    .concurrency(8)
    .lease(LEASE)
    .poll_interval(Duration::from_millis(50));
    let cancel = CancellationToken::new();
    let watcher = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            // Done when nothing is queued or running for a second.
            let mut quiet = 0;
            while quiet < 10 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let busy = match store.counts().await {
                    Ok(counts) => counts.iter().any(|(status, n)| {
                        *n > 0 && matches!(status, RecordStatus::Queued | RecordStatus::Running)
                    }),
                    Err(_) => true,
                };
                quiet = if busy { 0 } else { quiet + 1 };
            }
            cancel.cancel();
        })
    };
    let report = worker.run(cancel).await.expect("the worker's loop");
    watcher.abort();
    println!(
        "{}",
        serde_json::json!({ "worker": name, "report": report })
    );
}
