//! Claims, leases and the end of a leased run: the statements a worker
//! runs against `tinyagents_runs`.
//!
//! A claim takes rows with `FOR UPDATE SKIP LOCKED` (two workers never take
//! the same run; a run whose ledger writes hold its row, `FOR KEY SHARE`,
//! is skipped until they commit), sets the owner and lease and increments
//! the epoch. Every later statement of the owner names the epoch it holds:
//! once another worker claimed the run, the owner's heartbeat renews
//! nothing and its end of the run changes nothing.

use std::time::Duration;

use serde_json::Value;
use tinyagents_core::RunId;
use tinyagents_harness::{ApprovalDecision, SuspendedRun};
use tokio_postgres::Row;

use super::{QueueError, RunOutcome, StoredRequest, suspended_of};
use crate::database::PgDatabase;
use crate::error::PgError;

/// The advisory lock that serialises claims under a global concurrency
/// limit (the bytes `tALq`).
const CLAIM_LOCK: i64 = 0x7441_4c71;

/// A run a worker has just claimed.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) run_id: RunId,
    pub(crate) epoch: u64,
    /// 1 for a run's first claim; more when a worker held it before.
    pub(crate) attempts: u32,
    pub(crate) request: StoredRequest,
    pub(crate) suspended: Option<SuspendedRun>,
    pub(crate) decisions: Option<Vec<ApprovalDecision>>,
}

/// What a claim may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimLimits {
    /// Runs this worker has room for.
    pub(crate) room: usize,
    /// Runs running at once across every worker, if limited.
    pub(crate) global: Option<usize>,
    pub(crate) lease: Duration,
}

/// Claims up to `limits.room` runs for `owner`: first runs whose lease
/// expired (their owner is gone or stopped), then queued runs, oldest
/// first ([`CLAIM`]).
pub(crate) async fn claim(
    db: &PgDatabase,
    owner: &str,
    limits: ClaimLimits,
) -> Result<Vec<Claimed>, QueueError> {
    if limits.room == 0 {
        return Ok(Vec::new());
    }
    let room = i64::try_from(limits.room).unwrap_or(i64::MAX);
    let lease_secs = limits.lease.as_secs_f64();
    let mut client = db.pooled().await?;
    let rows = match limits.global {
        // One statement, one round trip.
        None => client
            .query(CLAIM, &[&owner, &lease_secs, &room])
            .await
            .map_err(|e| PgError::query("claim runs", e))?,
        Some(global) => {
            // Serialised, so that two workers cannot both take the last
            // place.
            let tx = client
                .transaction()
                .await
                .map_err(|e| PgError::query("begin claim", e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLAIM_LOCK])
                .await
                .map_err(|e| PgError::query("lock claims", e))?;
            let running: i64 = tx
                .query_one(
                    "SELECT count(*) FROM tinyagents_runs \
                     WHERE status = 'running' AND lease_until > now()",
                    &[],
                )
                .await
                .map_err(|e| PgError::query("count running runs", e))?
                .get(0);
            let global = i64::try_from(global).unwrap_or(i64::MAX);
            let room = room.min(global.saturating_sub(running));
            let rows = if room > 0 {
                tx.query(CLAIM, &[&owner, &lease_secs, &room])
                    .await
                    .map_err(|e| PgError::query("claim runs", e))?
            } else {
                Vec::new()
            };
            tx.commit()
                .await
                .map_err(|e| PgError::query("commit claim", e))?;
            rows
        }
    };
    rows.iter().map(decode_claim).collect()
}

/// Claims up to `$3` runs for `$1` with a lease of `$2` seconds: runs whose
/// lease expired first, then queued runs, oldest first; each locked
/// `FOR UPDATE SKIP LOCKED` (taken by one claimer only, and skipped while a
/// ledger transaction of its owner holds it), its epoch and attempts
/// incremented.
const CLAIM: &str = "WITH expired AS ( \
         SELECT id, 0 AS pass, lease_until AS at FROM tinyagents_runs \
         WHERE status = 'running' AND lease_until < now() \
         ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED), \
     queued AS ( \
         SELECT id, 1 AS pass, queued_at AS at FROM tinyagents_runs WHERE status = 'queued' \
         ORDER BY queued_at, id LIMIT $3 FOR UPDATE SKIP LOCKED), \
     picked AS ( \
         SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM queued) c \
         ORDER BY pass, at, id LIMIT $3) \
     UPDATE tinyagents_runs r SET status = 'running', owner = $1, \
         lease_until = now() + $2::float8 * interval '1 second', \
         epoch = r.epoch + 1, attempts = r.attempts + 1, \
         started_at = coalesce(r.started_at, now()) \
     FROM picked WHERE r.id = picked.id \
     RETURNING r.id, r.epoch, r.attempts, r.request, r.suspended, r.decisions";

fn decode_claim(row: &Row) -> Result<Claimed, QueueError> {
    let run_id = RunId::from(row.get::<_, String>(0));
    let epoch: i64 = row.get(1);
    let attempts: i32 = row.get(2);
    let request: Value = row.get(3);
    let request: StoredRequest =
        serde_json::from_value(request).map_err(|e| QueueError::Unreadable {
            run: run_id.clone(),
            what: "request",
            detail: e.to_string(),
        })?;
    let suspended = suspended_of(&run_id, row.get(4))?;
    let decisions: Option<Value> = row.get(5);
    let decisions = decisions
        .map(|d| {
            serde_json::from_value::<Vec<ApprovalDecision>>(d).map_err(|e| QueueError::Unreadable {
                run: run_id.clone(),
                what: "decisions",
                detail: e.to_string(),
            })
        })
        .transpose()?;
    Ok(Claimed {
        epoch: u64::try_from(epoch).unwrap_or(0),
        attempts: u32::try_from(attempts).unwrap_or(0),
        request,
        suspended,
        decisions,
        run_id,
    })
}

/// Renews the leases `owner` still holds among `held` (run, epoch), and
/// returns the runs it renewed: a run missing from the answer was claimed by
/// another worker, and its owner must stop it.
pub(crate) async fn heartbeat(
    db: &PgDatabase,
    owner: &str,
    lease: Duration,
    held: &[(RunId, u64)],
) -> Result<Vec<RunId>, QueueError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = held.iter().map(|(id, _)| id.as_str()).collect();
    let epochs: Vec<i64> = held
        .iter()
        .map(|(_, e)| i64::try_from(*e).unwrap_or(i64::MAX))
        .collect();
    let lease_secs = lease.as_secs_f64();
    let client = db.pooled().await?;
    let rows = client
        .query(
            "UPDATE tinyagents_runs r SET lease_until = now() + $2::float8 * interval '1 second' \
             FROM unnest($3::text[], $4::bigint[]) AS h(id, epoch) \
             WHERE r.id = h.id AND r.epoch = h.epoch AND r.owner = $1 \
             AND r.status = 'running' RETURNING r.id",
            &[&owner, &lease_secs, &ids, &epochs],
        )
        .await
        .map_err(|e| PgError::query("heartbeat", e))?;
    Ok(rows
        .iter()
        .map(|row| RunId::from(row.get::<_, String>(0)))
        .collect())
}

/// How a leased run ended, for the queue.
#[derive(Debug, Clone)]
pub(crate) enum Ending {
    Completed(RunOutcome),
    Failed(String),
    /// Waiting for decisions: the lease is released with the state kept.
    AwaitingApproval(Box<SuspendedRun>),
    /// Given back unfinished (the worker is stopping): queued again, and
    /// recovered by the next claim.
    Released,
}

/// Records how the run ended, if `epoch` still holds it. Returns false when
/// another worker claimed the run since (nothing is written).
pub(crate) async fn end(
    db: &PgDatabase,
    run: &RunId,
    epoch: u64,
    ending: &Ending,
) -> Result<bool, QueueError> {
    let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
    let encode = |what: &'static str, value: Result<Value, serde_json::Error>| {
        value.map_err(|e| QueueError::Unreadable {
            run: run.clone(),
            what,
            detail: e.to_string(),
        })
    };
    let (status, outcome, error, suspended) = match ending {
        Ending::Completed(outcome) => (
            "completed",
            Some(encode("outcome", serde_json::to_value(outcome))?),
            None,
            None,
        ),
        Ending::Failed(why) => ("failed", None, Some(why.as_str()), None),
        Ending::AwaitingApproval(state) => (
            "awaiting_approval",
            None,
            None,
            Some(encode("suspended state", serde_json::to_value(state))?),
        ),
        Ending::Released => ("queued", None, None, None),
    };
    let client = db.pooled().await?;
    let updated = client
        .execute(
            "UPDATE tinyagents_runs SET status = $3, outcome = $4, error = $5, \
             suspended = $6, decisions = NULL, owner = NULL, lease_until = NULL, \
             finished_at = CASE WHEN $3 IN ('completed', 'failed') THEN now() END \
             WHERE id = $1 AND epoch = $2 AND status = 'running'",
            &[&run.as_str(), &epoch, &status, &outcome, &error, &suspended],
        )
        .await
        .map_err(|e| PgError::query("end run", e))?;
    Ok(updated == 1)
}

/// Which of `runs` the queue holds as ended (completed or failed).
pub(crate) async fn ended_among(db: &PgDatabase, runs: &[RunId]) -> Result<Vec<RunId>, QueueError> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = runs.iter().map(RunId::as_str).collect();
    let client = db.pooled().await?;
    let rows = client
        .query(
            "SELECT id FROM tinyagents_runs WHERE id = ANY($1) \
             AND status IN ('completed', 'failed')",
            &[&ids],
        )
        .await
        .map_err(|e| PgError::query("read ended runs", e))?;
    Ok(rows
        .iter()
        .map(|row| RunId::from(row.get::<_, String>(0)))
        .collect())
}
