//! The SQL of runs (claims, finished marks, pruning) and of checkpoints (a
//! base in `tinyagents_checkpoints`, entries appended to it in
//! `tinyagents_checkpoint_entries`), run by the writer like the rows' SQL
//! in `store.rs`.
//!
//! A checkpoint write locks the run's base row before it reads the stored
//! version, so two processes writing one run's checkpoint are serialised,
//! and it never reads a stored blob.

use tinyagents_core::RunId;
use tinyagents_ledger::backend;
use tinyagents_ledger::{Checkpoint, LedgerError, PruneReport, RunState, Timestamp};

use super::conn::{Conn, Fail, column, storage};
use super::schema::unresolved_predicate;
use super::store::{millis, timestamp};

const IS_FINISHED: &str = "SELECT EXISTS (SELECT 1 FROM tinyagents_ledger_runs \
     WHERE run_id = $1 AND finished_at IS NOT NULL)";

const RUN_STATE: &str = "SELECT CASE \
     WHEN EXISTS (SELECT 1 FROM tinyagents_ledger_runs \
         WHERE run_id = $1 AND finished_at IS NOT NULL) THEN 2 \
     WHEN EXISTS (SELECT 1 FROM tinyagents_ledger_runs WHERE run_id = $1) \
       OR EXISTS (SELECT 1 FROM tinyagents_calls WHERE run_id = $1) \
       OR EXISTS (SELECT 1 FROM tinyagents_checkpoints WHERE run_id = $1) THEN 1 \
     ELSE 0 END";

const CLAIM: &str = "INSERT INTO tinyagents_ledger_runs (run_id, claimed_at) VALUES ($1, $2) \
     ON CONFLICT (run_id) DO NOTHING";

const FINISH: &str = "INSERT INTO tinyagents_ledger_runs (run_id, finished_at) VALUES ($1, $2) \
     ON CONFLICT (run_id) DO UPDATE SET finished_at = EXCLUDED.finished_at \
     WHERE tinyagents_ledger_runs.finished_at IS NULL";

/// One statement: what is pruned, deleted table by table, and the count of
/// the finished runs kept for a call whose effect is unknown.
const PRUNE: &str = concat!(
    "WITH prunable AS (SELECT run_id FROM tinyagents_ledger_runs r \
         WHERE finished_at <= $1 AND NOT EXISTS (SELECT 1 FROM tinyagents_calls c \
             WHERE c.run_id = r.run_id AND ",
    unresolved_predicate!(),
    ")), \
     gone_calls AS (DELETE FROM tinyagents_calls \
         WHERE run_id IN (SELECT run_id FROM prunable) RETURNING 1), \
     gone_bases AS (DELETE FROM tinyagents_checkpoints \
         WHERE run_id IN (SELECT run_id FROM prunable) RETURNING 1), \
     gone_entries AS (DELETE FROM tinyagents_checkpoint_entries \
         WHERE run_id IN (SELECT run_id FROM prunable) RETURNING 1), \
     gone_runs AS (DELETE FROM tinyagents_ledger_runs \
         WHERE run_id IN (SELECT run_id FROM prunable) RETURNING 1) \
     SELECT (SELECT count(*) FROM gone_runs), (SELECT count(*) FROM gone_calls), \
         (SELECT count(*) FROM gone_bases), \
         (SELECT count(*) FROM tinyagents_ledger_runs r WHERE finished_at <= $1 \
             AND EXISTS (SELECT 1 FROM tinyagents_calls c WHERE c.run_id = r.run_id AND ",
    unresolved_predicate!(),
    "))"
);

const UNFINISHED_RUNS: &str = concat!(
    "SELECT run_id FROM tinyagents_calls UNION SELECT run_id FROM tinyagents_checkpoints \
     EXCEPT SELECT run_id FROM tinyagents_ledger_runs WHERE finished_at IS NOT NULL \
     UNION SELECT run_id FROM tinyagents_calls WHERE ",
    unresolved_predicate!(),
    " ORDER BY 1"
);

/// The base's version (locked) and the run's last entry, if it has a base.
const HEAD: &str = "SELECT b.version, e.seq, e.version FROM tinyagents_checkpoints b \
     LEFT JOIN LATERAL (SELECT seq, version FROM tinyagents_checkpoint_entries \
         WHERE run_id = b.run_id ORDER BY seq DESC LIMIT 1) e ON true \
     WHERE b.run_id = $1 FOR UPDATE OF b";

const SAVE_BASE: &str = "INSERT INTO tinyagents_checkpoints (run_id, version, data, saved_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO UPDATE \
     SET version = EXCLUDED.version, data = EXCLUDED.data, saved_at = EXCLUDED.saved_at";

const DROP_ENTRIES: &str = "DELETE FROM tinyagents_checkpoint_entries WHERE run_id = $1";

const APPEND_ENTRY: &str = "INSERT INTO tinyagents_checkpoint_entries \
     (run_id, seq, version, data, saved_at) VALUES ($1, $2, $3, $4, $5)";

const LOAD_BASE: &str =
    "SELECT version, data, saved_at FROM tinyagents_checkpoints WHERE run_id = $1";

const LOAD_ENTRIES: &str = "SELECT version, data, saved_at FROM tinyagents_checkpoint_entries \
     WHERE run_id = $1 ORDER BY seq";

/// Whether the run is marked finished.
pub(crate) async fn is_finished(
    conn: &mut Conn,
    run: &RunId,
    op: &'static str,
) -> Result<bool, Fail> {
    let row = conn.query_one(op, IS_FINISHED, &[&run.as_str()]).await?;
    column(&row, 0, op)
}

/// What is recorded of the run.
pub(crate) async fn run_state(conn: &mut Conn, run: &RunId) -> Result<RunState, Fail> {
    let op = "run_state";
    let row = conn.query_one(op, RUN_STATE, &[&run.as_str()]).await?;
    Ok(match column::<i32>(&row, 0, op)? {
        2 => RunState::Finished,
        1 => RunState::Open,
        _ => RunState::Unknown,
    })
}

/// Claims a run id nothing is recorded under. A claim racing another
/// process's waits for it (the key) and then inserts nothing: refused.
pub(crate) async fn begin_run(conn: &mut Conn, run: &RunId, now: Timestamp) -> Result<(), Fail> {
    let op = "begin_run";
    let refused = || Fail::Refused(LedgerError::RunExists { run: run.clone() });
    if run_state(conn, run).await? != RunState::Unknown {
        return Err(refused());
    }
    match conn
        .execute(op, CLAIM, &[&run.as_str(), &millis(now)])
        .await?
    {
        1 => Ok(()),
        _ => Err(refused()),
    }
}

/// Marks a run finished (keeping the first time stamp).
pub(crate) async fn finish(conn: &mut Conn, run: &RunId, now: Timestamp) -> Result<(), Fail> {
    conn.execute("mark_run_finished", FINISH, &[&run.as_str(), &millis(now)])
        .await?;
    Ok(())
}

/// Deletes everything of the runs finished at or before `cutoff`, except
/// the runs that hold a call whose effect is unknown: those are kept whole
/// and counted.
pub(crate) async fn prune(conn: &mut Conn, cutoff: Timestamp) -> Result<PruneReport, Fail> {
    let op = "prune_finished";
    let row = conn.query_one(op, PRUNE, &[&millis(cutoff)]).await?;
    let count = |index| column::<i64>(&row, index, op).map(|n| u64::try_from(n).unwrap_or(0));
    Ok(PruneReport {
        runs: count(0)?,
        rows: count(1)?,
        checkpoints: count(2)?,
        kept_unresolved: count(3)?,
    })
}

/// Runs with rows or a checkpoint and no finished mark (a claim alone is
/// not listed: there is nothing to recover), and finished runs that hold a
/// call whose effect is unknown; by id.
pub(crate) async fn unfinished_runs(conn: &mut Conn) -> Result<Vec<RunId>, Fail> {
    let op = "unfinished_runs";
    let rows = conn.query(op, UNFINISHED_RUNS, &[]).await?;
    rows.iter()
        .map(|row| column::<String>(row, 0, op).map(RunId::from))
        .collect()
}

/// The number the run's next entry takes and the stored version (the last
/// entry's, else the base's), the base locked; `None` when it has no base.
async fn head(conn: &mut Conn, run: &RunId, op: &'static str) -> Result<Option<(i64, u64)>, Fail> {
    let Some(row) = conn.query_opt(op, HEAD, &[&run.as_str()]).await? else {
        return Ok(None);
    };
    let base: i64 = column(&row, 0, op)?;
    let last: Option<i64> = column(&row, 1, op)?;
    let last_version: Option<i64> = column(&row, 2, op)?;
    Ok(Some(match (last, last_version) {
        (Some(seq), Some(version)) => (seq.saturating_add(1), stored_version(version)),
        _ => (1, stored_version(base)),
    }))
}

fn stored_version(version: i64) -> u64 {
    u64::try_from(version).unwrap_or(0)
}

fn column_version(version: u64, op: &'static str) -> Result<i64, Fail> {
    i64::try_from(version).map_err(|_| {
        Fail::Refused(storage(
            op,
            "the version does not fit a signed 64-bit column",
        ))
    })
}

/// Replaces the run's base checkpoint and drops its entries, unless the
/// stored version is newer.
pub(crate) async fn save_checkpoint(
    conn: &mut Conn,
    run: &RunId,
    version: u64,
    data: &[u8],
    now: Timestamp,
) -> Result<(), Fail> {
    let op = "save_checkpoint";
    let stored = head(conn, run, op).await?.map(|(_, version)| version);
    backend::check_checkpoint(run, stored, version)?;
    let version = column_version(version, op)?;
    conn.execute(
        op,
        SAVE_BASE,
        &[&run.as_str(), &version, &data, &millis(now)],
    )
    .await?;
    if stored.is_some() {
        conn.execute(op, DROP_ENTRIES, &[&run.as_str()]).await?;
    }
    Ok(())
}

/// Appends an entry after the run's base checkpoint.
pub(crate) async fn append_checkpoint(
    conn: &mut Conn,
    run: &RunId,
    version: u64,
    data: &[u8],
    now: Timestamp,
) -> Result<(), Fail> {
    let op = "append_checkpoint";
    let Some((seq, stored)) = head(conn, run, op).await? else {
        return Err(LedgerError::NoCheckpoint { run: run.clone() }.into());
    };
    backend::check_checkpoint(run, Some(stored), version)?;
    let version = column_version(version, op)?;
    conn.execute(
        op,
        APPEND_ENTRY,
        &[&run.as_str(), &seq, &version, &data, &millis(now)],
    )
    .await?;
    Ok(())
}

/// The run's checkpoint: the base, then its entries in order.
pub(crate) async fn load_checkpoint(
    conn: &mut Conn,
    run: &RunId,
) -> Result<Option<Checkpoint>, Fail> {
    let op = "load_checkpoint";
    let Some(base) = conn.query_opt(op, LOAD_BASE, &[&run.as_str()]).await? else {
        return Ok(None);
    };
    let mut checkpoint = Checkpoint {
        run_id: run.clone(),
        version: stored_version(column(&base, 0, op)?),
        data: column(&base, 1, op)?,
        appended: Vec::new(),
        saved_at: timestamp(column(&base, 2, op)?),
    };
    for entry in conn.query(op, LOAD_ENTRIES, &[&run.as_str()]).await? {
        checkpoint.version = stored_version(column(&entry, 0, op)?);
        checkpoint.appended.push(column(&entry, 1, op)?);
        checkpoint.saved_at = timestamp(column(&entry, 2, op)?);
    }
    Ok(Some(checkpoint))
}
