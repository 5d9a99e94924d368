//! Reading the run store's rows back, their seals checked: a record, the
//! records a clause selects, waiting calls, a run's history.
//!
//! Each reader takes any client (a pooled connection, or the transaction
//! of a check-then-write) and turns rows into the backend-neutral
//! [`StoredRecord`] and [`StoredWaiting`] of `tinyagents_runs::backend`,
//! whose `open` checks the seals as every backend does.

use tinyagents_core::RunId;
use tinyagents_ledger::Timestamp;
use tinyagents_runs::backend::{StoredRecord, StoredWaiting, to_u64};
use tinyagents_runs::{
    HistoryEntry, RunRecord, RunStoreError, RunStoreResult, SealKey, WaitingCall,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use super::failed;

/// The columns [`raw`] reads, in its order.
pub(super) const RECORD_COLUMNS: &str = "id, agent, file_path, file_sha256, session, request, \
    seal, status, owner, host, pid, lease_until, epoch, created_at, started_at, updated_at, \
    ended_at, input_tokens, output_tokens, final_text, error, suspension, suspended";

/// How many columns [`RECORD_COLUMNS`] names (a query that selects more
/// has its own after them).
pub(super) const RECORD_COLUMN_COUNT: usize = 23;

/// A row of [`RECORD_COLUMNS`], before its seals are checked.
pub(super) fn raw(row: &Row) -> Result<StoredRecord, tokio_postgres::Error> {
    Ok(StoredRecord {
        run_id: row.try_get(0)?,
        agent: row.try_get(1)?,
        file_path: row.try_get(2)?,
        file_sha256: row.try_get(3)?,
        session: row.try_get(4)?,
        request: row.try_get(5)?,
        seal: row.try_get(6)?,
        status: row.try_get(7)?,
        owner: row.try_get(8)?,
        host: row.try_get(9)?,
        pid: row.try_get(10)?,
        lease_until: row.try_get(11)?,
        epoch: row.try_get(12)?,
        created_at: row.try_get(13)?,
        started_at: row.try_get(14)?,
        updated_at: row.try_get(15)?,
        ended_at: row.try_get(16)?,
        input_tokens: row.try_get(17)?,
        output_tokens: row.try_get(18)?,
        final_text: row.try_get(19)?,
        error: row.try_get(20)?,
        suspension: row.try_get(21)?,
        suspended: row.try_get(22)?,
    })
}

/// The stored row of `run`, seals unchecked; locked `FOR UPDATE` to the
/// end of the transaction when `lock`.
pub(super) async fn stored<C: GenericClient + Sync>(
    client: &C,
    run: &RunId,
    lock: bool,
    operation: &'static str,
) -> RunStoreResult<Option<StoredRecord>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM tinyagents_runs WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let row = client
        .query_opt(sql.as_str(), &[&run.as_str()])
        .await
        .map_err(failed(operation))?;
    row.map(|row| raw(&row).map_err(failed(operation)))
        .transpose()
}

/// The record of `run`, if any, its seals checked; locked as [`stored`].
pub(super) async fn record<C: GenericClient + Sync>(
    client: &C,
    key: &SealKey,
    run: &RunId,
    lock: bool,
    operation: &'static str,
) -> RunStoreResult<Option<RunRecord>> {
    stored(client, run, lock, operation)
        .await?
        .map(|raw| raw.open(key))
        .transpose()
}

/// The records `clause` selects (what follows `FROM tinyagents_runs`), in
/// its order, their seals checked: one that does not check out refuses
/// the whole read.
pub(super) async fn records<C: GenericClient + Sync>(
    client: &C,
    key: &SealKey,
    clause: &str,
    values: &[&(dyn ToSql + Sync)],
    operation: &'static str,
) -> RunStoreResult<Vec<RunRecord>> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM tinyagents_runs {clause}");
    let rows = client
        .query(sql.as_str(), values)
        .await
        .map_err(failed(operation))?;
    rows.iter()
        .map(|row| raw(row).map_err(failed(operation))?.open(key))
        .collect()
}

/// The columns [`waiting`] reads, prefixed `w.`, with the run's agent.
const WAITING_COLUMNS: &str = "w.run_id, r.agent, w.suspension, w.call_id, w.tool, w.reason, \
    w.args_hash, w.arguments, w.requested_at, w.seal, w.approved, w.decision_reason, \
    w.decided_by, w.decided_at, w.decision_seal";

fn raw_waiting(row: &Row) -> Result<StoredWaiting, tokio_postgres::Error> {
    Ok(StoredWaiting {
        run_id: row.try_get(0)?,
        agent: row.try_get(1)?,
        suspension: row.try_get(2)?,
        call_id: row.try_get(3)?,
        tool: row.try_get(4)?,
        reason: row.try_get(5)?,
        args_hash: row.try_get(6)?,
        arguments: row.try_get(7)?,
        requested_at: row.try_get(8)?,
        seal: row.try_get(9)?,
        approved: row.try_get(10)?,
        decision_reason: row.try_get(11)?,
        decided_by: row.try_get(12)?,
        decided_at: row.try_get(13)?,
        decision_seal: row.try_get(14)?,
    })
}

/// The waiting calls `clause` selects (over `tinyagents_waiting_calls w
/// JOIN tinyagents_runs r`), in its order, their seals checked.
pub(super) async fn waiting<C: GenericClient + Sync>(
    client: &C,
    key: &SealKey,
    clause: &str,
    values: &[&(dyn ToSql + Sync)],
    operation: &'static str,
) -> RunStoreResult<Vec<WaitingCall>> {
    let sql = format!(
        "SELECT {WAITING_COLUMNS} FROM tinyagents_waiting_calls w \
         JOIN tinyagents_runs r ON r.id = w.run_id {clause}"
    );
    let rows = client
        .query(sql.as_str(), values)
        .await
        .map_err(failed(operation))?;
    rows.iter()
        .map(|row| raw_waiting(row).map_err(failed(operation))?.open(key))
        .collect()
}

/// The calls of the run's suspension `suspension`, in call order.
pub(super) async fn suspension_calls<C: GenericClient + Sync>(
    client: &C,
    key: &SealKey,
    run: &RunId,
    suspension: u32,
    operation: &'static str,
) -> RunStoreResult<Vec<WaitingCall>> {
    waiting(
        client,
        key,
        "WHERE w.run_id = $1 AND w.suspension = $2 ORDER BY w.position",
        &[&run.as_str(), &i64::from(suspension)],
        operation,
    )
    .await
}

/// The run's history, oldest first.
pub(super) async fn history<C: GenericClient + Sync>(
    client: &C,
    run: &RunId,
) -> RunStoreResult<Vec<HistoryEntry>> {
    let operation = "read a run's history";
    let rows = client
        .query(
            "SELECT at, by, event FROM tinyagents_run_history WHERE run_id = $1 ORDER BY seq",
            &[&run.as_str()],
        )
        .await
        .map_err(failed(operation))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let at: i64 = row.try_get(0).map_err(failed(operation))?;
        let by: String = row.try_get(1).map_err(failed(operation))?;
        let event: String = row.try_get(2).map_err(failed(operation))?;
        let event = serde_json::from_str(&event).map_err(|e| RunStoreError::Unreadable {
            run: run.clone(),
            what: "history entry",
            detail: e.to_string(),
            source: Some(e.into()),
        })?;
        out.push(HistoryEntry {
            at: Timestamp::from_millis(to_u64(at)),
            by,
            event,
        });
    }
    Ok(out)
}
