//! The SQL of the call rows, run by the writer inside the transaction of
//! its batch (writes, and reads while one is open) or on their own (reads).
//! Runs and checkpoints are in `runs.rs`.
//!
//! Each operation decides as [`tinyagents_ledger::backend`] says, from the
//! row as stored, and takes the fast single-statement path first: a start
//! inserts unless the row exists or the run is finished, a settle updates
//! only a started row; only when that touches nothing is the row read
//! (locked, so another process cannot change it before the decision is
//! written) and the rules asked why.

use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::backend::{self, Existing, ResolveWrite, Start};
use tinyagents_ledger::{
    CallStatus, Effect, InDoubt, LedgerRow, Resolution, Resolve, ResolvedBy, StartedRow,
    StoredResult, Timestamp,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::conn::{Conn, Fail, column, storage};
use super::schema::unresolved_predicate;
use crate::database::driven;

/// The columns of a row, in the order [`decode`] reads them.
macro_rules! row_columns {
    () => {
        "run_id, call_id, parent_call_id, tool_name, args_hash, replay, status, attempts, \
         started_at, settled_at, content, is_error, metadata, control, original_bytes, \
         truncated, resolved_effect, resolved_by, resolved_at, resolved_note"
    };
}

/// How many columns [`row_columns`] names.
const ROW_WIDTH: usize = 20;

pub(crate) const INSERT_STARTED: &str = "INSERT INTO tinyagents_calls (run_id, call_id, parent_call_id, \
     tool_name, args_hash, replay, status, attempts, started_at) \
     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, 'started', 1, $7::bigint \
     WHERE NOT EXISTS (SELECT 1 FROM tinyagents_ledger_runs \
         WHERE run_id = $1::text AND finished_at IS NOT NULL) \
     ON CONFLICT (run_id, call_id) DO NOTHING";

const RESTART: &str = "UPDATE tinyagents_calls SET status = 'started', attempts = attempts + 1, \
     started_at = $3, settled_at = NULL, content = NULL, is_error = NULL, metadata = NULL, \
     control = NULL, original_bytes = NULL, truncated = NULL \
     WHERE run_id = $1 AND call_id = $2";

/// [`INSERT_STARTED`] under a fence (`$8` the claimed run, `$9` its epoch):
/// inserts only while the run is held at that epoch, locking its row to
/// the commit as the fence check does (`fence.rs`).
pub(crate) const INSERT_STARTED_FENCED: &str = "WITH held AS (SELECT 1 FROM tinyagents_runs \
     WHERE id = $8::text AND epoch = $9::bigint FOR KEY SHARE) \
     INSERT INTO tinyagents_calls (run_id, call_id, parent_call_id, \
     tool_name, args_hash, replay, status, attempts, started_at) \
     SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, 'started', 1, $7::bigint \
     FROM held WHERE NOT EXISTS (SELECT 1 FROM tinyagents_ledger_runs \
         WHERE run_id = $1::text AND finished_at IS NOT NULL) \
     ON CONFLICT (run_id, call_id) DO NOTHING";

/// [`SETTLE`] under a fence (`$11` the claimed run, `$12` its epoch).
pub(crate) const SETTLE_FENCED: &str = "WITH held AS (SELECT 1 FROM tinyagents_runs \
     WHERE id = $11::text AND epoch = $12::bigint FOR KEY SHARE) \
     UPDATE tinyagents_calls SET status = $3, settled_at = $4, content = $5, \
     is_error = $6, metadata = $7, control = $8, original_bytes = $9, truncated = $10 \
     FROM held WHERE run_id = $1 AND call_id = $2 AND status = 'started'";

pub(crate) const SETTLE: &str = "UPDATE tinyagents_calls SET status = $3, settled_at = $4, content = $5, \
     is_error = $6, metadata = $7, control = $8, original_bytes = $9, truncated = $10 \
     WHERE run_id = $1 AND call_id = $2 AND status = 'started'";

const GET: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM tinyagents_calls WHERE run_id = $1 AND call_id = $2"
);

const GET_LOCKED: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM tinyagents_calls WHERE run_id = $1 AND call_id = $2 FOR UPDATE"
);

const ROWS: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM tinyagents_calls WHERE run_id = $1 ORDER BY seq"
);

const UNRESOLVED_ROWS: &str = concat!(
    "SELECT ",
    row_columns!(),
    " FROM tinyagents_calls WHERE run_id = $1 AND ",
    unresolved_predicate!(),
    " ORDER BY seq"
);

const IN_DOUBT: &str = concat!(
    "SELECT ",
    row_columns!(),
    ", EXISTS (SELECT 1 FROM tinyagents_ledger_runs r WHERE r.run_id = c.run_id \
     AND r.finished_at IS NOT NULL) \
     FROM tinyagents_calls c WHERE ",
    unresolved_predicate!(),
    " ORDER BY started_at, run_id, call_id"
);

const RECORD_RESOLUTION: &str = "UPDATE tinyagents_calls SET resolved_effect = $3, \
     resolved_by = $4, resolved_at = $5, resolved_note = $6 \
     WHERE run_id = $1 AND call_id = $2";

/// A time stamp as stored.
pub(crate) fn millis(at: Timestamp) -> i64 {
    // `Timestamp` is capped at i64::MAX, so this never saturates.
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// A stored time stamp.
pub(crate) fn timestamp(millis: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// Writes a started row, or restarts an existing one, as
/// [`backend::check_start`] decides.
pub(crate) async fn start(conn: &mut Conn, row: &StartedRow, now: Timestamp) -> Result<(), Fail> {
    let op = "record_started";
    let sql_fail = |error| Fail::Sql {
        operation: op,
        error,
    };
    let insert = conn.statement(INSERT_STARTED).await.map_err(sql_fail)?;
    let (client, driver) = conn.parts();
    let inserted = driven(driver, try_start(client, &insert, row, now, None))
        .await
        .map_err(sql_fail)?;
    if inserted == 1 {
        return Ok(());
    }
    let existing = read(conn, GET_LOCKED, op, &row.run_id, &row.call_id).await?;
    let finished = super::runs::is_finished(conn, &row.run_id, op).await?;
    let existing = existing.as_ref().map(Existing::of);
    match backend::check_start(existing.as_ref(), finished, row)? {
        Start::Restart => {
            conn.execute(
                op,
                RESTART,
                &[&row.run_id.as_str(), &row.call_id.as_str(), &millis(now)],
            )
            .await?;
            Ok(())
        }
        // The insert did nothing although the row is absent and the run
        // open: nothing the rules can explain.
        Start::Insert => Err(storage(op, "the started row could not be inserted").into()),
    }
}

/// The fast path of a start ([`INSERT_STARTED`]): 1 when it inserted a new
/// row, 0 when a row exists or the run is finished (then [`start`] decides
/// from what is stored).
///
/// With `fence` (the claimed run and its epoch), `insert` is
/// [`INSERT_STARTED_FENCED`], and 0 may also mean the fence was refused.
pub(crate) async fn try_start(
    client: &Client,
    insert: &Statement,
    row: &StartedRow,
    now: Timestamp,
    fence: Option<(&str, i64)>,
) -> Result<u64, tokio_postgres::Error> {
    let parent = row.parent_call_id.as_ref().map(CallId::as_str);
    let (run, call, replay, at) = (
        row.run_id.as_str(),
        row.call_id.as_str(),
        backend::replay_str(row.replay),
        millis(now),
    );
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &run,
        &call,
        &parent,
        &row.tool_name,
        &row.args_hash,
        &replay,
        &at,
    ];
    if let Some((fence_run, epoch)) = &fence {
        params.push(fence_run);
        params.push(epoch);
    }
    client.execute(insert, &params).await
}

/// The fast path of a settle ([`SETTLE`]): 1 when it settled a started row,
/// 0 otherwise (then [`settle`] tells why).
///
/// With `fence`, `statement` is [`SETTLE_FENCED`], and 0 may also mean the
/// fence was refused.
#[allow(clippy::too_many_arguments)] // the row's fields, as the statement binds them
pub(crate) async fn try_settle(
    client: &Client,
    statement: &Statement,
    run: &RunId,
    call: &CallId,
    status: CallStatus,
    result: &StoredResult,
    now: Timestamp,
    fence: Option<(&str, i64)>,
) -> Result<u64, tokio_postgres::Error> {
    let metadata = result.metadata.as_ref().map(ToString::to_string);
    let control = result.control.map(backend::control_str);
    let original = i64::try_from(result.original_bytes).unwrap_or(i64::MAX);
    let (run, call, status, at, content) = (
        run.as_str(),
        call.as_str(),
        status.as_str(),
        millis(now),
        result.content.as_bytes(),
    );
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &run,
        &call,
        &status,
        &at,
        &content,
        &result.is_error,
        &metadata,
        &control,
        &original,
        &result.truncated,
    ];
    if let Some((fence_run, epoch)) = &fence {
        params.push(fence_run);
        params.push(epoch);
    }
    client.execute(statement, &params).await
}

/// Settles a started row.
pub(crate) async fn settle(
    conn: &mut Conn,
    run: &RunId,
    call: &CallId,
    status: CallStatus,
    result: &StoredResult,
    now: Timestamp,
) -> Result<(), Fail> {
    let op = "record_settled";
    let sql_fail = |error| Fail::Sql {
        operation: op,
        error,
    };
    let statement = conn.statement(SETTLE).await.map_err(sql_fail)?;
    let (client, driver) = conn.parts();
    let updated = driven(
        driver,
        try_settle(client, &statement, run, call, status, result, now, None),
    )
    .await
    .map_err(sql_fail)?;
    if updated == 1 {
        return Ok(());
    }
    let status = read(conn, GET, op, run, call).await?.map(|row| row.status);
    backend::check_settle(run, call, status)?;
    Err(storage(op, "the row could not be updated").into())
}

/// One row.
pub(crate) async fn get(
    conn: &mut Conn,
    run: &RunId,
    call: &CallId,
) -> Result<Option<LedgerRow>, Fail> {
    read(conn, GET, "get", run, call).await
}

async fn read(
    conn: &mut Conn,
    sql: &'static str,
    op: &'static str,
    run: &RunId,
    call: &CallId,
) -> Result<Option<LedgerRow>, Fail> {
    conn.query_opt(op, sql, &[&run.as_str(), &call.as_str()])
        .await?
        .map(|row| decode(&row, op))
        .transpose()
}

/// The run's rows in start order, only the unresolved ones when asked.
pub(crate) async fn rows(
    conn: &mut Conn,
    run: &RunId,
    unresolved: bool,
) -> Result<Vec<LedgerRow>, Fail> {
    let (op, sql) = if unresolved {
        ("unresolved", UNRESOLVED_ROWS)
    } else {
        ("rows", ROWS)
    };
    let rows = conn.query(op, sql, &[&run.as_str()]).await?;
    rows.iter().map(|row| decode(row, op)).collect()
}

/// Every call whose effect is unknown, across runs, oldest start first.
pub(crate) async fn in_doubt(conn: &mut Conn, now: Timestamp) -> Result<Vec<InDoubt>, Fail> {
    let op = "in_doubt";
    let rows = conn.query(op, IN_DOUBT, &[]).await?;
    rows.iter()
        .map(|row| {
            let finished: bool = column(row, ROW_WIDTH, op)?;
            Ok(InDoubt::of(decode(row, op)?, now, finished))
        })
        .collect()
}

/// Records a resolution, settling a row still in doubt, as
/// [`backend::check_resolve`] decides.
pub(crate) async fn resolve(
    conn: &mut Conn,
    run: &RunId,
    call: &CallId,
    resolve: &Resolve,
    max_bytes: usize,
    now: Timestamp,
) -> Result<(), Fail> {
    let op = "resolve";
    let row = read(conn, GET_LOCKED, op, run, call).await?;
    let write = backend::check_resolve(run, call, row.as_ref(), resolve, max_bytes)?;
    if let ResolveWrite::Settle { status, result } = write {
        // The same transaction as the resolution below: both or neither.
        settle(conn, run, call, status, &result, now).await?;
    }
    let updated = conn
        .execute(
            op,
            RECORD_RESOLUTION,
            &[
                &run.as_str(),
                &call.as_str(),
                &resolve.found.effect().as_str(),
                &resolve.by.stored(),
                &millis(now),
                &resolve.note,
            ],
        )
        .await?;
    if updated == 1 {
        Ok(())
    } else {
        Err(storage(op, "the row could not be updated").into())
    }
}

/// A stored row, checked: every enum's text known, a result where the
/// status needs one, a resolution whole.
fn decode(row: &Row, op: &'static str) -> Result<LedgerRow, Fail> {
    let run_id: String = column(row, 0, op)?;
    let call_id: String = column(row, 1, op)?;
    let bad = |what: String| {
        Fail::Refused(storage(
            op,
            format!("row ({run_id}, {call_id}) is unreadable: {what}"),
        ))
    };
    let status_text: String = column(row, 6, op)?;
    let status = CallStatus::parse(&status_text)
        .ok_or_else(|| bad(format!("unknown status '{status_text}'")))?;
    let replay_text: String = column(row, 5, op)?;
    let replay = backend::parse_replay(&replay_text)
        .ok_or_else(|| bad(format!("unknown replay class '{replay_text}'")))?;
    let content: Option<Vec<u8>> = column(row, 10, op)?;
    let result = match (status.has_result(), content) {
        (false, _) => None,
        (true, None) => return Err(bad(format!("a {status} row without a result"))),
        (true, Some(content)) => {
            let content = String::from_utf8(content)
                .map_err(|err| bad(format!("its content is not UTF-8: {err}")))?;
            let metadata: Option<String> = column(row, 12, op)?;
            let control: Option<String> = column(row, 13, op)?;
            let original: Option<i64> = column(row, 14, op)?;
            Some(StoredResult {
                content,
                is_error: column::<Option<bool>>(row, 11, op)?.unwrap_or(false),
                metadata: match metadata {
                    Some(text) => Some(
                        serde_json::from_str(&text)
                            .map_err(|err| bad(format!("metadata is not JSON: {err}")))?,
                    ),
                    None => None,
                },
                control: match control {
                    Some(text) => Some(
                        backend::parse_control(&text)
                            .ok_or_else(|| bad(format!("unknown control '{text}'")))?,
                    ),
                    None => None,
                },
                original_bytes: original.and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                truncated: column::<Option<bool>>(row, 15, op)?.unwrap_or(false),
            })
        }
    };
    let effect: Option<String> = column(row, 16, op)?;
    let by: Option<String> = column(row, 17, op)?;
    let resolution = match (effect, by) {
        (None, None) => None,
        (Some(effect), Some(by)) => Some(Resolution {
            effect: Effect::parse(&effect)
                .ok_or_else(|| bad(format!("unknown resolved effect '{effect}'")))?,
            by: ResolvedBy::parse(&by).ok_or_else(|| bad(format!("unknown resolver '{by}'")))?,
            at: timestamp(column::<Option<i64>>(row, 18, op)?.unwrap_or(0)),
            note: column(row, 19, op)?,
        }),
        _ => {
            return Err(bad(
                "a resolution without its effect or its resolver".to_owned()
            ));
        }
    };
    let parent: Option<String> = column(row, 2, op)?;
    let attempts: i32 = column(row, 7, op)?;
    let settled_at: Option<i64> = column(row, 9, op)?;
    Ok(LedgerRow {
        parent_call_id: parent.map(CallId::new),
        tool_name: column(row, 3, op)?,
        args_hash: column(row, 4, op)?,
        replay,
        status,
        attempts: u32::try_from(attempts).unwrap_or(0),
        started_at: timestamp(column(row, 8, op)?),
        settled_at: settled_at.map(timestamp),
        result,
        resolution,
        run_id: RunId::from(run_id),
        call_id: CallId::new(call_id),
    })
}
