//! Faults under a worker: the database restarted mid-run (every connection
//! dropped) and a connection pool with no connection free.

use std::sync::Arc;
use std::time::Duration;

use tinyagents::core::CancellationToken;
use tinyagents::postgres::testing::TestCluster;
use tinyagents::postgres::{
    LeasedRun, PgDatabase, PgOptions, PostgresLedger, PostgresRunStore, Worker,
};
use tinyagents::prelude::*;
use tinyagents::runs::{NewRun, RecordStatus, RunQuery, RunStore as _, RunStoreError};

use super::agent::{self, EFFECTS_DDL};
use super::fleet::assert_every_effect_has_its_row;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_mid_run_loses_no_row_and_every_run_ends() {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect(&url).await.unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(EFFECTS_DDL).await.unwrap();
    for i in 0..32 {
        let request =
            RunRequest::new(format!("customer {i}")).with_run_id(RunId::from(format!("f-{i:02}")));
        store
            .create(NewRun::new("coordinator", &request), None)
            .await
            .unwrap();
    }
    let effects_url: Arc<str> = Arc::from(url.as_str());
    let worker = Worker::new(&db, move |run: &LeasedRun| {
        agent::harness(&effects_url, run)
    })
    .id("survivor")
    .concurrency(8)
    .lease(Duration::from_secs(2))
    .poll_interval(Duration::from_millis(50));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(worker.run(cancel.clone()));

    // Restart the server once some runs are done and others are mid-call.
    // Runs in the statuses `which` admits.
    let count = |which: fn(RecordStatus) -> bool| {
        let store = store.clone();
        async move {
            loop {
                // The store's own connections drop with the restart too.
                if let Ok(counts) = store.counts().await {
                    return counts
                        .iter()
                        .filter(|(s, _)| which(*s))
                        .map(|(_, n)| *n)
                        .sum::<u64>();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    while count(|s| s == RecordStatus::Completed).await < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.restart().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        // Ended in any way: completed, failed, or (statuses the queue
        // counted as failed) cancelled, limit reached, terminated.
        let ended = count(RecordStatus::has_ended).await;
        if ended == 32 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{ended} of 32 runs ended in 120 s after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cancel.cancel();
    let report = task.await.unwrap().unwrap();

    // Every run ended with an answer: a call the ledger could not record
    // during the restart was refused to the model with the reason, not run.
    let runs = store.list(&RunQuery::default().limit(100)).await.unwrap();
    assert_eq!(runs.len(), 32);
    for run in &runs {
        assert_eq!(run.status, RecordStatus::Completed, "{run:?}");
    }
    assert_eq!(report.completed, 32, "{report:?}");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let twice = client
        .query(
            "SELECT key FROM fleet_effects WHERE kind = 'pay' GROUP BY key HAVING count(*) > 1",
            &[],
        )
        .await
        .unwrap();
    assert!(twice.is_empty(), "payments made twice across the restart");
    let ledger = PostgresLedger::open(&db).await.unwrap();
    assert_every_effect_has_its_row(&client, &ledger).await;
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_with_no_free_connection_is_a_clear_error_and_loses_nothing() {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let options = PgOptions::new(url.clone())
        .pool_size(1)
        .wait_timeout(Duration::from_millis(300));
    let db = PgDatabase::connect_with(options).await.unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    let run = store
        .create(NewRun::new("holder", &RunRequest::new("hold")), None)
        .await
        .unwrap()
        .record
        .run_id;
    // Another session locks the run's row; a decision through the pool
    // waits on the lock, holding the pool's one connection.
    let (mut locker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let lock = locker.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM tinyagents_runs WHERE id = $1 FOR UPDATE",
        &[&run.as_str()],
    )
    .await
    .unwrap();
    let held = {
        let store = store.clone();
        let run = run.clone();
        tokio::spawn(async move { store.decide(&run, "operator", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = store.get(&run).await;
    match &refused {
        // The pool's refusal (PgError::PoolExhausted), in the run store's
        // words: its size and how long the read waited are said.
        Err(RunStoreError::Storage { detail, .. }) => {
            assert!(
                detail.contains("no connection free in the pool of 1 within 300 ms"),
                "{detail}"
            );
            let text = refused.as_ref().unwrap_err().to_string();
            assert!(
                text.contains("no connection free in the pool of 1"),
                "{text}"
            );
        }
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    // The lock goes; the decision goes on (and is refused for what it is),
    // and the store answers again with the run as it was.
    lock.rollback().await.unwrap();
    let approved = held.await.unwrap();
    assert!(
        matches!(
            approved,
            Err(RunStoreError::WrongStatus {
                status: RecordStatus::Queued,
                ..
            })
        ),
        "{approved:?}"
    );
    assert_eq!(
        store.get(&run).await.unwrap().unwrap().status,
        RecordStatus::Queued
    );
}
