//! The SQL of the call rows, run by the writer thread inside the
//! transaction of its batch (writes) or after it (reads). Runs and
//! checkpoints are in `runs.rs`.

use rusqlite::{Connection, OptionalExtension, Row, params};
use tinyagents_core::{CallId, RunId};

use super::schema::UNRESOLVED;
use crate::clock::Timestamp;
use crate::error::{LedgerError, LedgerResult};
use crate::resolution::{Effect, InDoubt, Resolution, Resolve, ResolvedBy};
use crate::row::{CallStatus, LedgerRow, StartedRow, StoredResult};
use crate::rules::{self, Existing, ResolveWrite, Start, control_str, parse_control};

const ROW_COLUMNS: &str = "run_id, call_id, parent_call_id, tool_name, args_hash, replay, \
     status, attempts, started_at, settled_at, content, is_error, metadata, control, \
     original_bytes, truncated, resolved_effect, resolved_by, resolved_at, resolved_note";

pub(super) fn db(operation: &'static str) -> impl Fn(rusqlite::Error) -> LedgerError {
    move |err| LedgerError::storage_error(operation, err)
}

pub(super) fn millis(at: Timestamp) -> i64 {
    // Invariant: `Timestamp` is capped at i64::MAX.
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn timestamp(millis: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// Writes a started row, or restarts an existing one, as
/// [`rules::check_start`] decides.
pub(crate) fn start(conn: &Connection, row: &StartedRow, now: Timestamp) -> LedgerResult<()> {
    let op = "record_started";
    // The common case in one statement: no row yet and the run not
    // finished. Anything else is decided below from what is stored.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO calls (run_id, call_id, parent_call_id, tool_name, args_hash, replay, \
             status, attempts, started_at) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'started', 1, ?7 \
             WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1) \
             ON CONFLICT (run_id, call_id) DO NOTHING",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                row.run_id.as_str(),
                row.call_id.as_str(),
                row.parent_call_id.as_ref().map(CallId::as_str),
                row.tool_name,
                row.args_hash,
                rules::replay_str(row.replay),
                millis(now),
            ])
        })
        .map_err(db(op))?;
    if inserted == 1 {
        return Ok(());
    }
    let existing = get(conn, &row.run_id, &row.call_id)?;
    let finished = super::runs::is_finished(conn, &row.run_id)?;
    match rules::check_start(existing.as_ref().map(Existing::of).as_ref(), finished, row)? {
        Start::Restart => restart(conn, row, now),
        // The insert above did nothing although the row is absent and the
        // run open: nothing the rules can explain.
        Start::Insert => Err(LedgerError::storage(
            op,
            "the started row could not be inserted",
        )),
    }
}

/// Starts an existing row again: status back to started, one more attempt,
/// the settled time and result cleared.
fn restart(conn: &Connection, row: &StartedRow, now: Timestamp) -> LedgerResult<()> {
    conn.prepare_cached(
        "UPDATE calls SET status = 'started', attempts = attempts + 1, started_at = ?3, \
         settled_at = NULL, content = NULL, is_error = NULL, metadata = NULL, control = NULL, \
         original_bytes = NULL, truncated = NULL \
         WHERE run_id = ?1 AND call_id = ?2",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            row.run_id.as_str(),
            row.call_id.as_str(),
            millis(now)
        ])
    })
    .map_err(db("record_started"))?;
    Ok(())
}

/// Settles a started row.
pub(crate) fn settle(
    conn: &Connection,
    run: &RunId,
    call: &CallId,
    status: CallStatus,
    result: &StoredResult,
    now: Timestamp,
) -> LedgerResult<()> {
    let op = "record_settled";
    let metadata = result.metadata.as_ref().map(ToString::to_string);
    let updated = conn
        .prepare_cached(
            "UPDATE calls SET status = ?3, settled_at = ?4, content = ?5, is_error = ?6, \
             metadata = ?7, control = ?8, original_bytes = ?9, truncated = ?10 \
             WHERE run_id = ?1 AND call_id = ?2 AND status = 'started'",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                run.as_str(),
                call.as_str(),
                status.as_str(),
                millis(now),
                result.content,
                result.is_error,
                metadata,
                result.control.map(control_str),
                i64::try_from(result.original_bytes).unwrap_or(i64::MAX),
                result.truncated,
            ])
        })
        .map_err(db(op))?;
    if updated == 1 {
        return Ok(());
    }
    let status = get(conn, run, call)?.map(|row| row.status);
    rules::check_settle(run, call, status)?;
    Err(LedgerError::storage(op, "the row could not be updated"))
}

/// One row.
pub(crate) fn get(
    conn: &Connection,
    run: &RunId,
    call: &CallId,
) -> LedgerResult<Option<LedgerRow>> {
    let op = "get";
    let raw = conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM calls WHERE run_id = ?1 AND call_id = ?2"
        ))
        .and_then(|mut stmt| {
            stmt.query_row([run.as_str(), call.as_str()], RawRow::read)
                .optional()
        })
        .map_err(db(op))?;
    raw.map(|raw| raw.decode(op)).transpose()
}

/// The run's rows in start order, only the unresolved ones when asked.
pub(crate) fn rows(
    conn: &Connection,
    run: &RunId,
    unresolved: bool,
) -> LedgerResult<Vec<LedgerRow>> {
    let op = if unresolved { "unresolved" } else { "rows" };
    let filter = if unresolved {
        format!(" AND {UNRESOLVED}")
    } else {
        String::new()
    };
    let raws = conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM calls WHERE run_id = ?1{filter} ORDER BY seq"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([run.as_str()], RawRow::read)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db(op))?;
    raws.into_iter().map(|raw| raw.decode(op)).collect()
}

/// Every call whose effect is unknown, across runs, oldest start first.
pub(crate) fn in_doubt(conn: &Connection, now: Timestamp) -> LedgerResult<Vec<InDoubt>> {
    let op = "in_doubt";
    let raws = conn
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS}, EXISTS (SELECT 1 FROM runs WHERE runs.run_id = calls.run_id) \
             FROM calls WHERE {UNRESOLVED} ORDER BY started_at, run_id, call_id"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([], |row| Ok((RawRow::read(row)?, row.get::<_, bool>(20)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(db(op))?;
    raws.into_iter()
        .map(|(raw, finished)| Ok(InDoubt::of(raw.decode(op)?, now, finished)))
        .collect()
}

/// Records a resolution, settling a row still in doubt, as
/// [`rules::check_resolve`] decides.
pub(crate) fn resolve(
    conn: &Connection,
    run: &RunId,
    call: &CallId,
    resolve: &Resolve,
    max_bytes: usize,
    now: Timestamp,
) -> LedgerResult<()> {
    let op = "resolve";
    let row = get(conn, run, call)?;
    let write = rules::check_resolve(run, call, row.as_ref(), resolve, max_bytes)?;
    let by = resolve.by.stored();
    let effect = resolve.found.effect().as_str();
    if let ResolveWrite::Settle { status, result } = write {
        // The same transaction as the resolution below: both or neither.
        settle(conn, run, call, status, &result, now)?;
    }
    let updated = conn
        .prepare_cached(
            "UPDATE calls SET resolved_effect = ?3, resolved_by = ?4, resolved_at = ?5, \
             resolved_note = ?6 WHERE run_id = ?1 AND call_id = ?2",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                run.as_str(),
                call.as_str(),
                effect,
                by,
                millis(now),
                resolve.note,
            ])
        })
        .map_err(db(op))?;
    if updated == 1 {
        Ok(())
    } else {
        Err(LedgerError::storage(op, "the row could not be updated"))
    }
}

/// A row's columns as SQLite returns them, before they are checked.
struct RawRow {
    run_id: String,
    call_id: String,
    parent_call_id: Option<String>,
    tool_name: String,
    args_hash: String,
    replay: String,
    status: String,
    attempts: i64,
    started_at: i64,
    settled_at: Option<i64>,
    content: Option<String>,
    is_error: Option<bool>,
    metadata: Option<String>,
    control: Option<String>,
    original_bytes: Option<i64>,
    truncated: Option<bool>,
    resolved_effect: Option<String>,
    resolved_by: Option<String>,
    resolved_at: Option<i64>,
    resolved_note: Option<String>,
}

impl RawRow {
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            run_id: row.get(0)?,
            call_id: row.get(1)?,
            parent_call_id: row.get(2)?,
            tool_name: row.get(3)?,
            args_hash: row.get(4)?,
            replay: row.get(5)?,
            status: row.get(6)?,
            attempts: row.get(7)?,
            started_at: row.get(8)?,
            settled_at: row.get(9)?,
            content: row.get(10)?,
            is_error: row.get(11)?,
            metadata: row.get(12)?,
            control: row.get(13)?,
            original_bytes: row.get(14)?,
            truncated: row.get(15)?,
            resolved_effect: row.get(16)?,
            resolved_by: row.get(17)?,
            resolved_at: row.get(18)?,
            resolved_note: row.get(19)?,
        })
    }

    fn decode(self, op: &'static str) -> LedgerResult<LedgerRow> {
        let bad = |what: String| {
            LedgerError::storage(
                op,
                format!(
                    "row ({}, {}) is unreadable: {what}",
                    self.run_id, self.call_id
                ),
            )
        };
        let status = CallStatus::parse(&self.status)
            .ok_or_else(|| bad(format!("unknown status '{}'", self.status)))?;
        let replay = rules::parse_replay(&self.replay)
            .ok_or_else(|| bad(format!("unknown replay class '{}'", self.replay)))?;
        let result = match (status.has_result(), &self.content) {
            (false, _) => None,
            (true, None) => return Err(bad(format!("a {status} row without a result"))),
            (true, Some(content)) => Some(StoredResult {
                content: content.clone(),
                is_error: self.is_error.unwrap_or(false),
                metadata: match &self.metadata {
                    Some(text) => Some(
                        serde_json::from_str(text)
                            .map_err(|err| bad(format!("metadata is not JSON: {err}")))?,
                    ),
                    None => None,
                },
                control: match &self.control {
                    Some(text) => Some(
                        parse_control(text)
                            .ok_or_else(|| bad(format!("unknown control '{text}'")))?,
                    ),
                    None => None,
                },
                original_bytes: self
                    .original_bytes
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
                truncated: self.truncated.unwrap_or(false),
            }),
        };
        let resolution = match (&self.resolved_effect, &self.resolved_by) {
            (None, None) => None,
            (Some(effect), Some(by)) => Some(Resolution {
                effect: Effect::parse(effect)
                    .ok_or_else(|| bad(format!("unknown resolved effect '{effect}'")))?,
                by: ResolvedBy::parse(by).ok_or_else(|| bad(format!("unknown resolver '{by}'")))?,
                at: timestamp(self.resolved_at.unwrap_or(0)),
                note: self.resolved_note.clone(),
            }),
            _ => {
                return Err(bad(
                    "a resolution without its effect or its resolver".to_owned()
                ));
            }
        };
        Ok(LedgerRow {
            resolution,
            parent_call_id: self.parent_call_id.as_deref().map(CallId::new),
            tool_name: self.tool_name,
            args_hash: self.args_hash,
            replay,
            status,
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            started_at: timestamp(self.started_at),
            settled_at: self.settled_at.map(timestamp),
            result,
            run_id: RunId::from(self.run_id),
            call_id: CallId::new(self.call_id),
        })
    }
}
