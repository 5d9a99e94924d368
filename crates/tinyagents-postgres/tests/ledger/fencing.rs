//! Fencing by epoch: a worker's writes are refused once another worker
//! claimed its run, change nothing, and leave the other writes of the
//! batch alone; a claim skips a run whose fenced writes are not committed.

use std::time::Duration;

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{
    CallStatus, EffectLedger, Found, LedgerError, LedgerResult, Outcome, Resolve, RunState,
    Timestamp,
};
use tinyagents_postgres::{PostgresLedger, PostgresLedgerOptions};

use crate::common::{Fresh, claimed_run, set_epoch, started};

fn assert_fenced<T: std::fmt::Debug>(result: LedgerResult<T>, run: &RunId, what: &str) {
    match result {
        Err(LedgerError::Fenced {
            run: named,
            held,
            current,
        }) => assert_eq!((&named, held, current), (run, 1, 2), "{what}"),
        other => panic!("{what}: expected Fenced {{ held: 1, current: 2 }}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_of_a_worker_whose_epoch_moved_on_is_refused_and_changes_nothing() {
    let fresh = Fresh::start().await;
    let raw = fresh.raw().await;
    let ledger = PostgresLedger::open(&fresh.database().await).await.unwrap();
    let claimed = RunId::from("claimed");
    // A delegated child run, written under the claimed run's lease.
    let child = RunId::from("claimed/child");
    claimed_run(&raw, &claimed, 1).await;
    let worker = ledger.fenced(claimed.clone(), 1);
    let p1 = started(&claimed, "p1", ToolReplay::Safe);
    worker.record_started(p1.clone()).await.unwrap();
    worker
        .record_started(started(&child, "p1", ToolReplay::Safe))
        .await
        .unwrap();
    worker
        .save_checkpoint(&claimed, 1, b"one".to_vec())
        .await
        .unwrap();
    let rows_before = ledger.rows(&claimed).await.unwrap();
    let checkpoint_before = ledger.load_checkpoint(&claimed).await.unwrap();

    set_epoch(&raw, &claimed, 2).await;
    let done = Outcome::Completed(ToolResult::text("ok"));
    assert_fenced(
        worker
            .record_started(started(&claimed, "p2", ToolReplay::Safe))
            .await,
        &claimed,
        "record_started",
    );
    // A settle of a call this handle started is queued without waiting:
    // the fence's refusal is its verdict, which the handle keeps.
    worker
        .record_settled(&claimed, &p1.call_id, &done)
        .await
        .unwrap();
    worker
        .record_settled(&child, &CallId::new("p1"), &done)
        .await
        .unwrap();
    let verdicts = worker.settle_verdicts().await;
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    for verdict in verdicts {
        assert_fenced(
            Err::<(), _>(verdict),
            &claimed,
            "record_settled (main and child run)",
        );
    }
    // A settle of a call it did not start waits, and is refused at once.
    assert_fenced(
        worker
            .record_settled(&claimed, &CallId::new("p9"), &done)
            .await,
        &claimed,
        "record_settled of a call not started here",
    );
    assert_fenced(
        worker.save_checkpoint(&claimed, 2, b"two".to_vec()).await,
        &claimed,
        "save_checkpoint",
    );
    assert_fenced(
        worker.append_checkpoint(&claimed, 2, b"two".to_vec()).await,
        &claimed,
        "append_checkpoint",
    );
    assert_fenced(
        worker.begin_run(&RunId::from("another")).await,
        &claimed,
        "begin_run",
    );
    assert_fenced(
        worker
            .resolve(
                &claimed,
                &p1.call_id,
                &Resolve::by_reconcile(Found::NotHappened),
            )
            .await,
        &claimed,
        "resolve",
    );
    assert_fenced(
        worker.mark_run_finished(&claimed).await,
        &claimed,
        "mark_run_finished",
    );
    assert_fenced(
        worker.prune_finished(Timestamp::MAX).await,
        &claimed,
        "prune_finished",
    );
    // Reads are not fenced.
    assert_eq!(worker.rows(&claimed).await.unwrap(), rows_before);
    worker.flush().await.unwrap();

    // Nothing changed, as an unfenced handle reads it.
    assert_eq!(ledger.rows(&claimed).await.unwrap(), rows_before);
    assert_eq!(
        ledger.load_checkpoint(&claimed).await.unwrap(),
        checkpoint_before
    );
    let child_row = ledger
        .get(&child, &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(child_row.status, CallStatus::Started);
    assert_eq!(ledger.run_state(&claimed).await.unwrap(), RunState::Open);
    assert_eq!(
        ledger.run_state(&RunId::from("another")).await.unwrap(),
        RunState::Unknown
    );
    // The worker holding the new lease writes.
    let successor = ledger.fenced(claimed.clone(), 2);
    successor
        .record_settled(&claimed, &p1.call_id, &done)
        .await
        .unwrap();
    let settled = ledger.get(&claimed, &p1.call_id).await.unwrap().unwrap();
    assert_eq!(settled.status, CallStatus::Completed);
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_a_queue_row_fences_out_every_epoch() {
    let fresh = Fresh::start().await;
    let ledger = PostgresLedger::open(&fresh.database().await).await.unwrap();
    let gone = RunId::from("gone");
    for epoch in [0, 1] {
        match ledger
            .fenced(gone.clone(), epoch)
            .record_started(started(&gone, "p1", ToolReplay::Safe))
            .await
        {
            Err(LedgerError::Fenced { run, held, current }) => {
                assert_eq!((run, held, current), (gone.clone(), epoch, 0));
            }
            other => panic!("a run without a row must be fenced out, got {other:?}"),
        }
    }
    assert_eq!(ledger.rows(&gone).await.unwrap(), []);
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_out_write_leaves_the_other_writes_of_its_transaction_alone() {
    let fresh = Fresh::start().await;
    let raw = fresh.raw().await;
    let database = fresh
        .database_with(|options| options.idle_in_transaction_timeout(Duration::from_secs(120)))
        .await;
    // Checkpoints ride on one open transaction until the flush.
    let options = PostgresLedgerOptions::default().linger(Duration::from_secs(60));
    let ledger = PostgresLedger::open_with(&database, options).await.unwrap();
    let (stale, live, plain) = (
        RunId::from("stale"),
        RunId::from("live"),
        RunId::from("plain"),
    );
    claimed_run(&raw, &stale, 2).await;
    claimed_run(&raw, &live, 1).await;
    let zombie = ledger.fenced(stale.clone(), 1);
    let worker = ledger.fenced(live.clone(), 1);
    ledger
        .save_checkpoint(&plain, 1, b"plain".to_vec())
        .await
        .unwrap();
    // Sent together, so the writer takes them in one batch, in the open
    // transaction.
    let (refused, fenced, unfenced) = tokio::join!(
        zombie.save_checkpoint(&stale, 1, b"zombie".to_vec()),
        worker.save_checkpoint(&live, 1, b"live".to_vec()),
        ledger.append_checkpoint(&plain, 2, b"more".to_vec()),
    );
    match refused {
        Err(LedgerError::Fenced { held, current, .. }) => assert_eq!((held, current), (1, 2)),
        other => panic!("the stale worker must be fenced out, got {other:?}"),
    }
    fenced.unwrap();
    unfenced.unwrap();
    // Nothing of the transaction was lost to the refusal.
    ledger.flush().await.unwrap();
    ledger.shutdown().await.unwrap();
    let reader = PostgresLedger::open(&fresh.database().await).await.unwrap();
    assert_eq!(reader.load_checkpoint(&stale).await.unwrap(), None);
    let live_checkpoint = reader.load_checkpoint(&live).await.unwrap().unwrap();
    assert_eq!(live_checkpoint.data, b"live");
    let plain_checkpoint = reader.load_checkpoint(&plain).await.unwrap().unwrap();
    assert_eq!(
        (plain_checkpoint.version, plain_checkpoint.appended),
        (2, vec![b"more".to_vec()])
    );
    reader.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_skips_a_run_whose_fenced_writes_are_not_committed() {
    let fresh = Fresh::start().await;
    let raw = fresh.raw().await;
    let database = fresh
        .database_with(|options| options.idle_in_transaction_timeout(Duration::from_secs(120)))
        .await;
    // A checkpoint rides on the open transaction until a flush.
    let options = PostgresLedgerOptions::default().linger(Duration::from_secs(60));
    let ledger = PostgresLedger::open_with(&database, options).await.unwrap();
    let claimed = RunId::from("leased");
    claimed_run(&raw, &claimed, 1).await;
    let worker = ledger.fenced(claimed.clone(), 1);
    worker
        .save_checkpoint(&claimed, 1, b"one".to_vec())
        .await
        .unwrap();

    let claim = "SELECT id FROM tinyagents_runs WHERE id = $1 FOR UPDATE SKIP LOCKED";
    let mut claimer = fresh.raw().await;
    let tx = claimer.transaction().await.unwrap();
    let skipped = tx.query(claim, &[&claimed.as_str()]).await.unwrap();
    assert!(skipped.is_empty(), "the claim must skip the fenced run");
    tx.rollback().await.unwrap();

    worker.flush().await.unwrap();
    let tx = claimer.transaction().await.unwrap();
    let taken = tx.query(claim, &[&claimed.as_str()]).await.unwrap();
    assert_eq!(taken.len(), 1, "once committed, the run can be claimed");
    tx.execute(
        "UPDATE tinyagents_runs SET epoch = epoch + 1 WHERE id = $1",
        &[&claimed.as_str()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_fenced(
        worker.save_checkpoint(&claimed, 2, b"two".to_vec()).await,
        &claimed,
        "the write after the claim",
    );
    let checkpoint = ledger.load_checkpoint(&claimed).await.unwrap().unwrap();
    assert_eq!((checkpoint.version, checkpoint.data), (1, b"one".to_vec()));
    ledger.shutdown().await.unwrap();
}
