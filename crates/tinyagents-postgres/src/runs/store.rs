//! `RunStore` for [`PostgresRunStore`]: each operation one transaction (or
//! one statement, for reads). Records are created, read, listed and
//! counted here, an agents file accepted; claims are in `claim.rs`, ends
//! in `end.rs`, decisions in `decide.rs`, journals in `journal.rs`.

use std::time::Duration;

use async_trait::async_trait;
use tinyagents_core::RunId;
use tinyagents_runs::backend::{
    Identity, cleaned_ending, cleaned_hold, cleaned_run, sealed_request, to_i64,
};
use tinyagents_runs::{
    AgentsFile, Claim, ClaimFilter, Decided, Decision, Ending, HistoryEntry, Hold, JournalEntry,
    NewJournalEvent, NewRun, RecordStatus, RunEvent, RunQuery, RunRecord, RunStore, RunStoreError,
    RunStoreResult, WaitingCall,
};

use super::read;
use super::{PostgresRunStore, claim, clock, connection, decide, end, failed, journal, note};

#[async_trait]
impl RunStore for PostgresRunStore {
    async fn create(&self, run: NewRun, hold: Option<&Hold>) -> RunStoreResult<Claim> {
        let (run, hold) = (cleaned_run(run), hold.map(cleaned_hold));
        let hold = hold.as_ref();
        let operation = "create a run";
        let key = &self.key;
        let (request, seal) = sealed_request(&run, key)?;
        let mut client = self.client(operation).await?;
        let tx = client.transaction().await.map_err(failed(operation))?;
        let at = clock(&tx, operation).await?;
        let ms = to_i64(at.as_millis());
        // The id's uniqueness is the primary key's: of two creators of one
        // id, the second waits for the first and inserts nothing.
        let inserted = tx
            .execute(
                "INSERT INTO tinyagents_runs (id, agent, file_path, file_sha256, session,
                     request, seal, status, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $8)
                 ON CONFLICT (id) DO NOTHING",
                &[
                    &run.run_id.as_str(),
                    &run.agent,
                    &run.file.as_ref().map(|f| f.path.as_str()),
                    &run.file.as_ref().map(|f| f.sha256.as_str()),
                    &run.session,
                    &request,
                    &seal,
                    &ms,
                ],
            )
            .await
            .map_err(failed(operation))?;
        if inserted == 0 {
            return Err(RunStoreError::Exists {
                run: run.run_id.clone(),
            });
        }
        let by = hold.map_or("queue", |h| h.holder.owner.as_str());
        let status = if hold.is_some() {
            RecordStatus::Running
        } else {
            RecordStatus::Queued
        };
        note(&tx, &run.run_id, by, at, &RunEvent::Created { status }).await?;
        let record = read::record(&*tx, key, &run.run_id, false, operation)
            .await?
            .ok_or_else(|| RunStoreError::NotFound {
                run: run.run_id.clone(),
            })?;
        let claim = match hold {
            Some(hold) => claim::take(&tx, key, &record, hold, at).await?,
            None => Claim {
                record,
                epoch: 0,
                takeover: false,
                resume: None,
                decisions: Vec::new(),
            },
        };
        tx.commit().await.map_err(failed(operation))?;
        Ok(claim)
    }

    async fn get(&self, run: &RunId) -> RunStoreResult<Option<RunRecord>> {
        let operation = "read a run";
        let client = self.client(operation).await?;
        read::record(connection(&client), &self.key, run, false, operation).await
    }

    async fn list(&self, query: &RunQuery) -> RunStoreResult<Vec<RunRecord>> {
        let operation = "list runs";
        let statuses: Vec<&str> = query.statuses.iter().map(|s| s.as_str()).collect();
        let agent = query.agent.as_deref();
        let limit = i64::from(query.limit);
        let client = self.client(operation).await?;
        read::records(
            connection(&client),
            &self.key,
            "WHERE (cardinality($1::text[]) = 0 OR status = ANY($1)) \
             AND ($2::text IS NULL OR agent = $2) \
             ORDER BY created_at, id LIMIT $3",
            &[&statuses, &agent, &limit],
            operation,
        )
        .await
    }

    async fn counts(&self) -> RunStoreResult<Vec<(RecordStatus, u64)>> {
        let operation = "count runs";
        let client = self.client(operation).await?;
        let rows = client
            .query(
                "SELECT status, count(*) FROM tinyagents_runs GROUP BY status",
                &[],
            )
            .await
            .map_err(failed(operation))?;
        let mut counts = Vec::with_capacity(rows.len());
        for row in &rows {
            let status: String = row.try_get(0).map_err(failed(operation))?;
            let n: i64 = row.try_get(1).map_err(failed(operation))?;
            if let Some(status) = RecordStatus::parse(&status) {
                counts.push((status, u64::try_from(n).unwrap_or(0)));
            }
        }
        counts.sort();
        Ok(counts)
    }

    async fn claim(&self, run: &RunId, seen_epoch: u64, hold: &Hold) -> RunStoreResult<Claim> {
        claim::one(self, run, seen_epoch, &cleaned_hold(hold)).await
    }

    async fn claim_next(
        &self,
        hold: &Hold,
        max: usize,
        filter: &ClaimFilter,
    ) -> RunStoreResult<Vec<Claim>> {
        self.claim_next_limited(hold, max, filter, None).await
    }

    async fn renew(
        &self,
        owner: &str,
        lease: Duration,
        held: &[(RunId, u64)],
    ) -> RunStoreResult<Vec<RunId>> {
        claim::renew(self, owner, lease, held).await
    }

    async fn end(&self, run: &RunId, epoch: u64, ending: &Ending) -> RunStoreResult<bool> {
        end::end(self, run, epoch, &cleaned_ending(ending)).await
    }

    async fn waiting(&self, limit: u32) -> RunStoreResult<Vec<WaitingCall>> {
        decide::inbox(self, limit).await
    }

    async fn approvals(&self, run: &RunId) -> RunStoreResult<Vec<WaitingCall>> {
        decide::approvals(self, run).await
    }

    async fn decide(
        &self,
        run: &RunId,
        by: &str,
        decisions: &[Decision],
    ) -> RunStoreResult<Decided> {
        decide::decide(self, run, by, decisions).await
    }

    async fn accept_file(&self, run: &RunId, file: &AgentsFile, by: &str) -> RunStoreResult<()> {
        let operation = "accept a file";
        let key = &self.key;
        let mut client = self.client(operation).await?;
        let tx = client.transaction().await.map_err(failed(operation))?;
        let at = clock(&tx, operation).await?;
        let stored = read::stored(&*tx, run, true, operation)
            .await?
            .ok_or_else(|| RunStoreError::NotFound { run: run.clone() })?;
        // The exact text the new seal covers, as the old one did.
        let request = stored.request.clone();
        let record = stored.open(key)?;
        let Some(before) = &record.file else {
            return Err(RunStoreError::NoFile { run: run.clone() });
        };
        let seal = Identity {
            run_id: run,
            agent: &record.agent,
            file: Some(file),
            session: record.session.as_deref(),
            request: &request,
        }
        .seal(key);
        tx.execute(
            "UPDATE tinyagents_runs SET file_path = $2, file_sha256 = $3, seal = $4,
                 updated_at = $5
             WHERE id = $1",
            &[
                &run.as_str(),
                &file.path,
                &file.sha256,
                &seal,
                &to_i64(at.as_millis()),
            ],
        )
        .await
        .map_err(failed(operation))?;
        note(
            &tx,
            run,
            by,
            at,
            &RunEvent::FileAccepted {
                path: file.path.clone(),
                from: before.sha256.clone(),
                to: file.sha256.clone(),
            },
        )
        .await?;
        tx.commit().await.map_err(failed(operation))
    }

    async fn history(&self, run: &RunId) -> RunStoreResult<Vec<HistoryEntry>> {
        let client = self.client("read a run's history").await?;
        read::history(connection(&client), run).await
    }

    async fn append_journal(
        &self,
        run: &RunId,
        epoch: u64,
        events: &[NewJournalEvent],
    ) -> RunStoreResult<bool> {
        journal::append(self, run, epoch, events).await
    }

    async fn journal(
        &self,
        run: &RunId,
        after: u64,
        limit: u32,
    ) -> RunStoreResult<Vec<JournalEntry>> {
        journal::read(self, run, after, limit).await
    }
}
