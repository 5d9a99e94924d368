//! Claims and leases against a real server: one owner per run, epochs,
//! heartbeats that renew only what a worker still holds, expired leases
//! claimed again, and the global limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use tinyagents_core::RunId;
use tinyagents_harness::RunRequest;

use super::claim::{self, ClaimLimits, Ending};
use super::{QueueError, QueueStatus, RunOutcome, RunQueue};
use crate::database::PgDatabase;
use crate::testing::TestCluster;

async fn queue_with(cluster: &TestCluster, runs: usize) -> RunQueue {
    let db = PgDatabase::connect(&cluster.database().await.unwrap())
        .await
        .unwrap();
    let queue = RunQueue::open(&db).await.unwrap();
    for i in 0..runs {
        let request =
            RunRequest::new(format!("job {i}")).with_run_id(RunId::from(format!("r{i:04}")));
        queue.enqueue(&request).await.unwrap();
    }
    queue
}

fn limits(room: usize, lease: Duration) -> ClaimLimits {
    ClaimLimits {
        room,
        global: None,
        lease,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_refuses_an_id_in_the_queue_and_keeps_the_request() {
    let cluster = TestCluster::start().unwrap();
    let queue = queue_with(&cluster, 1).await;
    let again = RunRequest::new("other").with_run_id(RunId::from("r0000"));
    assert_eq!(
        queue.enqueue(&again).await,
        Err(QueueError::Exists {
            run: RunId::from("r0000")
        })
    );
    let claimed = claim::claim(queue.database(), "w", limits(5, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        claimed[0].request.input, "job 0",
        "the first request is kept"
    );
    let run = queue.get(&RunId::from("r0000")).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.owner.as_deref(), run.epoch, run.attempts),
        (QueueStatus::Running, Some("w"), 1, 1)
    );
    assert_eq!(queue.get(&RunId::from("nope")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_never_hand_one_run_to_two_workers() {
    let cluster = TestCluster::start().unwrap();
    let queue = queue_with(&cluster, 300).await;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let db = queue.database().clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = claim::claim(&db, &format!("w{w}"), limits(7, Duration::from_secs(30)))
                    .await
                    .unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|c| (c.run_id, c.epoch)));
            }
        }));
    }
    let mut seen = HashSet::new();
    for task in tasks {
        for (run, epoch) in task.await.unwrap() {
            assert_eq!(epoch, 1, "{run}: a first claim has epoch 1");
            assert!(seen.insert(run.clone()), "{run} claimed twice");
        }
    }
    assert_eq!(seen.len(), 300, "every run claimed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_claimed_again_and_its_old_owner_holds_nothing() {
    let cluster = TestCluster::start().unwrap();
    let queue = queue_with(&cluster, 1).await;
    let db = queue.database();
    let short = Duration::from_millis(200);
    let first = claim::claim(db, "old", limits(1, short)).await.unwrap();
    let run = first[0].run_id.clone();
    // Renewed while held.
    let renewed = claim::heartbeat(db, "old", short, &[(run.clone(), 1)])
        .await
        .unwrap();
    assert_eq!(renewed, vec![run.clone()]);
    // Not claimable while the lease holds.
    assert!(
        claim::claim(db, "new", limits(1, short))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = claim::claim(db, "new", limits(1, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(
        (second[0].epoch, second[0].attempts),
        (2, 2),
        "a second claim: epoch and attempts up"
    );
    // The old owner renews nothing and cannot end the run.
    let renewed = claim::heartbeat(db, "old", short, &[(run.clone(), 1)])
        .await
        .unwrap();
    assert!(renewed.is_empty(), "a lost lease is not renewed");
    let outcome = RunOutcome {
        final_text: "late".into(),
        status: "completed".into(),
        total_tokens: 0,
    };
    assert!(
        !claim::end(db, &run, 1, &Ending::Completed(outcome.clone()))
            .await
            .unwrap()
    );
    assert_eq!(
        queue.get(&run).await.unwrap().unwrap().status,
        QueueStatus::Running
    );
    // The new owner ends it.
    assert!(
        claim::end(db, &run, 2, &Ending::Completed(outcome))
            .await
            .unwrap()
    );
    let ended = queue.get(&run).await.unwrap().unwrap();
    assert_eq!(ended.status, QueueStatus::Completed);
    assert_eq!(ended.owner, None, "the lease is gone with the run");
    assert_eq!(ended.outcome.unwrap().final_text, "late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_holds_across_claimers() {
    let cluster = TestCluster::start().unwrap();
    let queue = queue_with(&cluster, 40).await;
    let mut tasks = Vec::new();
    for w in 0..6 {
        let db = queue.database().clone();
        tasks.push(tokio::spawn(async move {
            let limits = ClaimLimits {
                room: 10,
                global: Some(5),
                lease: Duration::from_secs(30),
            };
            claim::claim(&db, &format!("w{w}"), limits)
                .await
                .unwrap()
                .len()
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 5, "six claimers with room for 60 took the global 5");
    let running = queue
        .counts()
        .await
        .unwrap()
        .into_iter()
        .find(|(s, _)| *s == QueueStatus::Running)
        .map(|(_, n)| n);
    assert_eq!(running, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_run_is_queued_again_and_approval_needs_a_waiting_run() {
    let cluster = TestCluster::start().unwrap();
    let queue = queue_with(&cluster, 1).await;
    let db = queue.database();
    let claimed = claim::claim(db, "w", limits(1, Duration::from_secs(30)))
        .await
        .unwrap();
    let run = claimed[0].run_id.clone();
    assert_eq!(
        queue.approve(&run, &[]).await,
        Err(QueueError::NotAwaiting {
            run: run.clone(),
            status: QueueStatus::Running
        })
    );
    assert!(claim::end(db, &run, 1, &Ending::Released).await.unwrap());
    let released = queue.get(&run).await.unwrap().unwrap();
    assert_eq!(
        (released.status, released.owner),
        (QueueStatus::Queued, None)
    );
    let again = claim::claim(db, "v", limits(1, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(
        (again[0].epoch, again[0].attempts),
        (2, 2),
        "the next claim recovers it"
    );
    assert_eq!(
        queue.approve(&RunId::from("missing"), &[]).await,
        Err(QueueError::NotFound {
            run: RunId::from("missing")
        })
    );
}
