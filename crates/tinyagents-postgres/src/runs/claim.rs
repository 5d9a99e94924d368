//! Claims and leases: a holder takes a run (raising its epoch), a worker
//! takes the next runs, a holder renews the leases it still holds, and a
//! worker asks which runs have ended.
//!
//! A claim of one run locks its row (`FOR UPDATE`), so of two claimers
//! that saw one epoch the second finds it moved. A worker's claim locks
//! each candidate `FOR UPDATE SKIP LOCKED`: two workers never take one run
//! and neither waits for the other, and a run whose holder's ledger writes
//! hold its row (`FOR KEY SHARE`, the ledger's fence) is skipped until
//! they commit.

use std::collections::HashSet;
use std::time::Duration;

use tinyagents_core::RunId;
use tinyagents_ledger::Timestamp;
use tinyagents_runs::backend::{
    ClaimPlan, check_claim, clean, cleaned_hold, to_i64, to_u64, unusable,
};
use tinyagents_runs::{
    Claim, ClaimFilter, Hold, RecordStatus, RunEvent, RunRecord, RunStoreError, RunStoreResult,
    SealKey, WaitingCall,
};

use super::read::{self, RECORD_COLUMN_COUNT, RECORD_COLUMNS, raw};
use super::{PostgresRunStore, Tx, cached, clock, failed, note};

/// The advisory lock that serialises claims under a global limit of
/// running runs (the bytes `tARc`).
const CLAIM_LOCK: i64 = 0x7441_5263;

/// Until when a lease of `lease` taken at `at` runs (ms).
fn lease_end(at: Timestamp, lease: Duration) -> i64 {
    to_i64(
        at.as_millis()
            .saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// Takes `record` for `hold` inside `tx` at `at` (its claim checked by
/// the caller, its row locked): running under the next epoch, its history
/// noting the claim, with the decisions of its last suspension.
pub(super) async fn take(
    tx: &Tx<'_>,
    key: &SealKey,
    record: &RunRecord,
    hold: &Hold,
    at: Timestamp,
) -> RunStoreResult<Claim> {
    let operation = "claim a run";
    let run = &record.run_id;
    let ClaimPlan {
        resume,
        takeover,
        segment,
    } = ClaimPlan::of(record);
    let epoch = record.epoch + 1;
    let holder = &hold.holder;
    let segment = segment.to_owned();
    let event = RunEvent::Claimed { epoch, segment };
    let event = serde_json::to_string(&event).map_err(|e| RunStoreError::Unreadable {
        run: run.clone(),
        what: "history entry",
        detail: e.to_string(),
    })?;
    // The claim and its history entry in one statement (one round trip).
    let sql = format!(
        "WITH taken AS (
                     UPDATE tinyagents_runs SET status = 'running', owner = $2, host = $3,
                         pid = $4, lease_until = $5, epoch = $6,
                         started_at = coalesce(started_at, $7), updated_at = $7,
                         ended_at = NULL, error = NULL,
                         suspended = CASE WHEN $8 THEN NULL ELSE suspended END
                     WHERE id = $1 RETURNING {RECORD_COLUMNS}),
                 noted AS (
                     INSERT INTO tinyagents_run_history (run_id, at, by, event)
                     SELECT id, $7, $2, $9 FROM taken)
                 SELECT {RECORD_COLUMNS} FROM taken"
    );
    let statement = cached(tx, &sql, operation).await?;
    let row = tx
        .query_one(
            &statement,
            &[
                &run.as_str(),
                &holder.owner,
                &holder.host,
                &i64::from(holder.pid),
                &lease_end(at, hold.lease),
                &to_i64(epoch),
                &to_i64(at.as_millis()),
                &resume.is_some(),
                &event,
            ],
        )
        .await
        .map_err(failed(operation))?;
    let taken = raw(&row).map_err(failed(operation))?;
    let decisions = if record.suspension > 0 {
        read::suspension_calls(&**tx, key, run, record.suspension, operation)
            .await?
            .iter()
            .filter_map(WaitingCall::approval)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Claim {
        record: taken.open(key)?,
        epoch,
        takeover,
        resume,
        decisions,
    })
}

/// Fails a run a worker's claim found unusable (`error` says why: an edit
/// made outside the store, or an unreadable value), so no claim meets it
/// again; its record is left as it is, for a person to look at.
async fn fail_unusable(
    tx: &Tx<'_>,
    run: &RunId,
    hold: &Hold,
    error: &RunStoreError,
    at: Timestamp,
) -> RunStoreResult<()> {
    let operation = "claim runs";
    let text = error.to_string();
    tx.execute(
        "UPDATE tinyagents_runs SET status = 'failed', error = $2, ended_at = $3, updated_at = $3,
             owner = NULL, host = NULL, pid = NULL, lease_until = NULL WHERE id = $1",
        &[&run.as_str(), &clean(&text), &to_i64(at.as_millis())],
    )
    .await
    .map_err(failed(operation))?;
    note(
        tx,
        run,
        &hold.holder.owner,
        at,
        &RunEvent::Ended {
            status: RecordStatus::Failed,
            error: Some(text),
        },
    )
    .await
}

/// `RunStore::claim`: takes `run` for `hold` if its epoch is still
/// `seen_epoch` and it may be taken.
pub(super) async fn one(
    store: &PostgresRunStore,
    run: &RunId,
    seen_epoch: u64,
    hold: &Hold,
) -> RunStoreResult<Claim> {
    let operation = "claim a run";
    let mut client = store.client(operation).await?;
    let tx = client.transaction().await.map_err(failed(operation))?;
    let at = clock(&tx, operation).await?;
    let record = read::record(&*tx, &store.key, run, true, operation)
        .await?
        .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
    check_claim(run, record.status, record.epoch, seen_epoch)?;
    let claim = take(&tx, &store.key, &record, hold, at).await?;
    tx.commit().await.map_err(failed(operation))?;
    Ok(claim)
}

/// The runs a worker may take, in one statement: first those whose lease
/// ran out (the oldest lease first), then queued runs (oldest first);
/// `$1` the agents (any when empty), `$2` the agents file's hash (any run
/// when NULL), `$3` how many. Each is locked, or skipped when another
/// transaction holds it. The last column is the transaction's time (ms),
/// which the claims write.
const CANDIDATES: &str = "WITH clock AS (SELECT (extract(epoch from now()) * 1000)::bigint AS ms), \
    expired AS (SELECT r.*, 0 AS pass FROM tinyagents_runs r, clock \
        WHERE r.status = 'running' AND (r.lease_until IS NULL OR r.lease_until < clock.ms) \
        AND (cardinality($1::text[]) = 0 OR r.agent = ANY($1)) \
        AND ($2::text IS NULL OR r.file_sha256 = $2) \
        ORDER BY r.lease_until NULLS FIRST, r.id LIMIT $3 FOR UPDATE OF r SKIP LOCKED), \
    queued AS (SELECT r.*, 1 AS pass FROM tinyagents_runs r \
        WHERE r.status = 'queued' \
        AND (cardinality($1::text[]) = 0 OR r.agent = ANY($1)) \
        AND ($2::text IS NULL OR r.file_sha256 = $2) \
        ORDER BY r.updated_at, r.id LIMIT $3 FOR UPDATE SKIP LOCKED) \
    SELECT COLUMNS, clock.ms FROM (SELECT * FROM expired UNION ALL SELECT * FROM queued) c, clock \
    ORDER BY c.pass, c.lease_until NULLS FIRST, c.updated_at, c.id LIMIT $3";

impl PostgresRunStore {
    /// Takes up to `max` runs for `hold`, as
    /// [`RunStore::claim_next`](tinyagents_runs::RunStore::claim_next)
    /// does: first runs whose holder's lease ran out (recovered), then
    /// queued runs, oldest first, only those `filter` admits; each taken by
    /// one claimer only. With `global`, at most that many runs run at once
    /// across every claimer: claims are serialised (an advisory lock of
    /// the transaction) and take at most `global` less the running runs
    /// whose lease still runs. `claim_next` is this with `None`.
    pub async fn claim_next_limited(
        &self,
        hold: &Hold,
        max: usize,
        filter: &ClaimFilter,
        global: Option<usize>,
    ) -> RunStoreResult<Vec<Claim>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let operation = "claim runs";
        let mut client = self.client(operation).await?;
        let tx = client.transaction().await.map_err(failed(operation))?;
        let mut room = max;
        if let Some(global) = global {
            // Serialised, so that two claimers cannot both take the last
            // place; the count is read after the lock, so it sees the
            // claims committed before it.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLAIM_LOCK])
                .await
                .map_err(failed(operation))?;
            let running: i64 = tx
                .query_one(
                    "SELECT count(*) FROM tinyagents_runs WHERE status = 'running' \
                     AND lease_until >= (extract(epoch from now()) * 1000)::bigint",
                    &[],
                )
                .await
                .map_err(failed(operation))?
                .try_get(0)
                .map_err(failed(operation))?;
            let running = usize::try_from(running).unwrap_or(usize::MAX);
            room = room.min(global.saturating_sub(running));
            if room == 0 {
                tx.commit().await.map_err(failed(operation))?;
                return Ok(Vec::new());
            }
        }
        let hold = &cleaned_hold(hold);
        let agents: Vec<&str> = filter.agents.iter().map(String::as_str).collect();
        let hash = filter.file_sha256.as_deref();
        let limit = i64::try_from(room).unwrap_or(i64::MAX);
        let sql = CANDIDATES.replace("COLUMNS", RECORD_COLUMNS);
        let statement = cached(&tx, &sql, operation).await?;
        let rows = tx
            .query(&statement, &[&agents, &hash, &limit])
            .await
            .map_err(failed(operation))?;
        let mut candidates = Vec::with_capacity(rows.len());
        let mut at = Timestamp::EPOCH;
        for row in &rows {
            candidates.push(raw(row).map_err(failed(operation))?);
            let ms: i64 = row
                .try_get(RECORD_COLUMN_COUNT)
                .map_err(failed(operation))?;
            at = Timestamp::from_millis(to_u64(ms));
        }
        let mut claims = Vec::with_capacity(candidates.len());
        for stored in candidates {
            let run = RunId::from(stored.run_id.clone());
            match stored.open(&self.key) {
                Ok(record) => claims.push(take(&tx, &self.key, &record, hold, at).await?),
                Err(error) if unusable(&error) => {
                    fail_unusable(&tx, &run, hold, &error, at).await?;
                }
                Err(error) => return Err(error),
            }
        }
        tx.commit().await.map_err(failed(operation))?;
        Ok(claims)
    }

    /// Which of `runs` have ended (completed, terminated, limit reached,
    /// cancelled or failed), in the order given: what a worker starting up
    /// marks finished in its ledger, when a worker before it died between
    /// the store's record of a run's end and the ledger's mark.
    pub async fn ended_among(&self, runs: &[RunId]) -> RunStoreResult<Vec<RunId>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let operation = "read ended runs";
        let ids: Vec<&str> = runs.iter().map(RunId::as_str).collect();
        let ended: Vec<&str> = RecordStatus::ALL
            .into_iter()
            .filter(|s| s.has_ended())
            .map(RecordStatus::as_str)
            .collect();
        let client = self.client(operation).await?;
        let rows = client
            .query(
                "SELECT id FROM tinyagents_runs WHERE id = ANY($1) AND status = ANY($2)",
                &[&ids, &ended],
            )
            .await
            .map_err(failed(operation))?;
        let found = rows
            .iter()
            .map(|row| row.try_get::<_, String>(0))
            .collect::<Result<HashSet<_>, _>>()
            .map_err(failed(operation))?;
        Ok(runs
            .iter()
            .filter(|run| found.contains(run.as_str()))
            .cloned()
            .collect())
    }
}

/// `RunStore::renew`: renews the leases `owner` still holds among `held`
/// (run, epoch) for `lease`; returns the runs renewed, in `held`'s order.
pub(super) async fn renew(
    store: &PostgresRunStore,
    owner: &str,
    lease: Duration,
    held: &[(RunId, u64)],
) -> RunStoreResult<Vec<RunId>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let operation = "renew leases";
    let ids: Vec<&str> = held.iter().map(|(run, _)| run.as_str()).collect();
    let epochs: Vec<i64> = held.iter().map(|(_, epoch)| to_i64(*epoch)).collect();
    let mut client = store.client(operation).await?;
    let tx = client.transaction().await.map_err(failed(operation))?;
    let until = lease_end(clock(&tx, operation).await?, lease);
    let rows = tx
        .query(
            "WITH renewed AS (
                 UPDATE tinyagents_runs r SET lease_until = $2
                 FROM unnest($3::text[], $4::bigint[]) WITH ORDINALITY AS h (id, epoch, n)
                 WHERE r.id = h.id AND r.epoch = h.epoch AND r.owner = $1
                     AND r.status = 'running'
                 RETURNING r.id, h.n)
             SELECT id FROM renewed ORDER BY n",
            &[&owner, &until, &ids, &epochs],
        )
        .await
        .map_err(failed(operation))?;
    let renewed = rows
        .iter()
        .map(|row| row.try_get::<_, String>(0).map(RunId::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed(operation))?;
    tx.commit().await.map_err(failed(operation))?;
    Ok(renewed)
}
