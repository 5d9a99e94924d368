//! Per-call cost of a delegated call: a parent agent calling an exposed
//! agent through its agent tool, with and without a session. Plain timing
//! (medians over many runs), no framework: the figures we publish are
//! ratios between these workloads.
//!
//! The parent is the requested agent of an `AgentOrchestrator`; its
//! scripted model calls the agent tool `Helper` once per turn with the
//! query `"<k>"`, reads the child's answer back and calls again until it
//! made `N` calls, then answers. The child (`helper`, with an instruction)
//! answers at once with the query it was given. Both models are O(1) per
//! turn (they read the last message only), so what grows with `N` is the
//! harness's and the orchestrator's own work.
//!
//! - `delegate N`: the parent runs without a session; every delegated call
//!   is stateless (the baseline).
//! - `session N`: the parent runs in a session kept in an
//!   `InMemorySessionStore`: every delegated call continues the child's
//!   default conversation, which gains two messages per call.
//! - `session-sqlite N`: the same with a `SqliteSessionStore` on the disk
//!   (in the target directory, not a tmpfs).
//!
//! A timed sample of a session workload is the second of two runs of `N`
//! calls in a fresh session: the child's conversation grows from `2N` to
//! `4N` messages during it, the same stretch that `--instr` measures.
//!
//! `delegation --instr <workload> <n>` runs one parent run of `n` delegated
//! calls in a fresh session (none for `delegate`), without warm-up or
//! timing, for `cargo xtask bench --instructions` to run under valgrind: it
//! subtracts the count of `n` calls from the count of `2n` calls, so the
//! figure is the average cost of calls `n + 1` to `2n`.
#![allow(clippy::print_stdout, missing_docs)] // a benchmark prints its figures

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde_json::json;
use tinyagents_core::{ChatModel, ChatResponse, Message, ModelToolCall, RunLimits, RunStatus};
use tinyagents_harness::{EventSink, RunRequest};
use tinyagents_models::ScriptedModel;
use tinyagents_orchestrator::{
    ActiveAgent, AgentBuildRequest, AgentDefinition, AgentOrchestrator, BuildError,
    InMemorySessionStore, ModelFactory, SessionScope, SessionStore, SqliteSessionStore,
};

/// Where the parent keeps its sessions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    /// No session: stateless delegated calls.
    None,
    Memory,
    Sqlite,
}

impl Store {
    fn parse(workload: &str) -> Option<Self> {
        match workload {
            "delegate" => Some(Self::None),
            "session" => Some(Self::Memory),
            "session-sqlite" => Some(Self::Sqlite),
            _ => None,
        }
    }
}

/// The parent's model: calls `Helper` with `"1"`, then with one more than
/// the child's last answer until it answered `calls`, then says `done`.
fn parent_model(calls: u64) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        let answered = match request.messages.last() {
            Some(Message::Tool { content, .. }) => content.parse::<u64>().unwrap_or(u64::MAX),
            _ => 0,
        };
        Ok(if answered < calls {
            ChatResponse::tool_calls(vec![ModelToolCall::new(
                None,
                "Helper",
                json!({ "query": (answered + 1).to_string() }),
            )])
        } else {
            ChatResponse::text("done")
        })
    })
}

/// The child's model: answers with the query (the last message).
fn child_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        Ok(ChatResponse::text(
            request.messages.last().map_or("", Message::text),
        ))
    })
}

fn definitions() -> Vec<Arc<AgentDefinition>> {
    vec![
        Arc::new(AgentDefinition::new("root", "Root").agent_tools(["helper"])),
        Arc::new(
            AgentDefinition::new("helper", "Helper")
                .description("Answers with the query.")
                .instruction("You help.")
                .exposed(),
        ),
    ]
}

/// A tempdir in the target directory (the real disk), for SQLite.
fn disk_dir() -> tempfile::TempDir {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap_or_else(|e| panic!("{}: {e}", base.display()));
    tempfile::tempdir_in(base).unwrap_or_else(|e| panic!("tempdir: {e}"))
}

/// One parent agent and where its sessions go.
struct Bench {
    root: ActiveAgent,
    store: Store,
    sessions: AtomicU64,
    _dir: Option<tempfile::TempDir>,
}

impl Bench {
    async fn new(store: Store, calls: u64) -> Self {
        let (sessions, dir): (Arc<dyn SessionStore>, _) = match store {
            Store::None | Store::Memory => (Arc::new(InMemorySessionStore::new()), None),
            Store::Sqlite => {
                let dir = disk_dir();
                let sqlite = SqliteSessionStore::open(dir.path().join("sessions.db"))
                    .await
                    .unwrap_or_else(|e| panic!("session store: {e}"));
                (Arc::new(sqlite), Some(dir))
            }
        };
        let calls32 = u32::try_from(calls).unwrap_or(u32::MAX);
        let limits = RunLimits::default()
            .with_max_model_calls(calls32.saturating_add(2))
            .with_max_tool_calls(calls32);
        let orchestrator = AgentOrchestrator::new(sessions).limits(limits);
        let parent: Arc<dyn ChatModel> = Arc::new(parent_model(calls));
        let child: Arc<dyn ChatModel> = Arc::new(child_model());
        let models: Arc<dyn ModelFactory> = Arc::new(
            move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
                Ok(Arc::clone(if d.id.as_str() == "root" {
                    &parent
                } else {
                    &child
                }))
            },
        );
        let root = orchestrator
            .get_or_create_agent(AgentBuildRequest::new("root", definitions(), models))
            .await
            .unwrap_or_else(|e| panic!("build: {e}"));
        Self {
            root,
            store,
            sessions: AtomicU64::new(0),
            _dir: dir,
        }
    }

    /// A session no run has used.
    fn fresh_session(&self) -> SessionScope {
        SessionScope::new(format!(
            "s{}",
            self.sessions.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// One parent run of `calls` delegated calls (in `scope`, if any).
    async fn run(&self, scope: Option<&SessionScope>, calls: u64) {
        let sink = EventSink::none();
        let run = match scope {
            Some(scope) => {
                self.root
                    .run_in_session(scope, RunRequest::new("go"), &sink)
                    .await
            }
            None => self.root.run(RunRequest::new("go"), &sink).await,
        }
        .unwrap_or_else(|e| panic!("run: {e}"));
        assert_eq!(run.status, RunStatus::Completed, "{}", run.final_text);
        assert_eq!(u64::from(run.budget.tool_calls), calls, "delegated calls");
    }

    /// µs per delegated call of one sample: a run of `calls` calls, in a
    /// session that already holds `calls` (for a session workload).
    async fn sample(&self, calls: u64) -> f64 {
        let scope = (self.store != Store::None).then(|| self.fresh_session());
        if let Some(scope) = &scope {
            self.run(Some(scope), calls).await;
        }
        let start = Instant::now();
        self.run(scope.as_ref(), calls).await;
        start.elapsed().as_secs_f64() * 1e6 / calls as f64
    }
}

/// The median time of a 64-byte append followed by `fsync`, in µs, in the
/// directory the SQLite workloads use: what one durable commit costs at
/// least on this disk, right now.
fn fsync_median() -> f64 {
    use std::io::Write as _;
    let dir = disk_dir();
    let mut file = std::fs::File::create(dir.path().join("fsync"))
        .unwrap_or_else(|e| panic!("fsync probe: {e}"));
    let mut samples: Vec<f64> = (0..200)
        .map(|_| {
            file.write_all(&[0u8; 64])
                .unwrap_or_else(|e| panic!("fsync probe: {e}"));
            let start = Instant::now();
            file.sync_all()
                .unwrap_or_else(|e| panic!("fsync probe: {e}"));
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median, 10th and 90th percentile of µs per call over `runs` samples.
fn measure(rt: &tokio::runtime::Runtime, store: Store, calls: u64, runs: usize) -> [f64; 3] {
    rt.block_on(async {
        let bench = Bench::new(store, calls).await;
        bench.sample(calls).await;
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            samples.push(bench.sample(calls).await);
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        [at(0.5), at(0.1), at(0.9)]
    })
}

fn report(label: &str, [median, p10, p90]: [f64; 3], runs: usize) -> f64 {
    println!(
        "{label:<22} median {median:>8.3} µs/call   (p10 {p10:.3}, p90 {p90:.3}; {runs} runs)"
    );
    median
}

/// `--instr <workload> <n>`: one parent run of `n` delegated calls in a
/// fresh session, nothing else, for valgrind.
fn instr(rt: &tokio::runtime::Runtime, workload: &str, n: u64) {
    let store = Store::parse(workload).unwrap_or_else(|| {
        panic!("--instr: unknown workload `{workload}` (delegate, session, session-sqlite)")
    });
    rt.block_on(async {
        let bench = Bench::new(store, n).await;
        let scope = (store != Store::None).then(|| bench.fresh_session());
        bench.run(scope.as_ref(), n).await;
    });
    println!("instr {workload} {n}: {n} delegated calls");
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--instr") {
        let workload = args.get(at + 1).map_or("", String::as_str);
        let n = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("usage: delegation --instr <workload> <n>"));
        instr(&rt, workload, n);
        return;
    }
    println!("delegated calls, scripted parent and child; current-thread runtime");
    let baseline = report("delegate 400", measure(&rt, Store::None, 400, 20), 20);
    let mut ratios = Vec::new();
    for (store, name, runs) in [
        (Store::Memory, "session", [60, 15]),
        (Store::Sqlite, "session-sqlite", [20, 5]),
    ] {
        let small = report(
            &format!("{name} 50"),
            measure(&rt, store, 50, runs[0]),
            runs[0],
        );
        let large = report(
            &format!("{name} 400"),
            measure(&rt, store, 400, runs[1]),
            runs[1],
        );
        ratios.push((name, small, large));
    }
    println!(
        "fsync (64 B + fsync)   median {:>8.3} µs (the SQLite workloads commit once a call)",
        fsync_median()
    );
    println!();
    for (name, small, large) in ratios {
        let ratio = large / small;
        println!(
            "ratio {name} 400 / 50{:<pad$}{ratio:.2}  (target <= 1.30: {})",
            "",
            if ratio <= 1.3 { "pass" } else { "MISS" },
            pad = 20 - name.len(),
        );
        println!(
            "{name} 50 / delegate{:<pad$}{:.2}",
            "",
            small / baseline,
            pad = 18 - name.len(),
        );
    }
}
