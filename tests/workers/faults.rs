//! Faults under a worker: the database restarted mid-run (every connection
//! dropped) and a connection pool with no connection free.

use std::sync::Arc;
use std::time::Duration;

use tinyagents::core::CancellationToken;
use tinyagents::postgres::testing::TestCluster;
use tinyagents::postgres::{
    LeasedRun, PgDatabase, PgError, PgOptions, PostgresLedger, QueueError, QueueStatus, RunQueue,
    Worker,
};
use tinyagents::prelude::*;

use super::agent::{self, EFFECTS_DDL};
use super::fleet::assert_every_effect_has_its_row;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_mid_run_loses_no_row_and_every_run_ends() {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect(&url).await.unwrap();
    let queue = RunQueue::open(&db).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(EFFECTS_DDL).await.unwrap();
    for i in 0..32 {
        let request =
            RunRequest::new(format!("customer {i}")).with_run_id(RunId::from(format!("f-{i:02}")));
        queue.enqueue(&request).await.unwrap();
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
    let count = |status: QueueStatus| {
        let queue = queue.clone();
        async move {
            loop {
                // The queue's own connections drop with the restart too.
                if let Ok(counts) = queue.counts().await {
                    return counts
                        .iter()
                        .find(|(s, _)| *s == status)
                        .map_or(0, |(_, n)| *n);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    while count(QueueStatus::Completed).await < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.restart().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let ended = count(QueueStatus::Completed).await + count(QueueStatus::Failed).await;
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
    let runs = queue.list(100).await.unwrap();
    for run in &runs {
        assert_eq!(run.status, QueueStatus::Completed, "{run:?}");
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
    let queue = RunQueue::open(&db).await.unwrap();
    let run = queue.enqueue(&RunRequest::new("hold")).await.unwrap();
    // Another session locks the run's row; an approval through the pool
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
        let queue = queue.clone();
        let run = run.clone();
        tokio::spawn(async move { queue.approve(&run, &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = queue.get(&run).await;
    match &refused {
        Err(QueueError::Database(PgError::PoolExhausted {
            size, waited_ms, ..
        })) => {
            assert_eq!((*size, *waited_ms), (1, 300));
            let text = refused.as_ref().unwrap_err().to_string();
            assert!(
                text.contains("no connection free in the pool of 1"),
                "{text}"
            );
        }
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    // The lock goes; the approval goes on (and is refused for what it is),
    // and the queue answers again with the run as it was.
    lock.rollback().await.unwrap();
    let approved = held.await.unwrap();
    assert!(
        matches!(
            approved,
            Err(QueueError::NotAwaiting {
                status: QueueStatus::Queued,
                ..
            })
        ),
        "{approved:?}"
    );
    assert_eq!(
        queue.get(&run).await.unwrap().unwrap().status,
        QueueStatus::Queued
    );
}
