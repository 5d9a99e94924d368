//! Runs as leased work: the `tinyagents_runs` table, what a host does with
//! it ([`RunQueue`]: enqueue, look, approve), and the claims and leases the
//! workers take (`claim.rs`).
//!
//! A run is `queued` until a worker claims it (`running`, with an owner, a
//! lease expiry and an epoch one higher than before), then `completed`,
//! `failed`, or `awaiting_approval` (its lease released, its suspended
//! state stored until someone decides; deciding queues it again, and any
//! worker resumes it). A `running` run whose lease expired is claimable
//! again: its new owner recovers it through the ledger.

pub(crate) mod claim;
mod decode;
pub(crate) mod schema;
#[cfg(all(test, feature = "testing"))]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{Message, RunId};
use tinyagents_harness::{ApprovalDecision, PendingCall, RunRequest};

pub(crate) use self::decode::suspended_of;
use self::decode::{check_decisions, decode_run, status_of, write_error};
use crate::database::PgDatabase;
use crate::error::PgError;
use crate::migrate::migrate;

/// Where a queued run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueStatus {
    /// Waiting for a worker.
    Queued,
    /// Leased by a worker.
    Running,
    /// Waiting for a person's decision on some calls; no worker holds it.
    AwaitingApproval,
    /// Ended with an answer (or a tool's ending of the run).
    Completed,
    /// Ended without one (an error, a limit, a cancellation).
    Failed,
}

impl QueueStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// Parses [`as_str`](Self::as_str) text.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "awaiting_approval" => Self::AwaitingApproval,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

impl std::fmt::Display for QueueStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a queue operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The database failed.
    #[error(transparent)]
    Database(#[from] PgError),
    /// The effect ledger failed.
    #[error(transparent)]
    Ledger(#[from] tinyagents_ledger::LedgerError),
    /// A run of that id is queued already.
    #[error("run {run} is in the queue already; a new run needs a new id")]
    Exists {
        /// The run.
        run: RunId,
    },
    /// No run of that id is queued.
    #[error("run {run} is not in the queue")]
    NotFound {
        /// The run.
        run: RunId,
    },
    /// The run does not wait for a decision.
    #[error("run {run} is {status}, not awaiting approval")]
    NotAwaiting {
        /// The run.
        run: RunId,
        /// Where it is.
        status: QueueStatus,
    },
    /// Decisions that do not match the waiting calls.
    #[error("run {run}: {problem}")]
    Decisions {
        /// The run.
        run: RunId,
        /// What does not match (calls left undecided, or decided and not
        /// waiting).
        problem: String,
    },
    /// A stored row this build cannot read.
    #[error("run {run}: its stored {what} is unreadable: {detail}")]
    Unreadable {
        /// The run.
        run: RunId,
        /// Which column.
        what: &'static str,
        /// What the decoder said.
        detail: String,
    },
}

/// The part of a [`RunRequest`] that a queue keeps: what another process
/// needs to run it. A request's cancellation token, limit tracker and
/// extensions belong to the process that made it and are not queued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredRequest {
    pub(crate) input: String,
    #[serde(default)]
    pub(crate) history: Vec<Message>,
    #[serde(default)]
    pub(crate) leading_instruction: bool,
    #[serde(default)]
    pub(crate) properties: Map<String, Value>,
}

impl StoredRequest {
    pub(crate) fn of(request: &RunRequest) -> Self {
        Self {
            input: request.input.clone(),
            history: request.history.clone(),
            leading_instruction: request.leading_instruction,
            properties: request.properties.clone(),
        }
    }

    /// The request again, for the run `run_id`.
    pub(crate) fn to_request(&self, run_id: RunId) -> RunRequest {
        let mut request = RunRequest::new(self.input.clone())
            .with_run_id(run_id)
            .with_properties(self.properties.clone());
        request.history = self.history.clone();
        request.leading_instruction = self.leading_instruction;
        request
    }
}

/// How a run ended, as the queue keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// The final answer.
    pub final_text: String,
    /// The run's status as the harness reported it (`completed`,
    /// `terminated`, `cancelled`, a limit).
    pub status: String,
    /// Tokens the run used (input + output), across its segments.
    pub total_tokens: u64,
}

/// A run as the queue has it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedRun {
    /// The run (also its id in the effect ledger).
    pub id: RunId,
    /// Where it is.
    pub status: QueueStatus,
    /// The worker holding its lease (running only).
    pub owner: Option<String>,
    /// Claims so far; every claim increments it.
    pub epoch: u64,
    /// Claims that found it claimed before (recoveries) plus one.
    pub attempts: u32,
    /// How it ended (completed runs).
    pub outcome: Option<RunOutcome>,
    /// Why it failed (failed runs).
    pub error: Option<String>,
    /// The calls waiting for a decision (awaiting approval).
    pub pending: Vec<PendingCall>,
}

/// A run just claimed ([`RunQueue::claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The run.
    pub run_id: RunId,
    /// The claim's epoch: the fence of its ledger writes.
    pub epoch: u64,
    /// Claims of the run so far, this one included.
    pub attempts: u32,
}

/// The queue of runs in one database: what hosts and the command line use.
/// Workers ([`Worker`](crate::Worker)) claim from it.
#[derive(Debug, Clone)]
pub struct RunQueue {
    db: PgDatabase,
}

impl RunQueue {
    /// Opens the queue, creating or migrating its table.
    pub async fn open(db: &PgDatabase) -> Result<Self, QueueError> {
        let mut client = db.dedicated().await?;
        migrate(&mut client, schema::COMPONENT, schema::MIGRATIONS).await?;
        Ok(Self { db: db.clone() })
    }

    /// The database.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    /// Queues `request` as a new run (its `run_id`, or a new one) and returns
    /// the run's id. Refused when the id is queued already.
    pub async fn enqueue(&self, request: &RunRequest) -> Result<RunId, QueueError> {
        let run = request.run_id.clone().unwrap_or_else(RunId::generate);
        let stored = serde_json::to_value(StoredRequest::of(request)).map_err(|e| {
            QueueError::Unreadable {
                run: run.clone(),
                what: "request",
                detail: e.to_string(),
            }
        })?;
        let client = self.db.pooled().await?;
        let inserted = client
            .execute(
                "INSERT INTO tinyagents_runs (id, status, request) VALUES ($1, 'queued', $2) \
                 ON CONFLICT (id) DO NOTHING",
                &[&run.as_str(), &stored],
            )
            .await
            .map_err(|e| write_error(&self.db, "enqueue", &e))?;
        if inserted == 0 {
            return Err(QueueError::Exists { run });
        }
        Ok(run)
    }

    /// The run `run`, if queued.
    pub async fn get(&self, run: &RunId) -> Result<Option<QueuedRun>, QueueError> {
        let client = self.db.pooled().await?;
        let row = client
            .query_opt(
                "SELECT id, status, owner, epoch, attempts, outcome, error, suspended \
                 FROM tinyagents_runs WHERE id = $1",
                &[&run.as_str()],
            )
            .await
            .map_err(|e| PgError::query("get run", e))?;
        row.map(|row| decode_run(&row)).transpose()
    }

    /// Every queued run, oldest first, at most `limit`.
    pub async fn list(&self, limit: u32) -> Result<Vec<QueuedRun>, QueueError> {
        let client = self.db.pooled().await?;
        let rows = client
            .query(
                "SELECT id, status, owner, epoch, attempts, outcome, error, suspended \
                 FROM tinyagents_runs ORDER BY queued_at, id LIMIT $1",
                &[&i64::from(limit)],
            )
            .await
            .map_err(|e| PgError::query("list runs", e))?;
        rows.iter().map(decode_run).collect()
    }

    /// How many runs are in each status.
    pub async fn counts(&self) -> Result<Vec<(QueueStatus, u64)>, QueueError> {
        let client = self.db.pooled().await?;
        let rows = client
            .query(
                "SELECT status, count(*) FROM tinyagents_runs GROUP BY status ORDER BY status",
                &[],
            )
            .await
            .map_err(|e| PgError::query("count runs", e))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let status = QueueStatus::parse(row.get(0))?;
                let count: i64 = row.get(1);
                Some((status, u64::try_from(count).unwrap_or(0)))
            })
            .collect())
    }

    /// Claims up to `max` runs for `owner` with a lease of `lease`: runs
    /// whose lease expired first, then queued runs, oldest first, each taken
    /// once across every claimer (`FOR UPDATE SKIP LOCKED`) with its epoch
    /// incremented. What a [`Worker`](crate::Worker) does; for hosts that
    /// schedule runs themselves, who then renew the lease and end the run
    /// under the epoch they hold.
    pub async fn claim(
        &self,
        owner: &str,
        max: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<Claim>, QueueError> {
        let limits = claim::ClaimLimits {
            room: max,
            global: None,
            lease,
        };
        let claimed = claim::claim(&self.db, owner, limits).await?;
        Ok(claimed
            .into_iter()
            .map(|c| Claim {
                run_id: c.run_id,
                epoch: c.epoch,
                attempts: c.attempts,
            })
            .collect())
    }

    /// Records the decisions on a run awaiting approval and queues it again:
    /// the next worker to claim it resumes it with them. Every waiting call
    /// must be decided, and no other; checked and written in one
    /// transaction, so two deciders cannot both succeed.
    pub async fn approve(
        &self,
        run: &RunId,
        decisions: &[ApprovalDecision],
    ) -> Result<(), QueueError> {
        let mut client = self.db.pooled().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| PgError::query("begin approve", e))?;
        let row = tx
            .query_opt(
                "SELECT status, suspended FROM tinyagents_runs WHERE id = $1 FOR UPDATE",
                &[&run.as_str()],
            )
            .await
            .map_err(|e| PgError::query("read run", e))?
            .ok_or_else(|| QueueError::NotFound { run: run.clone() })?;
        let status = status_of(run, row.get(0))?;
        if status != QueueStatus::AwaitingApproval {
            return Err(QueueError::NotAwaiting {
                run: run.clone(),
                status,
            });
        }
        let suspended: Option<Value> = row.get(1);
        let suspended = suspended_of(run, suspended)?.ok_or_else(|| QueueError::Unreadable {
            run: run.clone(),
            what: "suspended state",
            detail: "missing".into(),
        })?;
        check_decisions(run, &suspended, decisions)?;
        let decided = serde_json::to_value(decisions).map_err(|e| QueueError::Unreadable {
            run: run.clone(),
            what: "decisions",
            detail: e.to_string(),
        })?;
        tx.execute(
            "UPDATE tinyagents_runs SET status = 'queued', decisions = $2, queued_at = now() \
             WHERE id = $1",
            &[&run.as_str(), &decided],
        )
        .await
        .map_err(|e| write_error(&self.db, "approve", &e))?;
        tx.commit()
            .await
            .map_err(|e| write_error(&self.db, "approve", &e))?;
        Ok(())
    }
}
