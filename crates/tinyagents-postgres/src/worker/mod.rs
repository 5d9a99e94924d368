//! Workers: processes that claim runs from the run store
//! ([`PostgresRunStore`]), run them with an agent built for each, renew
//! their leases, resume runs whose waiting calls were decided, and recover
//! runs that another worker (or a command) left.
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
use tinyagents_ledger::{EffectLedger, LedgerError, SharedLedger};
use tinyagents_runs::{ClaimFilter, Ending, Hold, Holder, RunStore as _, RunStoreError};
use tokio::task::JoinSet;

use self::execute::execute;

use crate::database::PgDatabase;
use crate::ledger::PostgresLedger;
use crate::runs::PostgresRunStore;

/// An error of the host's agent factory.
pub type FactoryError = Box<dyn std::error::Error + Send + Sync>;

/// Why a worker stopped before it was told to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The run store failed (not a passing database failure: those are
    /// retried).
    #[error(transparent)]
    Store(#[from] RunStoreError),
    /// The effect ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What an [`AgentFactory`] builds for a run: anything that holds the
/// run's [`AgentHarness`] (the harness itself, or an `Agent` of the
/// orchestrator, whose sessions and delegated agents come with it).
pub struct BuiltAgent(Box<dyn AsRef<AgentHarness> + Send + Sync>);

impl BuiltAgent {
    /// Wraps what holds the harness.
    pub fn new(agent: impl AsRef<AgentHarness> + Send + Sync + 'static) -> Self {
        Self(Box::new(agent))
    }

    /// The harness that runs the run.
    pub fn harness(&self) -> &AgentHarness {
        (*self.0).as_ref()
    }
}

impl std::fmt::Debug for BuiltAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltAgent").finish_non_exhaustive()
    }
}

impl From<AgentHarness> for BuiltAgent {
    fn from(harness: AgentHarness) -> Self {
        Self::new(harness)
    }
}

/// A run a worker has claimed, as the factory sees it.
#[derive(Clone)]
pub struct LeasedRun {
    /// The run (its id in the run store and in the ledger).
    pub run_id: RunId,
    /// The agent its record names.
    pub agent: String,
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
            .field("agent", &self.agent)
            .field("epoch", &self.epoch)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// Builds the agent that runs a claimed run. Give every harness it builds
/// (the run's, and those of the agents it delegates to) `run.ledger`.
pub trait AgentFactory: Send + Sync + 'static {
    /// The agent for `run`.
    fn build(&self, run: &LeasedRun) -> Result<BuiltAgent, FactoryError>;
}

impl<F, A> AgentFactory for F
where
    F: Fn(&LeasedRun) -> Result<A, FactoryError> + Send + Sync + 'static,
    A: Into<BuiltAgent>,
{
    fn build(&self, run: &LeasedRun) -> Result<BuiltAgent, FactoryError> {
        self(run).map(Into::into)
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
    store: Option<PostgresRunStore>,
    filter: ClaimFilter,
    id: String,
    concurrency: usize,
    global: Option<usize>,
    lease: Duration,
    poll: Duration,
    grace: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The database shows its target only (never a password); the
        // factory is host code.
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("db", &self.db)
            .field("filter", &self.filter)
            .field("concurrency", &self.concurrency)
            .field("global", &self.global)
            .field("lease", &self.lease)
            .field("poll", &self.poll)
            .field("grace", &self.grace)
            .field("own_ledger", &self.ledger.is_some())
            .field("own_store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker over `db` building agents with `factory`: one run at a time,
    /// a 30 s lease renewed every 10 s, the queue polled every 200 ms.
    pub fn new(db: &PgDatabase, factory: impl AgentFactory) -> Self {
        Self {
            db: db.clone(),
            factory: Arc::new(factory),
            ledger: None,
            store: None,
            filter: ClaimFilter::default(),
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

    /// The run store to claim from (default: opened on the database with
    /// its own sealing key). Give it the host's key when runs are sealed
    /// with one.
    pub fn run_store(mut self, store: PostgresRunStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Takes only the runs `filter` admits (default: every run): those of
    /// the agents it can build, started from the agents file it has.
    pub fn claim_filter(mut self, filter: ClaimFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Claims and runs until `cancel` fires; then stops claiming, lets its
    /// runs go on for the [shutdown grace](Self::shutdown_grace), gives back
    /// those still going (the next claim recovers them) and flushes the
    /// ledger.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<WorkerReport, WorkerError> {
        let store = match self.store.take() {
            Some(store) => store,
            None => PostgresRunStore::open(&self.db).await?,
        };
        let ledger = match self.ledger.take() {
            Some(ledger) => ledger,
            None => PostgresLedger::open(&self.db).await?,
        };
        finish_ended(&store, &ledger).await?;
        let shared = Arc::new(Shared {
            store,
            ledger,
            factory: Arc::clone(&self.factory),
            hold: Hold {
                holder: Holder {
                    owner: self.id.clone(),
                    ..Holder::this_process(None)
                },
                lease: self.lease,
            },
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
    ) -> Result<(), WorkerError> {
        while !cancel.is_cancelled() {
            while runs.try_join_next().is_some() {}
            let room = self.concurrency.saturating_sub(runs.len());
            let claimed = if room == 0 {
                Vec::new()
            } else {
                let claimed = shared
                    .store
                    .claim_next_limited(&shared.hold, room, &self.filter, self.global)
                    .await;
                match claimed {
                    Ok(claimed) => claimed,
                    // The database may be restarting: wait, then try again.
                    Err(err @ RunStoreError::Storage { .. }) => {
                        tracing::warn!(error = %err, worker = %self.id, "claim failed");
                        Vec::new()
                    }
                    Err(other) => return Err(other.into()),
                }
            };
            let idle = claimed.is_empty();
            for claim in claimed {
                let token = CancellationToken::new();
                let run = claim.record.run_id.clone();
                shared.held.lock().insert(run, (claim.epoch, token.clone()));
                {
                    let mut report = shared.report.lock();
                    report.claimed += 1;
                    report.recovered += u64::from(claim.takeover || claim.resume.is_some());
                }
                runs.spawn(execute(Arc::clone(shared), claim, token));
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
    store: PostgresRunStore,
    ledger: PostgresLedger,
    factory: Arc<dyn AgentFactory>,
    hold: Hold,
    /// The runs this worker holds: their epoch, and the token that stops
    /// them when the lease is lost.
    held: Mutex<HashMap<RunId, (u64, CancellationToken)>>,
    report: Mutex<WorkerReport>,
}

/// Marks finished in the ledger the runs the store holds as ended: a worker
/// that died between recording a run's end and the ledger's mark left them
/// open there.
async fn finish_ended(
    store: &PostgresRunStore,
    ledger: &PostgresLedger,
) -> Result<(), WorkerError> {
    let open = ledger.unfinished_runs().await?;
    for run in store.ended_among(&open).await? {
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
        let given = shared.store.end(&run, epoch, &Ending::Released).await;
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
        match shared
            .store
            .renew(&shared.hold.holder.owner, lease, &held)
            .await
        {
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
