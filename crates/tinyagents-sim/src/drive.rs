//! Drives one history on a current-thread runtime with tokio's paused
//! clock, so the seed fixes every interleaving: the run, then as the
//! history says a crash and `recover` in a fresh process on the same
//! ledger, a suspension stored as JSON and resumed (once or twice, across a
//! restart or not). It observes everything the checker needs: each
//! segment's events and end, the tools' own effect log, the ledger's rows
//! and what was persisted.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use tinyagents::prelude::*;
use tinyagents::{
    core::BudgetCounts, core::CallId, core::CancellationToken, core::RunId,
    harness::ApprovalDecision, harness::ResumeOptions, harness::SuspendedRun, ledger::EffectLedger,
    ledger::LedgerRow, ledger::MemoryLedger, ledger::SqliteLedger, orchestrator::AgentBuildRequest,
    orchestrator::AgentDefinition, orchestrator::AgentOrchestrator, orchestrator::BuildError,
    orchestrator::HostTools, orchestrator::InMemorySessionStore, orchestrator::ModelFactory,
    orchestrator::SessionStore,
};

use crate::ledger::{Death, SimLedger, blocking};
use crate::model::{PlanModel, ROOT_INPUT};
use crate::observe::{read_ledger, read_sessions, session_scope, started_rows};
use crate::plan::{History, LedgerKind, Reader};
use crate::policies::configure;
use crate::tools::{Effect, EffectLog, SimTool};

/// The run every history drives.
pub(crate) const RUN: &str = "sim";

/// How long, in virtual time, a segment may take before it counts as hung.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(24 * 3600);

/// The events buffer of every segment.
const EVENT_BUFFER: usize = 4;

/// How a segment started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentKind {
    /// The run.
    Run,
    /// `recover` in a fresh process after a crash.
    Recover,
    /// `resume` with decisions.
    Resume,
    /// The same stored state resumed again.
    ResumeAgain,
}

/// How a segment ended.
#[derive(Debug, Clone)]
pub enum SegmentEnd {
    /// It returned a run.
    Finished {
        /// Its status.
        status: RunStatus,
        /// The transcript.
        messages: Vec<Message>,
        /// What it spent.
        budget: BudgetCounts,
        /// The stored state, as JSON, when it waits for approval.
        suspended: Option<String>,
    },
    /// It returned an error.
    Failed(String),
    /// The process died at a ledger write.
    Crashed,
    /// A panic reached the caller.
    Panicked(String),
    /// It did not end within a day of virtual time.
    Hung,
}

/// One segment of the history.
#[derive(Debug, Clone)]
pub struct Segment {
    /// How it started.
    pub kind: SegmentKind,
    /// Every event read, in order.
    pub events: Vec<AgentEvent>,
    /// Events the sink dropped.
    pub dropped: u64,
    /// Whether every event was read.
    pub read_all: bool,
    /// How it ended.
    pub end: SegmentEnd,
    /// The ledger writes it asked for.
    pub writes: Vec<String>,
}

/// Everything observed of one history.
#[derive(Debug, Default)]
pub struct Observation {
    /// The segments, in order.
    pub segments: Vec<Segment>,
    /// Every execution of a host tool, across every process.
    pub effects: Vec<Effect>,
    /// Calls a person approved, by run and id.
    pub approved: Vec<(RunId, CallId)>,
    /// Calls a person denied, by run and id.
    pub denied: Vec<(RunId, CallId)>,
    /// Every ledger row at the end, of every run of the tree.
    pub rows: Vec<LedgerRow>,
    /// The calls the ledger lists in doubt.
    pub in_doubt: Vec<(RunId, CallId)>,
    /// Runs the ledger says are unfinished.
    pub unfinished: Vec<RunId>,
    /// The root run's rows that were started when its process died.
    pub started_at_crash: Vec<CallId>,
    /// What was persisted, as text: stored states, ledger files, rows and
    /// checkpoints.
    pub persisted: Vec<(String, String)>,
    /// The history could not be set up (not a finding about the harness).
    pub setup_error: Option<String>,
}

/// Runs `history` to its end.
pub fn simulate(history: &History) -> Observation {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(drive(history)),
        Err(error) => Observation {
            setup_error: Some(format!("no runtime: {error}")),
            ..Observation::default()
        },
    }
}

/// What survives a process: the host's effect log, the ledger's storage.
pub(crate) struct World {
    pub(crate) log: Arc<EffectLog>,
    pub(crate) memory: Arc<MemoryLedger>,
    pub(crate) sessions: Arc<InMemorySessionStore>,
    pub(crate) dir: tempfile::TempDir,
}

impl World {
    pub(crate) fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger.db")
    }
}

/// One process of the history.
struct Process {
    agent: tinyagents::orchestrator::ActiveAgent,
    ledger: Option<Arc<SimLedger>>,
    sqlite: Option<Arc<SqliteLedger>>,
}

impl Process {
    async fn stop(self) {
        let Self {
            agent,
            ledger,
            sqlite,
        } = self;
        drop(agent);
        drop(ledger);
        if let Some(sqlite) = sqlite {
            let _ = blocking(sqlite.shutdown()).await;
        }
    }
}

async fn drive(history: &History) -> Observation {
    let mut seen = Observation::default();
    let world = match tempfile::tempdir() {
        Ok(dir) => World {
            log: Arc::new(EffectLog::default()),
            memory: Arc::new(MemoryLedger::new()),
            sessions: Arc::new(InMemorySessionStore::new()),
            dir,
        },
        Err(error) => {
            seen.setup_error = Some(format!("no temp dir: {error}"));
            return seen;
        }
    };
    let death = history.faults.crash_at.map(|at| Death {
        at,
        after_write: history.faults.crash_after_write,
    });
    let mut process = match start(
        history,
        &world,
        death,
        history.faults.failing_writes.clone(),
    )
    .await
    {
        Ok(process) => process,
        Err(error) => {
            seen.setup_error = Some(error);
            return seen;
        }
    };
    let cancel = CancellationToken::new();
    if let Some(ms) = history.faults.cancel_at_ms {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            cancel.cancel();
        });
    }
    let run_id = RunId::new(RUN);
    let mut segment = {
        let request = RunRequest::new(ROOT_INPUT)
            .with_run_id(run_id.clone())
            .with_cancellation(cancel);
        let agent = &process.agent;
        let in_session = history.session;
        run_segment(history, &process, SegmentKind::Run, |sink| {
            async move {
                let run = if in_session {
                    agent.run_in_session(&session_scope(), request, &sink).await
                } else {
                    agent.run(request, &sink).await
                };
                run.map_err(|e| e.to_string())
            }
            .boxed_local()
        })
        .await
    };
    let mut decisions = history.faults.decisions.iter().copied();
    for _ in 0..8 {
        let end = segment.end.clone();
        seen.segments.push(segment);
        match end {
            SegmentEnd::Crashed => {
                process.stop().await;
                seen.started_at_crash
                    .extend(started_rows(history, &world).await);
                process = match start(history, &world, None, Vec::new()).await {
                    Ok(process) => process,
                    Err(error) => {
                        seen.setup_error = Some(error);
                        return seen;
                    }
                };
                let harness = process.agent.harness();
                let id = &run_id;
                segment = run_segment(history, &process, SegmentKind::Recover, |sink| {
                    async move {
                        harness
                            .recover(id, ResumeOptions::default(), &sink)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    .boxed_local()
                })
                .await;
            }
            SegmentEnd::Finished {
                suspended: Some(text),
                ..
            } => {
                seen.persisted
                    .push(("suspended run".to_owned(), text.clone()));
                let state: SuspendedRun = match serde_json::from_str(&text) {
                    Ok(state) => state,
                    Err(error) => {
                        seen.setup_error =
                            Some(format!("a stored state does not read back: {error}"));
                        process.stop().await;
                        return seen;
                    }
                };
                let decided: Vec<ApprovalDecision> = state
                    .pending()
                    .map(|pending| {
                        if decisions.next().unwrap_or(true) {
                            seen.approved
                                .push((pending.run_id.clone(), pending.call.id.clone()));
                            pending.approve()
                        } else {
                            seen.denied
                                .push((pending.run_id.clone(), pending.call.id.clone()));
                            pending.deny("the simulated person says no")
                        }
                    })
                    .collect();
                if history.faults.crash_before_resume && history.ledger != LedgerKind::None {
                    process.stop().await;
                    process = match start(history, &world, None, Vec::new()).await {
                        Ok(process) => process,
                        Err(error) => {
                            seen.setup_error = Some(error);
                            return seen;
                        }
                    };
                }
                segment = resume_segment(
                    history,
                    &process,
                    SegmentKind::Resume,
                    state.clone(),
                    &decided,
                )
                .await;
                if history.faults.resume_twice && !matches!(segment.end, SegmentEnd::Crashed) {
                    let again = resume_segment(
                        history,
                        &process,
                        SegmentKind::ResumeAgain,
                        state,
                        &decided,
                    )
                    .await;
                    // The first resume's outcome decides what comes next.
                    let first = std::mem::replace(&mut segment, again);
                    seen.segments.push(segment);
                    segment = first;
                }
            }
            _ => break,
        }
    }
    process.stop().await;
    seen.effects = world.log.all();
    read_ledger(history, &world, &mut seen).await;
    read_sessions(&world, &mut seen).await;
    seen
}

/// Resumes `state` with `decisions` in `process`, as one segment.
async fn resume_segment(
    history: &History,
    process: &Process,
    kind: SegmentKind,
    state: SuspendedRun,
    decisions: &[ApprovalDecision],
) -> Segment {
    let harness = process.agent.harness();
    run_segment(history, process, kind, |sink| {
        async move {
            harness
                .resume(state, decisions, ResumeOptions::default(), &sink)
                .await
                .map_err(|e| e.to_string())
        }
        .boxed_local()
    })
    .await
}

/// Starts a process: its ledger (a fresh wrapper over the history's
/// storage) and the root agent with its helpers, tools and policies.
async fn start(
    history: &History,
    world: &World,
    death: Option<Death>,
    failing: Vec<u32>,
) -> Result<Process, String> {
    let (ledger, sqlite) = match history.ledger {
        LedgerKind::None => (None, None),
        LedgerKind::Memory => {
            let inner = Arc::clone(&world.memory) as Arc<dyn EffectLedger>;
            (
                Some(Arc::new(SimLedger::new(inner, false, death, failing))),
                None,
            )
        }
        LedgerKind::Sqlite => {
            let sqlite = blocking(SqliteLedger::open(world.ledger_path()))
                .await
                .map_err(|e| format!("the ledger does not open: {e}"))?;
            let sqlite = Arc::new(sqlite);
            let inner = Arc::clone(&sqlite) as Arc<dyn EffectLedger>;
            (
                Some(Arc::new(SimLedger::new(inner, true, death, failing))),
                Some(sqlite),
            )
        }
    };
    let model: Arc<dyn ChatModel> = Arc::new(PlanModel::new(
        history.turns.clone(),
        history.secret.clone(),
        history.session,
    ));
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |_: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            Ok(Arc::clone(&model))
        },
    );
    let mut tools = HostTools::new();
    for def in &history.tools {
        tools.insert(Arc::new(SimTool::new(def, history, Arc::clone(&world.log))));
    }
    let helper_id = |i: usize| format!("helper{i}");
    let mut definitions = vec![
        AgentDefinition::new("root", "Root")
            .tools(history.tools.iter().map(|t| t.name.clone()))
            .agent_tools((0..history.helpers.len()).map(helper_id)),
    ];
    for (i, helper) in history.helpers.iter().enumerate() {
        definitions.push(
            AgentDefinition::new(helper_id(i), History::helper_name(i))
                .description("A simulated helper.")
                .exposed()
                .tools(helper.tools.clone())
                .agent_tools(helper.calls.iter().map(|&j| helper_id(j))),
        );
    }
    let mut orchestrator =
        AgentOrchestrator::new(Arc::clone(&world.sessions) as Arc<dyn SessionStore>)
            .limits(limits(history));
    if let Some(ledger) = &ledger {
        orchestrator = orchestrator.ledger(Arc::clone(ledger) as Arc<dyn EffectLedger>);
    }
    let configured = history.clone();
    let request = AgentBuildRequest::new("root", definitions.into_iter().map(Arc::new), models)
        .tools(tools)
        .customize_agents(move |_, builder| configure(&configured, builder));
    let agent = orchestrator
        .get_or_create_agent(request)
        .await
        .map_err(|e| format!("the agents do not build: {e}"))?;
    Ok(Process {
        agent,
        ledger,
        sqlite,
    })
}

/// The history's run limits.
pub(crate) fn limits(history: &History) -> RunLimits {
    let l = &history.limits;
    RunLimits::default()
        .with_max_tool_calls(l.tool_calls)
        .with_max_nested_depth(l.nested_depth)
        .with_max_model_calls(l.model_calls)
        .with_max_parallel_calls(l.parallel)
        .with_wall_clock(l.wall_ms.map(Duration::from_millis))
        .with_max_tool_result_bytes(l.result_bytes)
        .with_tool_timeout(l.tool_timeout_ms.map(Duration::from_millis))
        .with_max_depth(l.depth)
}

type SegmentFuture<'a> = futures_util::future::LocalBoxFuture<'a, Result<AgentRun, String>>;

/// Runs one segment with the history's event reader, watching for the
/// process's death, a panic and a hang.
async fn run_segment<'a>(
    history: &History,
    process: &'a Process,
    kind: SegmentKind,
    start: impl FnOnce(EventSink) -> SegmentFuture<'a>,
) -> Segment {
    let (sink, mut receiver) = event_channel(EVENT_BUFFER);
    let events = Arc::new(Mutex::new(Vec::new()));
    let over = Arc::new(tokio::sync::Notify::new());
    let reader = {
        let events = Arc::clone(&events);
        let over = Arc::clone(&over);
        let mode = history.reader;
        tokio::spawn(async move {
            let limit = match mode {
                Reader::Gone => return,
                Reader::Stalls(n) => Some(n),
                Reader::Eager | Reader::Slow(_) => None,
            };
            let mut read = 0;
            loop {
                if limit.is_some_and(|n| read >= n) {
                    over.notified().await;
                    return;
                }
                let Some(event) = receiver.recv().await else {
                    return;
                };
                read += 1;
                if let Ok(mut events) = events.lock() {
                    events.push(event);
                }
                if let Reader::Slow(ms) = mode {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
        })
    };
    let died = process.ledger.as_ref().map(|l| l.died());
    let run = AssertUnwindSafe(start(sink.clone())).catch_unwind();
    let end = tokio::select! {
        biased;
        () = async {
            match &died {
                Some(died) => died.notified().await,
                None => std::future::pending().await,
            }
        } => SegmentEnd::Crashed,
        outcome = tokio::time::timeout(WATCHDOG, run) => match outcome {
            Err(_) => SegmentEnd::Hung,
            Ok(Err(panic)) => SegmentEnd::Panicked(panic_text(panic.as_ref())),
            Ok(Ok(Err(error))) => SegmentEnd::Failed(error),
            Ok(Ok(Ok(run))) => SegmentEnd::Finished {
                status: run.status,
                messages: run.messages.clone(),
                budget: run.budget,
                suspended: run
                    .suspended
                    .as_ref()
                    .map(|s| serde_json::to_string(s).unwrap_or_default()),
            },
        },
    };
    let dropped = sink.dropped_events();
    drop(sink);
    over.notify_one();
    // A sink a dead process left behind never closes: the reader is
    // stopped after a grace period of virtual time.
    let _ = tokio::time::timeout(Duration::from_secs(60), reader).await;
    let events = events.lock().map(|e| e.clone()).unwrap_or_default();
    Segment {
        kind,
        read_all: history.reader.reads_all(),
        events,
        dropped,
        end,
        writes: process
            .ledger
            .as_ref()
            .map(|l| l.writes())
            .unwrap_or_default(),
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}
