//! `RunStore` for [`SqliteRunStore`]: each operation one transaction.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension as _, Transaction, TransactionBehavior, params};
use tinyagents_core::RunId;
use tinyagents_ledger::Timestamp;

use super::SqliteRunStore;
use super::read::{self, storage};
use crate::approval::{Decided, Decision, WaitingCall};
use crate::backend::{
    ClaimPlan, Identity, check_claim, check_decisions, cleaned_ending, cleaned_hold, cleaned_run,
    decision_record, decision_seal, history_text, journal_texts, lease_end, now, sealed_request,
    still_waiting, to_i64, unusable, waiting_calls_of, waiting_seal,
};
use crate::error::{RunStoreError, RunStoreResult};
use crate::history::{HistoryEntry, RunEvent};
use crate::journal::{JournalEntry, NewJournalEvent};
use crate::record::{
    AgentsFile, Claim, ClaimFilter, Ending, Hold, NewRun, RecordStatus, RunQuery, RunRecord,
};
use crate::seal::SealKey;
use crate::store::RunStore;

fn begin<'c>(
    conn: &'c mut rusqlite::Connection,
    operation: &'static str,
) -> RunStoreResult<Transaction<'c>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| storage(operation, e))
}

fn commit(tx: Transaction<'_>, operation: &'static str) -> RunStoreResult<()> {
    tx.commit().map_err(|e| storage(operation, e))
}

fn note(
    tx: &Transaction<'_>,
    run: &RunId,
    by: &str,
    at: Timestamp,
    event: &RunEvent,
) -> RunStoreResult<()> {
    let text = history_text(run, event)?;
    tx.execute(
        "INSERT INTO run_history (run_id, at, by, event) VALUES (?1, ?2, ?3, ?4)",
        params![run.as_str(), to_i64(at.as_millis()), by, text],
    )
    .map_err(|e| storage("write a run's history", e))?;
    Ok(())
}

/// Takes `record` for `hold` inside `tx` (its claim checked by the caller).
fn take(
    tx: &Transaction<'_>,
    key: &SealKey,
    record: &RunRecord,
    hold: &Hold,
) -> RunStoreResult<Claim> {
    let at = now();
    let run = &record.run_id;
    let ClaimPlan {
        resume,
        takeover,
        segment,
    } = ClaimPlan::of(record);
    let epoch = record.epoch + 1;
    let holder = &hold.holder;
    tx.execute(
        "UPDATE runs SET status = 'running', owner = ?2, host = ?3, pid = ?4, lease_until = ?5,
             epoch = ?6, started_at = coalesce(started_at, ?7), updated_at = ?7, ended_at = NULL,
             error = NULL, suspended = CASE WHEN ?8 THEN NULL ELSE suspended END
         WHERE run_id = ?1",
        params![
            run.as_str(),
            holder.owner,
            holder.host,
            holder.pid,
            lease_end(at, hold.lease),
            to_i64(epoch),
            to_i64(at.as_millis()),
            resume.is_some()
        ],
    )
    .map_err(|e| storage("claim a run", e))?;
    let segment = segment.to_owned();
    note(
        tx,
        run,
        &holder.owner,
        at,
        &RunEvent::Claimed { epoch, segment },
    )?;
    let decisions = if record.suspension > 0 {
        read::suspension_calls(tx, key, run, record.suspension)?
            .iter()
            .filter_map(WaitingCall::approval)
            .collect()
    } else {
        Vec::new()
    };
    let record =
        read::record(tx, key, run)?.ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
    Ok(Claim {
        record,
        epoch,
        takeover,
        resume,
        decisions,
    })
}

/// Fails a run a worker's claim found unusable (`error` says why: an edit
/// made outside the store, or an unreadable value), so no claim meets it
/// again; its record is left as it is, for a person to look at.
fn fail_unusable(
    tx: &Transaction<'_>,
    run: &RunId,
    hold: &Hold,
    error: &RunStoreError,
) -> RunStoreResult<()> {
    let at = now();
    let text = error.to_string();
    tx.execute(
        "UPDATE runs SET status = 'failed', error = ?2, ended_at = ?3, updated_at = ?3,
             owner = NULL, host = NULL, pid = NULL, lease_until = NULL WHERE run_id = ?1",
        params![run.as_str(), text, to_i64(at.as_millis())],
    )
    .map_err(|e| storage("claim runs", e))?;
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
}

impl SqliteRunStore {
    fn insert(
        tx: &Transaction<'_>,
        key: &SealKey,
        run: &NewRun,
        hold: Option<&Hold>,
    ) -> RunStoreResult<()> {
        let exists: Option<i64> = tx
            .query_row(
                "SELECT 1 FROM runs WHERE run_id = ?1",
                [run.run_id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| storage("create a run", e))?;
        if exists.is_some() {
            return Err(RunStoreError::Exists {
                run: run.run_id.clone(),
            });
        }
        let (request, seal) = sealed_request(run, key)?;
        let at = to_i64(now().as_millis());
        tx.execute(
            "INSERT INTO runs (run_id, agent, file_path, file_sha256, session, request, seal,
                               status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8, ?8)",
            params![
                run.run_id.as_str(),
                run.agent,
                run.file.as_ref().map(|f| &f.path),
                run.file.as_ref().map(|f| &f.sha256),
                run.session,
                request,
                seal,
                at
            ],
        )
        .map_err(|e| storage("create a run", e))?;
        let by = hold.map_or("queue", |h| h.holder.owner.as_str());
        let status = if hold.is_some() {
            RecordStatus::Running
        } else {
            RecordStatus::Queued
        };
        note(tx, &run.run_id, by, now(), &RunEvent::Created { status })
    }
}

#[async_trait]
impl RunStore for SqliteRunStore {
    async fn create(&self, run: NewRun, hold: Option<&Hold>) -> RunStoreResult<Claim> {
        let (run, hold) = (cleaned_run(run), hold.map(cleaned_hold));
        self.with("create a run", move |conn, key| {
            let tx = begin(conn, "create a run")?;
            Self::insert(&tx, key, &run, hold.as_ref())?;
            let record =
                read::record(&tx, key, &run.run_id)?.ok_or_else(|| RunStoreError::NotFound {
                    run: run.run_id.clone(),
                })?;
            let claim = match &hold {
                Some(hold) => take(&tx, key, &record, hold)?,
                None => Claim {
                    record,
                    epoch: 0,
                    takeover: false,
                    resume: None,
                    decisions: Vec::new(),
                },
            };
            commit(tx, "create a run")?;
            Ok(claim)
        })
        .await
    }

    async fn get(&self, run: &RunId) -> RunStoreResult<Option<RunRecord>> {
        let run = run.clone();
        self.with("read a run", move |conn, key| read::record(conn, key, &run))
            .await
    }

    async fn list(&self, query: &RunQuery) -> RunStoreResult<Vec<RunRecord>> {
        let query = query.clone();
        self.with("list runs", move |conn, key| {
            let statuses: Vec<&str> = query.statuses.iter().map(|s| s.as_str()).collect();
            let mut clause = String::from("WHERE 1 = 1");
            let mut values: Vec<Box<dyn rusqlite::ToSql>> = Vec::new();
            if !statuses.is_empty() {
                let marks: Vec<String> = (0..statuses.len())
                    .map(|i| format!("?{}", values.len() + i + 1))
                    .collect();
                clause.push_str(&format!(" AND status IN ({})", marks.join(", ")));
                values.extend(
                    statuses
                        .iter()
                        .map(|s| Box::new((*s).to_owned()) as Box<dyn rusqlite::ToSql>),
                );
            }
            if let Some(agent) = &query.agent {
                values.push(Box::new(agent.clone()));
                clause.push_str(&format!(" AND agent = ?{}", values.len()));
            }
            values.push(Box::new(i64::from(query.limit)));
            clause.push_str(&format!(
                " ORDER BY created_at, run_id LIMIT ?{}",
                values.len()
            ));
            let refs: Vec<&dyn rusqlite::ToSql> = values.iter().map(AsRef::as_ref).collect();
            read::records(conn, key, &clause, &refs)
        })
        .await
    }

    async fn counts(&self) -> RunStoreResult<Vec<(RecordStatus, u64)>> {
        self.with("count runs", |conn, _| {
            let mut statement = conn
                .prepare("SELECT status, count(*) FROM runs GROUP BY status")
                .map_err(|e| storage("count runs", e))?;
            let rows = statement
                .query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })
                .map_err(|e| storage("count runs", e))?;
            let mut counts = Vec::new();
            for row in rows {
                let (status, n) = row.map_err(|e| storage("count runs", e))?;
                if let Some(status) = RecordStatus::parse(&status) {
                    counts.push((status, u64::try_from(n).unwrap_or(0)));
                }
            }
            counts.sort();
            Ok(counts)
        })
        .await
    }

    async fn claim(&self, run: &RunId, seen_epoch: u64, hold: &Hold) -> RunStoreResult<Claim> {
        let (run, hold) = (run.clone(), cleaned_hold(hold));
        self.with("claim a run", move |conn, key| {
            let tx = begin(conn, "claim a run")?;
            let record = read::record(&tx, key, &run)?
                .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
            check_claim(&run, record.status, record.epoch, seen_epoch)?;
            let claim = take(&tx, key, &record, &hold)?;
            commit(tx, "claim a run")?;
            Ok(claim)
        })
        .await
    }

    async fn claim_next(
        &self,
        hold: &Hold,
        max: usize,
        filter: &ClaimFilter,
    ) -> RunStoreResult<Vec<Claim>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let (hold, filter) = (cleaned_hold(hold), filter.clone());
        self.with("claim runs", move |conn, key| {
            let tx = begin(conn, "claim runs")?;
            let at = to_i64(now().as_millis());
            let mut admits = String::new();
            let mut values: Vec<Box<dyn rusqlite::ToSql>> = vec![Box::new(at)];
            if !filter.agents.is_empty() {
                let marks: Vec<String> = (0..filter.agents.len())
                    .map(|i| format!("?{}", i + 2))
                    .collect();
                admits.push_str(&format!(" AND agent IN ({})", marks.join(", ")));
                values.extend(
                    filter
                        .agents
                        .iter()
                        .map(|a| Box::new(a.clone()) as Box<dyn rusqlite::ToSql>),
                );
            }
            if let Some(hash) = &filter.file_sha256 {
                values.push(Box::new(hash.clone()));
                admits.push_str(&format!(" AND file_sha256 = ?{}", values.len()));
            }
            let refs: Vec<&dyn rusqlite::ToSql> = values.iter().map(AsRef::as_ref).collect();
            // ?1 (the time) is used by the first clause only; the second
            // reads it too so that both take the same parameters.
            let expired = read::raw_records(
                &tx,
                &format!(
                    "WHERE status = 'running' AND (lease_until IS NULL OR lease_until < ?1){admits} \
                     ORDER BY lease_until, run_id"
                ),
                &refs,
            )?;
            let queued = read::raw_records(
                &tx,
                &format!("WHERE status = 'queued' AND ?1 = ?1{admits} ORDER BY updated_at, run_id"),
                &refs,
            )?;
            let mut claims = Vec::new();
            for stored in expired.into_iter().chain(queued) {
                if claims.len() == max {
                    break;
                }
                let run = RunId::from(stored.run_id.clone());
                match stored.open(key) {
                    Ok(record) => claims.push(take(&tx, key, &record, &hold)?),
                    Err(error) if unusable(&error) => fail_unusable(&tx, &run, &hold, &error)?,
                    Err(error) => return Err(error),
                }
            }
            commit(tx, "claim runs")?;
            Ok(claims)
        })
        .await
    }

    async fn renew(
        &self,
        owner: &str,
        lease: Duration,
        held: &[(RunId, u64)],
    ) -> RunStoreResult<Vec<RunId>> {
        let (owner, held) = (owner.to_owned(), held.to_vec());
        self.with("renew leases", move |conn, _| {
            let tx = begin(conn, "renew leases")?;
            let until = lease_end(now(), lease);
            let mut renewed = Vec::new();
            for (run, epoch) in held {
                let n = tx
                    .execute(
                        "UPDATE runs SET lease_until = ?4 WHERE run_id = ?1 AND epoch = ?2
                             AND owner = ?3 AND status = 'running'",
                        params![run.as_str(), to_i64(epoch), owner, until],
                    )
                    .map_err(|e| storage("renew leases", e))?;
                if n == 1 {
                    renewed.push(run);
                }
            }
            commit(tx, "renew leases")?;
            Ok(renewed)
        })
        .await
    }

    async fn end(&self, run: &RunId, epoch: u64, ending: &Ending) -> RunStoreResult<bool> {
        let (run, ending) = (run.clone(), cleaned_ending(ending));
        self.with("end a run", move |conn, key| {
            let tx = begin(conn, "end a run")?;
            let held: Option<(String, i64, i64, Option<String>)> = tx
                .query_row(
                    "SELECT status, epoch, suspension, owner FROM runs WHERE run_id = ?1",
                    [run.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(|e| storage("end a run", e))?;
            let Some((status, held_epoch, suspension, owner)) = held else {
                return Err(RunStoreError::NotFound { run });
            };
            if status != "running" || held_epoch != to_i64(epoch) {
                return Ok(false);
            }
            let by = owner.unwrap_or_default();
            let at = now();
            let ms = to_i64(at.as_millis());
            let release = "owner = NULL, host = NULL, pid = NULL, lease_until = NULL";
            let event = match &ending {
                Ending::Ended {
                    status,
                    final_text,
                    usage,
                } => {
                    tx.execute(
                        &format!(
                            "UPDATE runs SET status = ?2, final_text = ?3, input_tokens = ?4,
                                 output_tokens = ?5, error = NULL, ended_at = ?6, updated_at = ?6,
                                 {release} WHERE run_id = ?1"
                        ),
                        params![
                            run.as_str(),
                            status.as_str(),
                            final_text,
                            to_i64(usage.input_tokens),
                            to_i64(usage.output_tokens),
                            ms
                        ],
                    )
                    .map_err(|e| storage("end a run", e))?;
                    RunEvent::Ended {
                        status: *status,
                        error: None,
                    }
                }
                Ending::Failed { error } => {
                    tx.execute(
                        &format!(
                            "UPDATE runs SET status = 'failed', error = ?2, ended_at = ?3,
                                 updated_at = ?3, {release} WHERE run_id = ?1"
                        ),
                        params![run.as_str(), error, ms],
                    )
                    .map_err(|e| storage("end a run", e))?;
                    RunEvent::Ended {
                        status: RecordStatus::Failed,
                        error: Some(error.clone()),
                    }
                }
                Ending::Released => {
                    tx.execute(
                        &format!("UPDATE runs SET status = 'queued', updated_at = ?2, {release} WHERE run_id = ?1"),
                        params![run.as_str(), ms],
                    )
                    .map_err(|e| storage("end a run", e))?;
                    RunEvent::Released
                }
                Ending::Suspended { state, usage } => {
                    if state.run_id != run {
                        return Err(crate::backend::tampered(&run, "suspended state (another run's)"));
                    }
                    let next = u32::try_from(suspension).unwrap_or(0) + 1;
                    let sealed = key.seal_state(state)?;
                    let sealed = serde_json::to_string(&sealed).map_err(|e| {
                        RunStoreError::Unreadable {
                            run: run.clone(),
                            what: "suspended state",
                            detail: e.to_string(),
                            source: Some(e.into()),
                        }
                    })?;
                    tx.execute(
                        &format!(
                            "UPDATE runs SET status = 'awaiting_approval', suspension = ?2,
                                 suspended = ?3, input_tokens = ?4, output_tokens = ?5,
                                 updated_at = ?6, {release} WHERE run_id = ?1"
                        ),
                        params![
                            run.as_str(),
                            next,
                            sealed,
                            to_i64(usage.input_tokens),
                            to_i64(usage.output_tokens),
                            ms
                        ],
                    )
                    .map_err(|e| storage("end a run", e))?;
                    let calls = waiting_calls_of(state);
                    for call in &calls {
                        let arguments = serde_json::to_string(&call.arguments).unwrap_or_default();
                        tx.execute(
                            "INSERT INTO waiting_calls (run_id, suspension, position, call_id, tool,
                                 reason, args_hash, arguments, requested_at, seal)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                            params![
                                run.as_str(),
                                next,
                                call.position,
                                call.call_id.as_str(),
                                call.tool,
                                call.reason,
                                call.args_hash,
                                arguments,
                                ms,
                                waiting_seal(key, &run, next, call)
                            ],
                        )
                        .map_err(|e| storage("record waiting calls", e))?;
                    }
                    RunEvent::Suspended {
                        suspension: next,
                        calls: calls.into_iter().map(|c| c.call_id).collect(),
                    }
                }
            };
            note(&tx, &run, &by, at, &event)?;
            commit(tx, "end a run")?;
            Ok(true)
        })
        .await
    }

    async fn waiting(&self, limit: u32) -> RunStoreResult<Vec<WaitingCall>> {
        self.with("read waiting calls", move |conn, key| {
            read::waiting(
                conn,
                key,
                "WHERE r.status = 'awaiting_approval' AND w.suspension = r.suspension \
                 AND w.approved IS NULL ORDER BY w.requested_at, w.run_id, w.position LIMIT ?1",
                params![i64::from(limit)],
            )
        })
        .await
    }

    async fn approvals(&self, run: &RunId) -> RunStoreResult<Vec<WaitingCall>> {
        let run = run.clone();
        self.with("read approvals", move |conn, key| {
            read::waiting(
                conn,
                key,
                "WHERE w.run_id = ?1 ORDER BY w.suspension, w.position",
                params![run.as_str()],
            )
        })
        .await
    }

    async fn decide(
        &self,
        run: &RunId,
        by: &str,
        decisions: &[Decision],
    ) -> RunStoreResult<Decided> {
        let (run, by, decisions) = (run.clone(), by.to_owned(), decisions.to_vec());
        self.with("decide", move |conn, key| {
            let tx = begin(conn, "decide")?;
            let record = read::record(&tx, key, &run)?
                .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
            if record.status != RecordStatus::AwaitingApproval {
                return Err(RunStoreError::WrongStatus {
                    run,
                    status: record.status,
                    expected: "awaiting approval",
                });
            }
            let calls = read::suspension_calls(&tx, key, &run, record.suspension)?;
            let chosen = check_decisions(&run, &calls, &decisions)?;
            let at = now();
            let mut decided = Vec::with_capacity(chosen.len());
            for (call, decision) in chosen.into_iter().zip(&decisions) {
                let made = decision_record(decision, &by, at);
                tx.execute(
                    "UPDATE waiting_calls SET approved = ?4, decision_reason = ?5, decided_by = ?6,
                         decided_at = ?7, decision_seal = ?8
                     WHERE run_id = ?1 AND suspension = ?2 AND call_id = ?3 AND approved IS NULL",
                    params![
                        run.as_str(),
                        call.suspension,
                        call.call_id.as_str(),
                        made.approved,
                        made.reason,
                        made.by,
                        to_i64(at.as_millis()),
                        decision_seal(key, call, &made)
                    ],
                )
                .map_err(|e| storage("decide", e))?;
                note(
                    &tx,
                    &run,
                    &by,
                    at,
                    &RunEvent::Decided {
                        suspension: call.suspension,
                        call_id: call.call_id.clone(),
                        approved: made.approved,
                        reason: made.reason.clone(),
                    },
                )?;
                decided.push(WaitingCall {
                    decision: Some(made),
                    ..call.clone()
                });
            }
            let undecided = still_waiting(calls, &decided);
            if undecided.is_empty() {
                tx.execute(
                    "UPDATE runs SET status = 'queued', updated_at = ?2 WHERE run_id = ?1",
                    params![run.as_str(), to_i64(at.as_millis())],
                )
                .map_err(|e| storage("decide", e))?;
            }
            commit(tx, "decide")?;
            Ok(Decided { decided, undecided })
        })
        .await
    }

    async fn accept_file(&self, run: &RunId, file: &AgentsFile, by: &str) -> RunStoreResult<()> {
        let (run, file, by) = (run.clone(), file.clone(), by.to_owned());
        self.with("accept a file", move |conn, key| {
            let tx = begin(conn, "accept a file")?;
            let record = read::record(&tx, key, &run)?
                .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
            let Some(before) = &record.file else {
                return Err(RunStoreError::NoFile { run });
            };
            let request: String = tx
                .query_row(
                    "SELECT request FROM runs WHERE run_id = ?1",
                    [run.as_str()],
                    |r| r.get(0),
                )
                .map_err(|e| storage("accept a file", e))?;
            let seal = Identity {
                run_id: &run,
                agent: &record.agent,
                file: Some(&file),
                session: record.session.as_deref(),
                request: &request,
            }
            .seal(key);
            let at = now();
            tx.execute(
                "UPDATE runs SET file_path = ?2, file_sha256 = ?3, seal = ?4, updated_at = ?5
                 WHERE run_id = ?1",
                params![
                    run.as_str(),
                    file.path,
                    file.sha256,
                    seal,
                    to_i64(at.as_millis())
                ],
            )
            .map_err(|e| storage("accept a file", e))?;
            note(
                &tx,
                &run,
                &by,
                at,
                &RunEvent::FileAccepted {
                    path: file.path.clone(),
                    from: before.sha256.clone(),
                    to: file.sha256.clone(),
                },
            )?;
            commit(tx, "accept a file")
        })
        .await
    }

    async fn history(&self, run: &RunId) -> RunStoreResult<Vec<HistoryEntry>> {
        let run = run.clone();
        self.with("read a run's history", move |conn, _| {
            read::history(conn, &run)
        })
        .await
    }

    async fn append_journal(
        &self,
        run: &RunId,
        epoch: u64,
        events: &[NewJournalEvent],
    ) -> RunStoreResult<bool> {
        let run = run.clone();
        let texts = journal_texts(&run, events)?;
        self.with("write a run's journal", move |conn, _| {
            let tx = begin(conn, "write a run's journal")?;
            let held: Option<i64> = tx
                .query_row(
                    "SELECT epoch FROM runs WHERE run_id = ?1",
                    [run.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| storage("write a run's journal", e))?;
            if held != Some(to_i64(epoch)) {
                return Ok(false);
            }
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO run_journal (run_id, at, event) VALUES (?1, ?2, ?3)",
                    )
                    .map_err(|e| storage("write a run's journal", e))?;
                for (at, text) in &texts {
                    insert
                        .execute(params![run.as_str(), at, text])
                        .map_err(|e| storage("write a run's journal", e))?;
                }
            }
            commit(tx, "write a run's journal")?;
            Ok(true)
        })
        .await
    }

    async fn journal(
        &self,
        run: &RunId,
        after: u64,
        limit: u32,
    ) -> RunStoreResult<Vec<JournalEntry>> {
        let run = run.clone();
        self.with("read a run's journal", move |conn, _| {
            read::journal(conn, &run, after, limit)
        })
        .await
    }
}
