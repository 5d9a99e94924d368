//! Workers: processes that claim queued runs, run them with an agent built
//! for each, heartbeat their leases, and recover runs that another worker
//! left.
//!
//! Each claimed run gets its own harness from the host's [`AgentFactory`],
//! built over a ledger fenced with the claim's epoch: when another worker
//! has claimed the run since (this one was paused past its lease, a
//! zombie), every ledger write of this one is refused in the transaction
//! that would have made it, so it cannot start a call or settle a row, and
//! its run stops with [`LedgerError::Fenced`](tinyagents_ledger::LedgerError).

mod execute;
mod ledger;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tinyagents_core::{CancellationToken, RunId};
use tinyagents_harness::AgentHarness;
use tinyagents_ledger::{EffectLedger, SharedLedger};
use tokio::task::JoinSet;

use self::execute::execute;

use crate::database::PgDatabase;
use crate::ledger::PostgresLedger;
use crate::queue::claim::{self, ClaimLimits, Ending};
use crate::queue::{QueueError, RunQueue};

/// An error of the host's agent factory.
pub type FactoryError = Box<dyn std::error::Error + Send + Sync>;

/// A run a worker has claimed, as the factory sees it.
#[derive(Clone)]
pub struct LeasedRun {
    /// The run (its id in the queue and in the ledger).
    pub run_id: RunId,
    /// The claim's epoch: the fence every ledger write carries.
    pub epoch: u64,
    /// 1 for a first claim; more when the run is recovered or resumed.
    pub attempt: u32,
    /// The ledger to build the agent with (and every agent it delegates
    /// to): fenced with `epoch`.
    pub ledger: SharedLedger,
}

impl std::fmt::Debug for LeasedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedRun")
            .field("run_id", &self.run_id)
            .field("epoch", &self.epoch)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// Builds the agent that runs a claimed run. Give every harness it builds
/// (the run's, and those of the agents it delegates to) `run.ledger`.
pub trait AgentFactory: Send + Sync + 'static {
    /// The harness for `run`.
    fn build(&self, run: &LeasedRun) -> Result<AgentHarness, FactoryError>;
}

impl<F> AgentFactory for F
where
    F: Fn(&LeasedRun) -> Result<AgentHarness, FactoryError> + Send + Sync + 'static,
{
    fn build(&self, run: &LeasedRun) -> Result<AgentHarness, FactoryError> {
        self(run)
    }
}

/// What a worker did until it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerReport {
    /// Runs it claimed.
    pub claimed: u64,
    /// Claimed runs another worker had held (recovered or resumed).
    pub recovered: u64,
    /// Runs it completed.
    pub completed: u64,
    /// Runs it ended as failed.
    pub failed: u64,
    /// Runs it left awaiting approval (lease released).
    pub awaiting_approval: u64,
    /// Runs it gave back unfinished when it stopped.
    pub released: u64,
    /// Runs another worker claimed while this one held them: their end was
    /// not recorded by this one.
    pub lost: u64,
    /// Ledger writes of its runs refused because another worker had claimed
    /// the run (the fence).
    pub fenced_writes: u64,
}

/// A worker process's loop: see the module docs.
pub struct Worker {
    db: PgDatabase,
    factory: Arc<dyn AgentFactory>,
    ledger: Option<PostgresLedger>,
    id: String,
    concurrency: usize,
    global: Option<usize>,
    lease: Duration,
    poll: Duration,
    grace: Duration,
}

impl Worker {
    /// A worker over `db` building agents with `factory`: one run at a time,
    /// a 30 s lease renewed every 10 s, the queue polled every 200 ms.
    pub fn new(db: &PgDatabase, factory: impl AgentFactory) -> Self {
        Self {
            db: db.clone(),
            factory: Arc::new(factory),
            ledger: None,
            id: format!("worker-{}-{}", std::process::id(), RunId::generate()),
            concurrency: 1,
            global: None,
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(200),
            grace: Duration::from_secs(30),
        }
    }

    /// Runs at most `n` runs at once in this worker (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Runs at most `n` runs at once across every worker of the database
    /// (claims are then serialised by an advisory lock).
    pub fn global_concurrency(mut self, n: usize) -> Self {
        self.global = Some(n);
        self
    }

    /// How long a claim holds a run without a heartbeat (renewed every
    /// third of it). A worker paused longer loses its runs to others.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// How often an idle worker looks for runs.
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// How long a stopping worker lets its runs go on before it gives them
    /// back (default 30 s). A run given back is dropped where it stands, as
    /// a crash would leave it, and queued again: the next claim recovers it
    /// through the ledger. (Cancelling it instead would end it for good.)
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The worker's name in the `owner` column (default: pid and a random
    /// part).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The ledger to fence runs on (default: opened on the database with
    /// default options).
    pub fn ledger(mut self, ledger: PostgresLedger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Claims and runs until `cancel` fires; then stops claiming, lets its
    /// runs go on for the [shutdown grace](Self::shutdown_grace), gives back
    /// those still going (the next claim recovers them) and flushes the
    /// ledger.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<WorkerReport, QueueError> {
        RunQueue::open(&self.db).await?;
        let ledger = match self.ledger.take() {
            Some(ledger) => ledger,
            None => PostgresLedger::open(&self.db).await?,
        };
        finish_ended(&self.db, &ledger).await?;
        let shared = Arc::new(Shared {
            db: self.db.clone(),
            ledger,
            factory: Arc::clone(&self.factory),
            owner: self.id.clone(),
            held: Mutex::new(HashMap::new()),
            report: Mutex::new(WorkerReport::default()),
        });
        // Aborted when this future ends or is dropped: a heartbeat that
        // outlived its worker would hold the leases of runs nobody runs.
        let heart = AbortOnDrop(tokio::spawn(heartbeats(Arc::clone(&shared), self.lease)));
        let mut runs = JoinSet::new();
        let result = self.claim_loop(&shared, &mut runs, &cancel).await;
        let drained = tokio::time::timeout(self.grace, async {
            while runs.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            runs.abort_all();
            while runs.join_next().await.is_some() {}
            give_back(&shared).await;
        }
        drop(heart);
        let flushed = shared.ledger.flush().await;
        if let Err(err) = flushed {
            // Writes queued without waiting that failed: settles refused by
            // the fence (runs lost to another worker) or lost with a
            // connection. Their rows stay in doubt, in view; nothing here
            // can mend them.
            tracing::warn!(error = %err, worker = %self.id, "ledger writes failed in the background");
        }
        let report = *shared.report.lock();
        result?;
        Ok(report)
    }

    async fn claim_loop(
        &self,
        shared: &Arc<Shared>,
        runs: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) -> Result<(), QueueError> {
        while !cancel.is_cancelled() {
            while runs.try_join_next().is_some() {}
            let room = self.concurrency.saturating_sub(runs.len());
            let limits = ClaimLimits {
                room,
                global: self.global,
                lease: self.lease,
            };
            let claimed = match claim::claim(&self.db, &self.id, limits).await {
                Ok(claimed) => claimed,
                // The database may be restarting: wait, then try again.
                Err(QueueError::Database(err)) => {
                    tracing::warn!(error = %err, worker = %self.id, "claim failed");
                    Vec::new()
                }
                Err(other) => return Err(other),
            };
            let idle = claimed.is_empty();
            for run in claimed {
                let token = CancellationToken::new();
                shared
                    .held
                    .lock()
                    .insert(run.run_id.clone(), (run.epoch, token.clone()));
                {
                    let mut report = shared.report.lock();
                    report.claimed += 1;
                    report.recovered += u64::from(run.attempts > 1);
                }
                runs.spawn(execute(Arc::clone(shared), run, token));
            }
            if idle || runs.len() >= self.concurrency {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = tokio::time::sleep(self.poll) => {}
                    Some(_) = runs.join_next(), if !runs.is_empty() => {}
                }
            }
        }
        Ok(())
    }
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a worker's tasks share.
pub(crate) struct Shared {
    db: PgDatabase,
    ledger: PostgresLedger,
    factory: Arc<dyn AgentFactory>,
    owner: String,
    /// The runs this worker holds: their epoch, and the token that stops
    /// them when the lease is lost.
    held: Mutex<HashMap<RunId, (u64, CancellationToken)>>,
    report: Mutex<WorkerReport>,
}

/// Marks finished in the ledger the runs the queue holds as ended: a worker
/// that died between recording a run's end and the ledger's mark left them
/// open there.
async fn finish_ended(db: &PgDatabase, ledger: &PostgresLedger) -> Result<(), QueueError> {
    let open = ledger.unfinished_runs().await?;
    for run in claim::ended_among(db, &open).await? {
        ledger.mark_run_finished(&run).await?;
    }
    Ok(())
}

/// Queues again the runs whose tasks were dropped at the end of the grace.
async fn give_back(shared: &Shared) {
    let held: Vec<(RunId, u64)> = shared
        .held
        .lock()
        .drain()
        .map(|(id, (epoch, _))| (id, epoch))
        .collect();
    for (run, epoch) in held {
        let given = claim::end(&shared.db, &run, epoch, &Ending::Released).await;
        let mut report = shared.report.lock();
        match given {
            Ok(true) => report.released += 1,
            Ok(false) => report.lost += 1,
            // Its lease expires and another worker recovers it.
            Err(err) => {
                tracing::warn!(run = %run, error = %err, "a run was not given back");
                report.lost += 1;
            }
        }
    }
}

/// Renews the leases every third of the lease; a run whose lease could not
/// be renewed (another worker claimed it) is cancelled.
async fn heartbeats(shared: Arc<Shared>, lease: Duration) {
    let every = lease / 3;
    loop {
        tokio::time::sleep(every).await;
        let held: Vec<(RunId, u64)> = shared
            .held
            .lock()
            .iter()
            .map(|(id, (epoch, _))| (id.clone(), *epoch))
            .collect();
        match claim::heartbeat(&shared.db, &shared.owner, lease, &held).await {
            Ok(renewed) => {
                let map = shared.held.lock();
                for (id, _) in &held {
                    if !renewed.contains(id)
                        && let Some((_, token)) = map.get(id)
                    {
                        tracing::warn!(run = %id, "lease lost: another worker claimed the run");
                        token.cancel();
                    }
                }
            }
            // Not renewed this time; the next beat tries again, and if the
            // lease expires meanwhile the fence stops the run's writes.
            Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
        }
    }
}
