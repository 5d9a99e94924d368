//! The ledger conformance suite on PostgreSQL: a fresh ledger, a ledger
//! reading what another one wrote (the restart table held on stored
//! rows), and a fenced handle whose epoch is current.

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolControl, ToolReplay, ToolResult};
use tinyagents_ledger::conformance::{self, RESULT_LIMIT};
use tinyagents_ledger::{CallStatus, EffectLedger, LedgerError, LedgerRow, Outcome};
use tinyagents_postgres::{PostgresLedger, PostgresLedgerOptions};

use crate::common::{Fresh, claimed_run, started};

fn options() -> PostgresLedgerOptions {
    PostgresLedgerOptions::default().max_result_bytes(RESULT_LIMIT)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ledger_conforms() {
    let fresh = Fresh::start().await;
    let ledger = PostgresLedger::open_with(&fresh.database().await, options())
        .await
        .unwrap();
    conformance::run_all(&ledger).await;
    ledger.flush().await.unwrap();
    ledger.shutdown().await.unwrap();
}

/// Each prior state of a call's row, written by the first ledger: what a
/// second ledger must say when the same call starts again.
const PRIORS: &[(&str, ToolReplay, Option<CallStatus>)] = &[
    ("completed", ToolReplay::Safe, Some(CallStatus::Completed)),
    ("failed", ToolReplay::Never, Some(CallStatus::Failed)),
    (
        "interrupted",
        ToolReplay::Never,
        Some(CallStatus::Interrupted),
    ),
    ("deferred", ToolReplay::Never, Some(CallStatus::Deferred)),
    ("doubt-safe", ToolReplay::Safe, None),
    ("doubt-never", ToolReplay::Never, None),
];

fn outcome_of(status: CallStatus) -> Outcome {
    match status {
        CallStatus::Completed => Outcome::Completed(
            ToolResult::text("paid \0 in full")
                .with_metadata(json!({"receipt": 7}))
                .with_control(ToolControl::Terminate),
        ),
        CallStatus::Failed => Outcome::Failed("declined".into()),
        CallStatus::Interrupted => Outcome::Interrupted("interrupted, outcome unknown".into()),
        _ => Outcome::Deferred("needs approval".into()),
    }
}

/// Writes every prior state in `run` and a checkpoint with an entry;
/// returns the rows as the writing ledger reads them.
async fn write_priors(ledger: &PostgresLedger, run: &RunId) -> Vec<LedgerRow> {
    for &(call, replay, status) in PRIORS {
        ledger
            .record_started(started(run, call, replay))
            .await
            .unwrap();
        if let Some(status) = status {
            let outcome = outcome_of(status);
            ledger
                .record_settled(run, &CallId::new(call), &outcome)
                .await
                .unwrap();
        }
    }
    ledger
        .save_checkpoint(run, 3, b"base".to_vec())
        .await
        .unwrap();
    ledger
        .append_checkpoint(run, 4, b"turn 4".to_vec())
        .await
        .unwrap();
    ledger.rows(run).await.unwrap()
}

/// The same checks against rows a ledger closed before this one opened
/// wrote, so that rows are read from the database rather than from a warm
/// connection: the suite, the rows read back whole (results with content
/// holding NUL, metadata and control; time stamps), the checkpoint, and
/// the restart table on every stored state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_ledger_conforms_after_reopening() {
    let fresh = Fresh::start().await;
    let run = RunId::from("reopened");
    let first = PostgresLedger::open_with(&fresh.database().await, options())
        .await
        .unwrap();
    conformance::started_then_settled(&first).await;
    let written = write_priors(&first, &run).await;
    first.shutdown().await.unwrap();
    assert!(matches!(
        first.get(&run, &CallId::new("completed")).await,
        Err(LedgerError::Closed { .. })
    ));

    let again = PostgresLedger::open_with(&fresh.database().await, options())
        .await
        .unwrap();
    assert_eq!(
        again.rows(&run).await.unwrap(),
        written,
        "rows read back whole"
    );
    let paid = again
        .get(&run, &CallId::new("completed"))
        .await
        .unwrap()
        .expect("the completed row");
    assert_eq!(
        paid.result.expect("its result").content,
        "paid \0 in full",
        "a result's content holding NUL round-trips"
    );
    let checkpoint = again
        .load_checkpoint(&run)
        .await
        .unwrap()
        .expect("checkpoint");
    assert_eq!(
        (checkpoint.version, checkpoint.data, checkpoint.appended),
        (4, b"base".to_vec(), vec![b"turn 4".to_vec()])
    );
    let unresolved: Vec<String> = again
        .unresolved(&run)
        .await
        .unwrap()
        .iter()
        .map(|row| row.call_id.to_string())
        .collect();
    assert_eq!(unresolved, ["interrupted", "doubt-safe", "doubt-never"]);

    for &(call, replay, status) in PRIORS {
        let before = again.get(&run, &CallId::new(call)).await.unwrap();
        let offered = again.record_started(started(&run, call, replay)).await;
        let after = again.get(&run, &CallId::new(call)).await.unwrap();
        let (before, after) = (before.expect("stored row"), after.expect("stored row"));
        match (status, replay, offered) {
            (Some(settled), _, Err(LedgerError::AlreadySettled { status: named, .. }))
                if settled.is_settled() =>
            {
                assert_eq!(named, settled, "{call}: the stored status named");
                assert_eq!(after, before, "{call}: a refused start changed the row");
            }
            (None, ToolReplay::Never, Err(LedgerError::ReplayRefused { tool, .. })) => {
                assert_eq!(tool, "pay");
                assert_eq!(after, before, "{call}: a refused start changed the row");
            }
            (Some(CallStatus::Deferred), _, Ok(())) | (None, ToolReplay::Safe, Ok(())) => {
                assert_eq!(
                    (after.status, after.attempts, after.result),
                    (CallStatus::Started, 2, None),
                    "{call}: restarted"
                );
            }
            (_, _, got) => panic!("{call}: unexpected answer {got:?}"),
        }
    }
    conformance::run_all(&again).await;
    again.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_ledger_with_a_current_epoch_conforms() {
    let fresh = Fresh::start().await;
    let ledger = PostgresLedger::open_with(&fresh.database().await, options())
        .await
        .unwrap();
    let claimed = RunId::from("claimed");
    claimed_run(&fresh.raw().await, &claimed, 3).await;
    let fenced = ledger.fenced(claimed.clone(), 3);
    assert_eq!(fenced.fence(), (claimed, 3));
    assert_eq!(fenced.max_result_bytes(), RESULT_LIMIT);
    conformance::run_all(&fenced).await;
    fenced.flush().await.unwrap();
    ledger.shutdown().await.unwrap();
}
