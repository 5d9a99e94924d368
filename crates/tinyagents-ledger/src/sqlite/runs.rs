//! The SQL of runs (claims, finished marks, pruning) and of checkpoints (a
//! base in `checkpoints`, entries appended to it in `checkpoint_entries`),
//! run by the writer thread like the rows' SQL in `store.rs`.
//!
//! Checking a checkpoint's version never reads a stored blob: the version of
//! the last write is the last entry's (found by the key's index) or else the
//! base's, a column stored before the blob in the row.

use rusqlite::{Connection, OptionalExtension, params};
use tinyagents_core::RunId;

use super::schema::UNRESOLVED;
use super::store::{db, millis, timestamp};
use crate::clock::Timestamp;
use crate::error::{LedgerError, LedgerResult};
use crate::ledger::{Checkpoint, PruneReport, RunState};
use crate::rules;

/// Whether the run is marked finished.
pub(crate) fn is_finished(conn: &Connection, run: &RunId) -> LedgerResult<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1)")
        .and_then(|mut stmt| stmt.query_row([run.as_str()], |r| r.get(0)))
        .map_err(db("is_finished"))
}

/// What is recorded of the run.
pub(crate) fn run_state(conn: &Connection, run: &RunId) -> LedgerResult<RunState> {
    let state: i64 = conn
        .prepare_cached(
            "SELECT CASE \
             WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = ?1) THEN 2 \
             WHEN EXISTS (SELECT 1 FROM claims WHERE run_id = ?1) \
               OR EXISTS (SELECT 1 FROM calls WHERE run_id = ?1) \
               OR EXISTS (SELECT 1 FROM checkpoints WHERE run_id = ?1) THEN 1 \
             ELSE 0 END",
        )
        .and_then(|mut stmt| stmt.query_row([run.as_str()], |r| r.get(0)))
        .map_err(db("run_state"))?;
    Ok(match state {
        2 => RunState::Finished,
        1 => RunState::Open,
        _ => RunState::Unknown,
    })
}

/// Claims a run id nothing is recorded under. The writer runs the check and
/// the insert in one request, inside its write transaction, so no other
/// request (nor another process, locked out by the transaction) comes
/// between them.
pub(crate) fn begin_run(conn: &Connection, run: &RunId, now: Timestamp) -> LedgerResult<()> {
    if run_state(conn, run)? != RunState::Unknown {
        return Err(LedgerError::RunExists { run: run.clone() });
    }
    conn.prepare_cached("INSERT INTO claims (run_id, claimed_at) VALUES (?1, ?2)")
        .and_then(|mut stmt| stmt.execute(params![run.as_str(), millis(now)]))
        .map_err(db("begin_run"))?;
    Ok(())
}

/// Marks a run finished (keeping the first time stamp).
pub(crate) fn finish(conn: &Connection, run: &RunId, now: Timestamp) -> LedgerResult<()> {
    conn.prepare_cached(
        "INSERT INTO runs (run_id, finished_at) VALUES (?1, ?2) ON CONFLICT (run_id) DO NOTHING",
    )
    .and_then(|mut stmt| stmt.execute(params![run.as_str(), millis(now)]))
    .map_err(db("mark_run_finished"))?;
    Ok(())
}

/// Deletes everything of the runs finished at or before `cutoff`, except
/// the runs that hold a call whose effect is unknown: those are kept whole
/// and counted.
pub(crate) fn prune(conn: &Connection, cutoff: Timestamp) -> LedgerResult<PruneReport> {
    let op = "prune_finished";
    let cutoff = millis(cutoff);
    let prunable = format!(
        "SELECT run_id FROM runs WHERE finished_at <= ?1 \
         AND run_id NOT IN (SELECT run_id FROM calls WHERE {UNRESOLVED})"
    );
    let kept: i64 = conn
        .query_row(
            &format!(
                "SELECT COUNT(*) FROM runs WHERE finished_at <= ?1 \
                 AND run_id IN (SELECT run_id FROM calls WHERE {UNRESOLVED})"
            ),
            [cutoff],
            |row| row.get(0),
        )
        .map_err(db(op))?;
    let delete = |table: &str| {
        conn.execute(
            &format!("DELETE FROM {table} WHERE run_id IN ({prunable})"),
            [cutoff],
        )
        .map_err(db(op))
    };
    let rows = delete("calls")?;
    let checkpoints = delete("checkpoints")?;
    delete("checkpoint_entries")?;
    delete("claims")?;
    let runs = delete("runs")?;
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    Ok(PruneReport {
        runs: count(runs),
        rows: count(rows),
        checkpoints: count(checkpoints),
        kept_unresolved: u64::try_from(kept).unwrap_or(0),
    })
}

/// Runs with rows or a checkpoint and no finished mark (a claim alone is
/// not listed: there is nothing to recover), and finished runs that hold a
/// call whose effect is unknown.
pub(crate) fn unfinished_runs(conn: &Connection) -> LedgerResult<Vec<RunId>> {
    conn.prepare_cached(&format!(
        "SELECT run_id FROM calls UNION SELECT run_id FROM checkpoints \
         EXCEPT SELECT run_id FROM runs \
         UNION SELECT run_id FROM calls WHERE {UNRESOLVED} ORDER BY 1"
    ))
    .and_then(|mut stmt| {
        stmt.query_map([], |row| row.get::<_, String>(0).map(RunId::from))?
            .collect()
    })
    .map_err(db("unfinished_runs"))
}

/// The base's version, if the run has a base (reads no blob).
fn base_version(conn: &Connection, run: &RunId, op: &'static str) -> LedgerResult<Option<i64>> {
    conn.prepare_cached("SELECT version FROM checkpoints WHERE run_id = ?1")
        .and_then(|mut stmt| stmt.query_row([run.as_str()], |r| r.get(0)).optional())
        .map_err(db(op))
}

/// The sequence number and version of the run's last entry (reads no blob).
fn last_entry(
    conn: &Connection,
    run: &RunId,
    op: &'static str,
) -> LedgerResult<Option<(i64, i64)>> {
    conn.prepare_cached(
        "SELECT seq, version FROM checkpoint_entries WHERE run_id = ?1 \
         ORDER BY seq DESC LIMIT 1",
    )
    .and_then(|mut stmt| {
        stmt.query_row([run.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
    })
    .map_err(db(op))
}

/// The number the run's next entry takes and the stored version (the last
/// entry's, else the base's); `None` when the run has no base. Reads no blob.
fn head(conn: &Connection, run: &RunId, op: &'static str) -> LedgerResult<Option<(i64, u64)>> {
    Ok(match last_entry(conn, run, op)? {
        Some((seq, version)) => Some((seq.saturating_add(1), stored_version(version))),
        None => base_version(conn, run, op)?.map(|version| (1, stored_version(version))),
    })
}

fn stored_version(version: i64) -> u64 {
    u64::try_from(version).unwrap_or(0)
}

fn column_version(version: u64, op: &'static str) -> LedgerResult<i64> {
    i64::try_from(version)
        .map_err(|_| LedgerError::storage(op, "the version does not fit a signed 64-bit column"))
}

/// Replaces the run's base checkpoint and drops its entries, unless the
/// stored version is newer.
pub(crate) fn save_checkpoint(
    conn: &Connection,
    run: &RunId,
    version: u64,
    data: &[u8],
    now: Timestamp,
) -> LedgerResult<()> {
    let op = "save_checkpoint";
    let stored = head(conn, run, op)?.map(|(_, version)| version);
    rules::check_checkpoint(run, stored, version)?;
    let version = column_version(version, op)?;
    conn.prepare_cached(
        "INSERT INTO checkpoints (run_id, version, data, saved_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (run_id) DO UPDATE SET version = ?2, data = ?3, saved_at = ?4",
    )
    .and_then(|mut stmt| stmt.execute(params![run.as_str(), version, data, millis(now)]))
    .map_err(db(op))?;
    conn.prepare_cached("DELETE FROM checkpoint_entries WHERE run_id = ?1")
        .and_then(|mut stmt| stmt.execute([run.as_str()]))
        .map_err(db(op))?;
    Ok(())
}

/// Appends an entry after the run's base checkpoint.
pub(crate) fn append_checkpoint(
    conn: &Connection,
    run: &RunId,
    version: u64,
    data: &[u8],
    now: Timestamp,
) -> LedgerResult<()> {
    let op = "append_checkpoint";
    let Some((seq, stored)) = head(conn, run, op)? else {
        return Err(LedgerError::NoCheckpoint { run: run.clone() });
    };
    rules::check_checkpoint(run, Some(stored), version)?;
    let version = column_version(version, op)?;
    conn.prepare_cached(
        "INSERT INTO checkpoint_entries (run_id, seq, version, data, saved_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| stmt.execute(params![run.as_str(), seq, version, data, millis(now)]))
    .map_err(db(op))?;
    Ok(())
}

/// The run's checkpoint: the base, then its entries in order.
pub(crate) fn load_checkpoint(conn: &Connection, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
    let op = "load_checkpoint";
    let base = conn
        .prepare_cached("SELECT version, data, saved_at FROM checkpoints WHERE run_id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([run.as_str()], |row| {
                Ok(Checkpoint {
                    run_id: run.clone(),
                    version: stored_version(row.get(0)?),
                    data: row.get(1)?,
                    appended: Vec::new(),
                    saved_at: timestamp(row.get(2)?),
                })
            })
            .optional()
        })
        .map_err(db(op))?;
    let Some(mut checkpoint) = base else {
        return Ok(None);
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT version, data, saved_at FROM checkpoint_entries WHERE run_id = ?1 \
             ORDER BY seq",
        )
        .map_err(db(op))?;
    let mut entries = stmt.query([run.as_str()]).map_err(db(op))?;
    while let Some(entry) = entries.next().map_err(db(op))? {
        checkpoint.version = stored_version(entry.get(0).map_err(db(op))?);
        checkpoint.appended.push(entry.get(1).map_err(db(op))?);
        checkpoint.saved_at = timestamp(entry.get(2).map_err(db(op))?);
    }
    Ok(Some(checkpoint))
}
