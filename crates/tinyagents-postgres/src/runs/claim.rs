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
    ClaimPlan, check_claim, clean, cleaned_hold, history_text, lease_end, to_i64, to_u64, unusable,
};
use tinyagents_runs::{
    Claim, ClaimFilter, Hold, RecordStatus, RunEvent, RunRecord, RunStoreError, RunStoreResult,
    SealKey, WaitingCall,
};

use super::read::{self, RECORD_COLUMN_COUNT, RECORD_COLUMNS, raw};
use super::{PostgresRunStore, Tx, cached, clock, failed};

/// The advisory lock that serialises claims under a global limit of
/// running runs (the bytes `tARc`).
const CLAIM_LOCK: i64 = 0x7441_5263;

/// Until when a lease of `lease` taken at `at` runs (ms).
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
    let event = history_text(run, &event)?;
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

/// Fails a run a worker's claim took and found unusable (`error` says
/// why: an edit made outside the store, or an unreadable value), so no
/// claim meets it again; its record is left as it is, for a person to look
/// at.
async fn fail_taken<C: deadpool_postgres::GenericClient + Sync>(
    client: &C,
    run: &RunId,
    hold: &Hold,
    error: &RunStoreError,
    at: Timestamp,
) -> RunStoreResult<()> {
    let operation = "claim runs";
    let text = error.to_string();
    let event = history_text(
        run,
        &RunEvent::Ended {
            status: RecordStatus::Failed,
            error: Some(text.clone()),
        },
    )?;
    client
        .execute(
            "WITH failed AS (UPDATE tinyagents_runs SET status = 'failed', error = $2, \
                 ended_at = $3, updated_at = $3, owner = NULL, host = NULL, pid = NULL, \
                 lease_until = NULL WHERE id = $1 RETURNING id) \
             INSERT INTO tinyagents_run_history (run_id, at, by, event) \
                 SELECT id, $3, $4, $5 FROM failed",
            &[
                &run.as_str(),
                &clean(&text),
                &to_i64(at.as_millis()),
                &hold.holder.owner,
                &event,
            ],
        )
        .await
        .map_err(failed(operation))?;
    Ok(())
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

/// A worker's claim, in one statement: the runs it may take (first those
/// whose lease ran out, the oldest lease first, then queued runs, oldest
/// first; `$1` the agents, any when empty; `$2` the agents file's hash, any
/// run when NULL; `$3` how many), each locked or skipped when another
/// transaction holds it, taken for the holder (`$4` owner, `$5` host, `$6`
/// pid) under the next epoch with a lease of `$7` ms, each claim noted in
/// its run's history. The segment is `ClaimPlan::of`'s rule
/// (`tinyagents_runs::backend`), written in SQL: a queued run with a
/// suspended state resumes (and the claim takes the state), a queued run
/// never taken starts, any other is recovered. Returns, per run taken, its
/// new row (`COLUMNS`), the state it was taken to resume from, the
/// segment, and the statement's time.
const TAKE_NEXT: &str = "WITH clock AS (SELECT (extract(epoch from now()) * 1000)::bigint AS ms), \
    expired AS (SELECT r.id, 0 AS pass, r.lease_until AS lease, r.updated_at AS since \
        FROM tinyagents_runs r, clock \
        WHERE r.status = 'running' AND (r.lease_until IS NULL OR r.lease_until < clock.ms) \
        AND (cardinality($1::text[]) = 0 OR r.agent = ANY($1)) \
        AND ($2::text IS NULL OR r.file_sha256 = $2) \
        ORDER BY r.lease_until NULLS FIRST, r.id LIMIT $3 FOR UPDATE OF r SKIP LOCKED), \
    queued AS (SELECT r.id, 1 AS pass, r.lease_until AS lease, r.updated_at AS since \
        FROM tinyagents_runs r \
        WHERE r.status = 'queued' \
        AND (cardinality($1::text[]) = 0 OR r.agent = ANY($1)) \
        AND ($2::text IS NULL OR r.file_sha256 = $2) \
        ORDER BY r.updated_at, r.id LIMIT $3 FOR UPDATE SKIP LOCKED), \
    picked AS (SELECT * FROM (SELECT * FROM expired UNION ALL SELECT * FROM queued) c \
        ORDER BY pass, lease NULLS FIRST, since, id LIMIT $3), \
    prior AS (SELECT r.id, r.epoch, r.suspended, p.pass, p.lease, p.since, \
        CASE WHEN r.status = 'queued' AND r.suspended IS NOT NULL THEN 'resume' \
             WHEN r.status = 'queued' AND r.epoch = 0 THEN 'start' \
             ELSE 'recover' END AS segment \
        FROM tinyagents_runs r JOIN picked p ON r.id = p.id), \
    taken AS (UPDATE tinyagents_runs r SET status = 'running', owner = $4, host = $5, pid = $6, \
        lease_until = clock.ms + $7, epoch = r.epoch + 1, \
        started_at = coalesce(r.started_at, clock.ms), updated_at = clock.ms, \
        ended_at = NULL, error = NULL, \
        suspended = CASE WHEN prior.segment = 'resume' THEN NULL ELSE r.suspended END \
        FROM prior, clock WHERE r.id = prior.id RETURNING TAKEN_COLUMNS), \
    noted AS (INSERT INTO tinyagents_run_history (run_id, at, by, event) \
        SELECT prior.id, clock.ms, $4, json_build_object('kind', 'claimed', \
            'epoch', prior.epoch + 1, 'segment', prior.segment)::text FROM prior, clock) \
    SELECT t.*, prior.suspended, prior.segment, clock.ms FROM taken t \
        JOIN prior ON prior.id = t.id, clock \
    ORDER BY prior.pass, prior.lease NULLS FIRST, prior.since, prior.id";

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
        let hold = &cleaned_hold(hold);
        let mut client = self.client(operation).await?;
        let mut claims = match global {
            // The statement is its own transaction: one round trip, its
            // commit included.
            None => self.take_next(&client, hold, max, filter).await?,
            Some(global) => {
                // Serialised, so that two claimers cannot both take the
                // last place; the count is read after the lock, so it sees
                // the claims committed before it.
                let tx = client.transaction().await.map_err(failed(operation))?;
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
                let room = max.min(global.saturating_sub(running));
                let claims = if room == 0 {
                    Vec::new()
                } else {
                    self.take_next(&tx, hold, room, filter).await?
                };
                tx.commit().await.map_err(failed(operation))?;
                claims
            }
        };
        // The decisions of the runs that waited for a person, which a
        // resume or a recovery takes.
        for claim in claims.iter_mut().filter(|c| c.record.suspension > 0) {
            let record = &claim.record;
            claim.decisions = read::suspension_calls(
                &**client,
                &self.key,
                &record.run_id,
                record.suspension,
                operation,
            )
            .await?
            .iter()
            .filter_map(WaitingCall::approval)
            .collect();
        }
        Ok(claims)
    }

    /// [`TAKE_NEXT`] on `client` (a pooled connection, or a transaction),
    /// its rows opened; a run it took and found unusable is failed, not
    /// returned. The claims' decisions are left for the caller to read.
    async fn take_next<C: deadpool_postgres::GenericClient + Sync>(
        &self,
        client: &C,
        hold: &Hold,
        room: usize,
        filter: &ClaimFilter,
    ) -> RunStoreResult<Vec<Claim>> {
        let operation = "claim runs";
        let agents: Vec<&str> = filter.agents.iter().map(String::as_str).collect();
        let hash = filter.file_sha256.as_deref();
        let limit = i64::try_from(room).unwrap_or(i64::MAX);
        let lease = i64::try_from(hold.lease.as_millis()).unwrap_or(i64::MAX);
        let taken_columns: Vec<String> = RECORD_COLUMNS
            .split(',')
            .map(|c| format!("r.{}", c.trim()))
            .collect();
        let sql = TAKE_NEXT.replace("TAKEN_COLUMNS", &taken_columns.join(", "));
        let holder = &hold.holder;
        let statement = client
            .prepare_cached(&sql)
            .await
            .map_err(failed(operation))?;
        let rows = client
            .query(
                &statement,
                &[
                    &agents,
                    &hash,
                    &limit,
                    &holder.owner,
                    &holder.host,
                    &i64::from(holder.pid),
                    &lease,
                ],
            )
            .await
            .map_err(failed(operation))?;
        let mut claims = Vec::with_capacity(rows.len());
        for row in &rows {
            let stored = raw(row).map_err(failed(operation))?;
            let column = |n: usize| RECORD_COLUMN_COUNT + n;
            let prior: Option<String> = row.try_get(column(0)).map_err(failed(operation))?;
            let segment: String = row.try_get(column(1)).map_err(failed(operation))?;
            let ms: i64 = row.try_get(column(2)).map_err(failed(operation))?;
            let run = RunId::from(stored.run_id.clone());
            let epoch = to_u64(stored.epoch);
            let opened = stored.open(&self.key).and_then(|record| {
                let resume = match (segment.as_str(), prior) {
                    ("resume", Some(text)) => {
                        let sealed =
                            serde_json::from_str(&text).map_err(|e| RunStoreError::Unreadable {
                                run: run.clone(),
                                what: "suspended state",
                                detail: e.to_string(),
                                source: Some(e.into()),
                            })?;
                        Some(self.key.open_state(&run, &sealed)?)
                    }
                    _ => None,
                };
                Ok((record, resume))
            });
            match opened {
                Ok((record, resume)) => claims.push(Claim {
                    record,
                    epoch,
                    takeover: segment == "recover",
                    resume,
                    decisions: Vec::new(),
                }),
                Err(error) if unusable(&error) => {
                    let at = Timestamp::from_millis(to_u64(ms));
                    fail_taken(client, &run, hold, &error, at).await?;
                }
                Err(error) => return Err(error),
            }
        }
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
