//! Reading the store's rows back, their seals checked.

use rusqlite::{Connection, OptionalExtension as _, Row, params};
use tinyagents_core::RunId;
use tinyagents_ledger::Timestamp;

use crate::approval::WaitingCall;
use crate::backend::{StoredRecord, StoredWaiting, journal_entry, to_i64, to_u64};
use crate::error::{RunStoreError, RunStoreResult};
use crate::history::HistoryEntry;
use crate::journal::JournalEntry;
use crate::record::RunRecord;
use crate::seal::SealKey;

/// The columns [`record`] reads, in its order.
pub(super) const RECORD_COLUMNS: &str = "run_id, agent, file_path, file_sha256, session, request, \
    seal, status, owner, host, pid, lease_until, epoch, created_at, started_at, updated_at, \
    ended_at, input_tokens, output_tokens, final_text, error, suspension, suspended";

fn raw(row: &Row<'_>) -> rusqlite::Result<StoredRecord> {
    Ok(StoredRecord {
        run_id: row.get(0)?,
        agent: row.get(1)?,
        file_path: row.get(2)?,
        file_sha256: row.get(3)?,
        session: row.get(4)?,
        request: row.get(5)?,
        seal: row.get(6)?,
        status: row.get(7)?,
        owner: row.get(8)?,
        host: row.get(9)?,
        pid: row.get(10)?,
        lease_until: row.get(11)?,
        epoch: row.get(12)?,
        created_at: row.get(13)?,
        started_at: row.get(14)?,
        updated_at: row.get(15)?,
        ended_at: row.get(16)?,
        input_tokens: row.get(17)?,
        output_tokens: row.get(18)?,
        final_text: row.get(19)?,
        error: row.get(20)?,
        suspension: row.get(21)?,
        suspended: row.get(22)?,
    })
}

/// The record of `run`, if any.
pub(super) fn record(
    conn: &Connection,
    key: &SealKey,
    run: &RunId,
) -> RunStoreResult<Option<RunRecord>> {
    let raw = conn
        .query_row(
            &format!("SELECT {RECORD_COLUMNS} FROM runs WHERE run_id = ?1"),
            [run.as_str()],
            raw,
        )
        .optional()
        .map_err(|e| storage("read a run", e))?;
    raw.map(|raw| raw.open(key)).transpose()
}

/// The records a `WHERE` clause selects, their seals checked.
pub(super) fn records(
    conn: &Connection,
    key: &SealKey,
    clause: &str,
    values: &[&dyn rusqlite::ToSql],
) -> RunStoreResult<Vec<RunRecord>> {
    raw_records(conn, clause, values)?
        .into_iter()
        .map(|raw| raw.open(key))
        .collect()
}

/// The rows a `WHERE` clause selects, their seals not yet checked.
pub(super) fn raw_records(
    conn: &Connection,
    clause: &str,
    values: &[&dyn rusqlite::ToSql],
) -> RunStoreResult<Vec<StoredRecord>> {
    let mut statement = conn
        .prepare(&format!("SELECT {RECORD_COLUMNS} FROM runs {clause}"))
        .map_err(|e| storage("list runs", e))?;
    let rows = statement
        .query_map(values, raw)
        .map_err(|e| storage("list runs", e))?;
    rows.map(|row| row.map_err(|e| storage("list runs", e)))
        .collect()
}

/// The columns [`waiting`] reads, prefixed `w.`, with the run's agent.
const WAITING_COLUMNS: &str = "w.run_id, r.agent, w.suspension, w.call_id, w.tool, w.reason, \
    w.args_hash, w.arguments, w.requested_at, w.seal, w.approved, w.decision_reason, \
    w.decided_by, w.decided_at, w.decision_seal";

/// Waiting calls a `WHERE` clause selects (over `waiting_calls w JOIN runs
/// r`), in the order it gives, their seals checked.
pub(super) fn waiting(
    conn: &Connection,
    key: &SealKey,
    clause: &str,
    values: &[&dyn rusqlite::ToSql],
) -> RunStoreResult<Vec<WaitingCall>> {
    let mut statement = conn
        .prepare(&format!(
            "SELECT {WAITING_COLUMNS} FROM waiting_calls w JOIN runs r ON r.run_id = w.run_id {clause}"
        ))
        .map_err(|e| storage("read waiting calls", e))?;
    let rows = statement
        .query_map(values, |row| {
            Ok((
                (
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                    row.get::<_, String>(5)?,
                    row.get::<_, String>(6)?,
                    row.get::<_, String>(7)?,
                ),
                (
                    row.get::<_, i64>(8)?,
                    row.get::<_, String>(9)?,
                    row.get::<_, Option<bool>>(10)?,
                    row.get::<_, Option<String>>(11)?,
                    row.get::<_, Option<String>>(12)?,
                    row.get::<_, Option<i64>>(13)?,
                    row.get::<_, Option<String>>(14)?,
                ),
            ))
        })
        .map_err(|e| storage("read waiting calls", e))?;
    let mut out = Vec::new();
    for row in rows {
        let (
            (run, agent, suspension, call, tool, reason, hash, arguments),
            (requested, seal, approved, why, by, at, decision_seal),
        ) = row.map_err(|e| storage("read waiting calls", e))?;
        let call = StoredWaiting {
            run_id: run,
            agent,
            suspension,
            call_id: call,
            tool,
            reason,
            args_hash: hash,
            arguments,
            requested_at: requested,
            seal,
            approved,
            decision_reason: why,
            decided_by: by,
            decided_at: at,
            decision_seal,
        };
        out.push(call.open(key)?);
    }
    Ok(out)
}

/// The calls of the run's suspension `suspension`, in call order.
pub(super) fn suspension_calls(
    conn: &Connection,
    key: &SealKey,
    run: &RunId,
    suspension: u32,
) -> RunStoreResult<Vec<WaitingCall>> {
    waiting(
        conn,
        key,
        "WHERE w.run_id = ?1 AND w.suspension = ?2 ORDER BY w.position",
        params![run.as_str(), suspension],
    )
}

/// The run's history, oldest first.
pub(super) fn history(conn: &Connection, run: &RunId) -> RunStoreResult<Vec<HistoryEntry>> {
    let mut statement = conn
        .prepare("SELECT at, by, event FROM run_history WHERE run_id = ?1 ORDER BY seq")
        .map_err(|e| storage("read a run's history", e))?;
    let rows = statement
        .query_map([run.as_str()], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .map_err(|e| storage("read a run's history", e))?;
    let mut out = Vec::new();
    for row in rows {
        let (at, by, event) = row.map_err(|e| storage("read a run's history", e))?;
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

/// The journal of `run` after `after`, at most `limit` entries.
pub(super) fn journal(
    conn: &Connection,
    run: &RunId,
    after: u64,
    limit: u32,
) -> RunStoreResult<Vec<JournalEntry>> {
    let mut statement = conn
        .prepare_cached(
            "SELECT seq, at, event FROM run_journal WHERE run_id = ?1 AND seq > ?2
             ORDER BY seq LIMIT ?3",
        )
        .map_err(|e| storage("read a run's journal", e))?;
    let rows = statement
        .query_map(params![run.as_str(), to_i64(after), limit], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .map_err(|e| storage("read a run's journal", e))?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, text) = row.map_err(|e| storage("read a run's journal", e))?;
        out.push(journal_entry(to_u64(seq), to_u64(at), &text));
    }
    Ok(out)
}

pub(super) fn storage(operation: &'static str, error: rusqlite::Error) -> RunStoreError {
    RunStoreError::Storage {
        operation,
        detail: error.to_string(),
        source: Some(error.into()),
    }
}
