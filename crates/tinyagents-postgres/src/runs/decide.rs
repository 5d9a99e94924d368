//! Decisions on waiting calls (`RunStore::decide`), the approval inbox
//! (`waiting`) and a run's approval history (`approvals`).
//!
//! A decision step locks the run's row first (`FOR UPDATE`), then reads
//! the calls of its last suspension: two people deciding one call at once
//! are serialised there, and the second finds the call decided.

use tinyagents_core::RunId;
use tinyagents_runs::backend::{
    check_decisions, decision_record, decision_seal, still_waiting, to_i64,
};
use tinyagents_runs::{
    Decided, Decision, RecordStatus, RunEvent, RunStoreError, RunStoreResult, WaitingCall,
};

use super::read;
use super::{PostgresRunStore, clock, connection, failed, note};

/// Records `decisions` on calls of the run's last suspension, by `by`, in
/// one transaction; queues the run to be resumed once every call is
/// decided.
pub(super) async fn decide(
    store: &PostgresRunStore,
    run: &RunId,
    by: &str,
    decisions: &[Decision],
) -> RunStoreResult<Decided> {
    let operation = "decide";
    let key = &store.key;
    let mut client = store.client(operation).await?;
    let tx = client.transaction().await.map_err(failed(operation))?;
    let at = clock(&tx, operation).await?;
    let record = read::record(&*tx, key, run, true, operation)
        .await?
        .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
    if record.status != RecordStatus::AwaitingApproval {
        return Err(RunStoreError::WrongStatus {
            run: run.clone(),
            status: record.status,
            expected: "awaiting approval",
        });
    }
    let calls = read::suspension_calls(&*tx, key, run, record.suspension, operation).await?;
    let chosen = check_decisions(run, &calls, decisions)?;
    let ms = to_i64(at.as_millis());
    let mut decided = Vec::with_capacity(chosen.len());
    for (call, decision) in chosen.into_iter().zip(decisions) {
        let made = decision_record(decision, by, at);
        tx.execute(
            "UPDATE tinyagents_waiting_calls SET approved = $4, decision_reason = $5,
                 decided_by = $6, decided_at = $7, decision_seal = $8
             WHERE run_id = $1 AND suspension = $2 AND call_id = $3 AND approved IS NULL",
            &[
                &run.as_str(),
                &i64::from(call.suspension),
                &call.call_id.as_str(),
                &made.approved,
                &made.reason,
                &made.by,
                &ms,
                &decision_seal(key, call, &made),
            ],
        )
        .await
        .map_err(failed(operation))?;
        note(
            &tx,
            run,
            by,
            at,
            &RunEvent::Decided {
                suspension: call.suspension,
                call_id: call.call_id.clone(),
                approved: made.approved,
                reason: made.reason.clone(),
            },
        )
        .await?;
        decided.push(WaitingCall {
            decision: Some(made),
            ..call.clone()
        });
    }
    let undecided = still_waiting(calls, &decided);
    if undecided.is_empty() {
        tx.execute(
            "UPDATE tinyagents_runs SET status = 'queued', updated_at = $2 WHERE id = $1",
            &[&run.as_str(), &ms],
        )
        .await
        .map_err(failed(operation))?;
    }
    tx.commit().await.map_err(failed(operation))?;
    Ok(Decided { decided, undecided })
}

/// Every undecided call of every run awaiting approval, oldest first, at
/// most `limit`.
pub(super) async fn inbox(
    store: &PostgresRunStore,
    limit: u32,
) -> RunStoreResult<Vec<WaitingCall>> {
    let operation = "read waiting calls";
    let client = store.client(operation).await?;
    read::waiting(
        connection(&client),
        &store.key,
        "WHERE r.status = 'awaiting_approval' AND w.suspension = r.suspension \
         AND w.approved IS NULL ORDER BY w.requested_at, w.run_id, w.position LIMIT $1",
        &[&i64::from(limit)],
        operation,
    )
    .await
}

/// Every call `run` has waited on, in every suspension, with the decisions.
pub(super) async fn approvals(
    store: &PostgresRunStore,
    run: &RunId,
) -> RunStoreResult<Vec<WaitingCall>> {
    let operation = "read approvals";
    let client = store.client(operation).await?;
    read::waiting(
        connection(&client),
        &store.key,
        "WHERE w.run_id = $1 ORDER BY w.suspension, w.position",
        &[&run.as_str()],
        operation,
    )
    .await
}
