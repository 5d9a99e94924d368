//! One worker at a time, in this process: a run that waits for approval
//! releases its lease and is resumed by another worker once decided; a
//! stopping worker gives back the runs still going after its grace, and
//! the next one recovers them
//! without paying twice; a worker whose run was claimed away is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tinyagents::core::CancellationToken;
use tinyagents::postgres::testing::TestCluster;
use tinyagents::postgres::{
    AgentFactory, FactoryError, LeasedRun, PgDatabase, PostgresRunStore, Worker, WorkerReport,
};
use tinyagents::prelude::*;
use tinyagents::runs::{
    Decision, NewRun, RecordStatus, RunEvent, RunQuery, RunStore as _, RunStoreError,
};
use tinyagents::{core::ChatRequest, core::ModelError, core::ToolReplay};

/// Calls `refund` once, then answers; at turn `stall` (0: the first model
/// call, 1: the answer after the refund) it takes a minute instead (a
/// worker stopping or dying meanwhile leaves the run where it stands).
struct RefundOnce {
    stall: Option<usize>,
}

#[async_trait]
impl ChatModel for RefundOnce {
    fn name(&self) -> &str {
        "refund-once"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let turns = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        if self.stall == Some(turns) {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(match turns {
            0 => ScriptedModel::tool_call("refund", json!({ "cents": 100 })),
            _ => ChatResponse::text("refunded"),
        })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Cents {
    cents: u64,
}

/// A harness with a `refund` that never repeats, counts its runs, waits
/// `pause` inside, and asks for approval when `approval`.
fn refunder(
    refunds: Arc<AtomicUsize>,
    pause: Duration,
    approval: bool,
) -> impl Fn(&LeasedRun) -> Result<AgentHarness, FactoryError> + Send + Sync + 'static {
    refunder_stalling(refunds, pause, approval, None)
}

/// [`refunder`], whose model stalls at turn `stall`.
fn refunder_stalling(
    refunds: Arc<AtomicUsize>,
    pause: Duration,
    approval: bool,
    stall: Option<usize>,
) -> impl Fn(&LeasedRun) -> Result<AgentHarness, FactoryError> + Send + Sync + 'static {
    move |run: &LeasedRun| {
        let refunds = Arc::clone(&refunds);
        let refund = FnTool::new("refund", "Refunds.", move |args: Cents| {
            let refunds = Arc::clone(&refunds);
            async move {
                tokio::time::sleep(pause).await;
                refunds.fetch_add(1, Ordering::SeqCst);
                anyhow::Ok(format!("refunded {}", args.cents))
            }
        })
        .map_spec(move |spec| {
            let spec = spec.replay(ToolReplay::Never);
            if approval {
                spec.approval_required()
            } else {
                spec
            }
        });
        let mut builder =
            AgentHarness::builder(Arc::new(RefundOnce { stall })).ledger(Arc::clone(&run.ledger));
        builder.register(Arc::new(refund))?;
        Ok(builder.build()?)
    }
}

pub(crate) async fn setup() -> (TestCluster, PgDatabase, PostgresRunStore) {
    let cluster = TestCluster::start().unwrap();
    let db = PgDatabase::connect(&cluster.database().await.unwrap())
        .await
        .unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    (cluster, db, store)
}

/// Queues `request` for a worker (the refunder's run); its id.
pub(crate) async fn enqueue(store: &PostgresRunStore, request: &RunRequest) -> RunId {
    store
        .create(NewRun::new("refunder", request), None)
        .await
        .unwrap()
        .record
        .run_id
}

/// A worker named `id` over `factory`, looking for runs every 20 ms.
pub(crate) fn worker(db: &PgDatabase, id: &str, factory: impl AgentFactory) -> Worker {
    Worker::new(db, factory)
        .id(id)
        .poll_interval(Duration::from_millis(20))
}

/// Runs `worker` until `run` is in `wanted`, then stops it.
pub(crate) async fn until_status(
    store: &PostgresRunStore,
    worker: Worker,
    run: &RunId,
    wanted: RecordStatus,
) -> WorkerReport {
    run_until(store, worker, || async {
        status(store, run).await == wanted
    })
    .await
}

/// Runs `worker` until `done` says so (checked every 50 ms), then stops it.
async fn run_until<F, Fut>(store: &PostgresRunStore, worker: Worker, done: F) -> WorkerReport
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let cancel = CancellationToken::new();
    let task = tokio::spawn(worker.run(cancel.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker did not get there in 60 s: {:?}",
            store.list(&RunQuery::default().limit(10)).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    task.await.unwrap().unwrap()
}

async fn status(store: &PostgresRunStore, run: &RunId) -> RecordStatus {
    store.get(run).await.unwrap().unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_awaiting_approval_releases_its_lease_and_any_worker_resumes_it() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = enqueue(&store, &RunRequest::new("refund c-42")).await;
    let first = worker(
        &db,
        "first",
        refunder(Arc::clone(&refunds), Duration::ZERO, true),
    );
    let report = until_status(&store, first, &run, RecordStatus::AwaitingApproval).await;
    assert_eq!(
        (report.claimed, report.awaiting_approval),
        (1, 1),
        "{report:?}"
    );
    let waiting = store.get(&run).await.unwrap().unwrap();
    assert_eq!(
        (waiting.holder, waiting.lease_until),
        (None, None),
        "a run awaiting approval holds no lease"
    );
    let pending = store.approvals(&run).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool, "refund");
    assert_eq!(pending[0].decision, None);
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        0,
        "nothing refunded before the decision"
    );

    // Deciding nothing decides nothing: the call still waits and the run
    // is not queued (decisions may be partial). Deciding the wrong call is
    // refused, naming the call that waits; the right decision queues it
    // again.
    let nothing = store.decide(&run, "ops", &[]).await.unwrap();
    assert!(nothing.decided.is_empty(), "{nothing:?}");
    assert!(!nothing.is_complete(), "{nothing:?}");
    assert_eq!(
        nothing
            .undecided
            .iter()
            .map(|c| &c.call_id)
            .collect::<Vec<_>>(),
        vec![&pending[0].call_id]
    );
    assert_eq!(status(&store, &run).await, RecordStatus::AwaitingApproval);
    let refused = store
        .decide(&run, "ops", &[Decision::approve("no-such-call")])
        .await;
    assert!(
        matches!(&refused, Err(RunStoreError::NotWaiting { waiting, .. }) if *waiting == [pending[0].call_id.clone()]),
        "{refused:?}"
    );
    assert_eq!(status(&store, &run).await, RecordStatus::AwaitingApproval);
    let decisions = vec![Decision::approve(pending[0].call_id.clone())];
    let decided = store.decide(&run, "ops", &decisions).await.unwrap();
    assert!(decided.is_complete(), "{decided:?}");
    assert_eq!(status(&store, &run).await, RecordStatus::Queued);
    let again = store.decide(&run, "ops", &decisions).await;
    assert!(
        matches!(
            again,
            Err(RunStoreError::WrongStatus {
                status: RecordStatus::Queued,
                ..
            })
        ),
        "{again:?}"
    );

    // Another worker resumes it: the refund runs once.
    let second = worker(
        &db,
        "second",
        refunder(Arc::clone(&refunds), Duration::ZERO, true),
    );
    let report = until_status(&store, second, &run, RecordStatus::Completed).await;
    assert_eq!(
        (report.claimed, report.recovered, report.completed),
        (1, 1, 1),
        "{report:?}"
    );
    let done = store.get(&run).await.unwrap().unwrap();
    assert_eq!(done.final_text.as_deref(), Some("refunded"));
    // Two claims: the first worker's and the resume (each raises the epoch).
    assert_eq!(done.epoch, 2);
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        1,
        "the approved refund ran once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_cut_short_after_the_approved_call_is_recovered_and_the_call_runs_once() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = enqueue(&store, &RunRequest::new("refund c-11")).await;
    let first = worker(
        &db,
        "asks",
        refunder(Arc::clone(&refunds), Duration::ZERO, true),
    );
    until_status(&store, first, &run, RecordStatus::AwaitingApproval).await;
    let decisions: Vec<_> = store
        .waiting(100)
        .await
        .unwrap()
        .iter()
        .filter(|w| w.run_id == run)
        .map(|w| Decision::approve(w.call_id.clone()))
        .collect();
    assert_eq!(decisions.len(), 1);
    assert!(
        store
            .decide(&run, "ops", &decisions)
            .await
            .unwrap()
            .is_complete()
    );
    // The resuming worker runs the approved refund, then stalls in the
    // model and dies (its future dropped, as a killed process leaves it:
    // nothing recorded, the lease left to expire). Its claim took the
    // state to resume off the run; the decisions stay with the run's last
    // suspension, which the run is past.
    let stalls = Worker::new(
        &db,
        refunder_stalling(Arc::clone(&refunds), Duration::ZERO, true, Some(1)),
    )
    .id("stalls")
    .lease(Duration::from_millis(300))
    .poll_interval(Duration::from_millis(20));
    let dies = tokio::spawn(stalls.run(CancellationToken::new()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while refunds.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refund never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dies.abort();
    assert!(dies.await.unwrap_err().is_cancelled());
    let held = store.get(&run).await.unwrap().unwrap();
    assert_eq!(
        (held.status, held.holder.map(|h| h.owner).as_deref()),
        (RecordStatus::Running, Some("stalls"))
    );
    assert_eq!(held.suspended, None, "the resume's claim took the state");
    // The next worker does not resume the state again (a state resumes
    // once) but recovers the run with the last suspension's decisions: the
    // refund is answered from its row, not run again.
    let next = worker(
        &db,
        "next",
        refunder(Arc::clone(&refunds), Duration::ZERO, true),
    );
    let report = until_status(&store, next, &run, RecordStatus::Completed).await;
    assert_eq!((report.recovered, report.completed), (1, 1), "{report:?}");
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        1,
        "the approved refund ran once"
    );
    let done = store.get(&run).await.unwrap().unwrap();
    assert_eq!(done.final_text.as_deref(), Some("refunded"));
    // Three claims: the asking worker's, the resume, the recovery.
    assert_eq!(done.epoch, 3);
    let segments: Vec<String> = store
        .history(&run)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|entry| match entry.event {
            RunEvent::Claimed { segment, .. } => Some(segment),
            _ => None,
        })
        .collect();
    assert_eq!(segments, ["start", "resume", "recover"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_gives_its_runs_back_and_the_next_recovers_them_without_repeating() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = enqueue(&store, &RunRequest::new("refund c-7")).await;
    // The first worker stops while the refund is inside the tool.
    let slow = Worker::new(
        &db,
        refunder(Arc::clone(&refunds), Duration::from_secs(30), false),
    )
    .id("slow")
    .shutdown_grace(Duration::from_millis(300))
    .poll_interval(Duration::from_millis(20));
    let ledger = tinyagents::postgres::PostgresLedger::open(&db)
        .await
        .unwrap();
    let report = run_until(&store, slow, || async {
        use tinyagents::ledger::EffectLedger;
        !ledger.unresolved(&run).await.unwrap().is_empty()
    })
    .await;
    assert_eq!((report.claimed, report.released), (1, 1), "{report:?}");
    let back = store.get(&run).await.unwrap().unwrap();
    assert_eq!((back.status, back.holder), (RecordStatus::Queued, None));

    // The next worker recovers it: the refund, which must not repeat and
    // whose outcome is unknown, is not run again, and is listed in doubt.
    let next = worker(
        &db,
        "next",
        refunder(Arc::clone(&refunds), Duration::ZERO, false),
    );
    let report = until_status(&store, next, &run, RecordStatus::Completed).await;
    assert_eq!((report.recovered, report.completed), (1, 1), "{report:?}");
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        0,
        "the interrupted refund never ran again"
    );
    use tinyagents::ledger::EffectLedger;
    let doubt = ledger.in_doubt().await.unwrap();
    assert_eq!(doubt.len(), 1, "{doubt:?}");
    assert_eq!(
        (
            doubt[0].row.tool_name.as_str(),
            &doubt[0].idempotency_key.run_id
        ),
        ("refund", &run)
    );
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_run_was_claimed_away_records_nothing_more() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = enqueue(&store, &RunRequest::new("refund c-9")).await;
    let ledger = tinyagents::postgres::PostgresLedger::open(&db)
        .await
        .unwrap();
    let worker = Worker::new(
        &db,
        refunder(Arc::clone(&refunds), Duration::from_millis(600), false),
    )
    .id("zombie")
    .lease(Duration::from_secs(30))
    .poll_interval(Duration::from_millis(20));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(worker.run(cancel.clone()));
    // Once the refund is inside its tool, another claimer takes the run
    // (as after an expired lease): the epoch goes up.
    use tinyagents::ledger::EffectLedger;
    while ledger.unresolved(&run).await.unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bumped = bump_epoch(&db, &run).await;
    assert_eq!(bumped, 2);
    // The refund ends; its settled row is refused (fenced), the run stops,
    // and its end is not recorded: the store still names the new claim.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while refunds.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cancel.cancel();
    let report = task.await.unwrap().unwrap();
    assert_eq!((report.lost, report.completed), (1, 0), "{report:?}");
    assert!(
        report.fenced_writes >= 1,
        "the settle was refused by the fence: {report:?}, rows {:?}",
        ledger.rows(&run).await
    );
    let row = ledger.rows(&run).await.unwrap();
    assert_eq!(row.len(), 1);
    assert_eq!(
        row[0].status,
        tinyagents::ledger::CallStatus::Started,
        "the zombie's settle was refused"
    );
    let held = store.get(&run).await.unwrap().unwrap();
    assert_eq!((held.status, held.epoch), (RecordStatus::Running, 2));
    ledger.shutdown().await.unwrap();
}

/// Takes the run as another worker's claim does (`FOR UPDATE`, which waits
/// for the zombie's ledger transaction to commit): the epoch up by one.
async fn bump_epoch(db: &PgDatabase, run: &RunId) -> i64 {
    let (client, connection) = tokio_postgres::connect(&db.options().url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .query_one(
            "UPDATE tinyagents_runs r SET epoch = r.epoch + 1, owner = 'thief' \
             FROM (SELECT id FROM tinyagents_runs WHERE id = $1 FOR UPDATE) n \
             WHERE r.id = n.id RETURNING r.epoch",
            &[&run.as_str()],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_agent_factory_fails_its_run_and_the_worker_goes_on() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let doomed = enqueue(
        &store,
        &RunRequest::new("doomed").with_run_id(RunId::from("doomed")),
    )
    .await;
    let fine = enqueue(&store, &RunRequest::new("refund c-3")).await;
    let refunder = refunder(Arc::clone(&refunds), Duration::ZERO, false);
    let worker = Worker::new(&db, move |run: &LeasedRun| {
        assert!(
            run.run_id.as_str() != "doomed",
            "the factory cannot build this one"
        );
        refunder(run)
    })
    .id("survives")
    .poll_interval(Duration::from_millis(20));
    let report = run_until(&store, worker, || async {
        status(&store, &doomed).await == RecordStatus::Failed
            && status(&store, &fine).await == RecordStatus::Completed
    })
    .await;
    assert_eq!((report.failed, report.completed), (1, 1), "{report:?}");
    let failed = store.get(&doomed).await.unwrap().unwrap();
    let error = failed.error.unwrap();
    assert!(
        error.contains("the agent factory panicked") && error.contains("cannot build this one"),
        "{error}"
    );
    assert_eq!(failed.holder, None, "its lease is not held");
    assert_eq!(refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dead_in_the_first_model_call_leaves_a_claim_the_next_starts_afresh() {
    let (_cluster, db, store) = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = enqueue(&store, &RunRequest::new("refund c-5")).await;
    // The first worker claims the run in the ledger and dies in the first
    // model call: a claim, no checkpoint, no call.
    let dies = Worker::new(
        &db,
        refunder_stalling(Arc::clone(&refunds), Duration::ZERO, false, Some(0)),
    )
    .id("dies")
    .lease(Duration::from_millis(300))
    .poll_interval(Duration::from_millis(20));
    let task = tokio::spawn(dies.run(CancellationToken::new()));
    let ledger = tinyagents::postgres::PostgresLedger::open(&db)
        .await
        .unwrap();
    use tinyagents::ledger::{EffectLedger, RunState};
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ledger.run_state(&run).await.unwrap() != RunState::Open {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run was never claimed in the ledger"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    let _ = task.await;
    assert!(ledger.rows(&run).await.unwrap().is_empty());
    assert_eq!(ledger.load_checkpoint(&run).await.unwrap(), None);
    // The next worker cannot recover it (nothing to recover from) and may
    // not begin it as new (the claim is there): it takes the bare claim
    // over and runs it from the start.
    let next = worker(
        &db,
        "next",
        refunder(Arc::clone(&refunds), Duration::ZERO, false),
    );
    let report = until_status(&store, next, &run, RecordStatus::Completed).await;
    assert_eq!((report.recovered, report.completed), (1, 1), "{report:?}");
    assert_eq!(refunds.load(Ordering::SeqCst), 1);
    assert_eq!(ledger.run_state(&run).await.unwrap(), RunState::Finished);
    ledger.shutdown().await.unwrap();
}
