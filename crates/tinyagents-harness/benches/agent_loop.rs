//! Per-call overhead of the agent loop on a scripted model with a trivial
//! `add(a, b)` tool. Plain timing (medians over many runs), no framework:
//! the figures we publish are ratios between these workloads.
//!
//! - `seq N`: one tool call per turn for N turns, then an answer.
//! - `par N`: N calls in one turn, then an answer.
//! - `stack`: `seq 400` with 5 pass-through lifecycle middlewares and 5
//!   pass-through wraps.
//! - `nested N`: one model-issued call whose tool makes N nested `add`
//!   calls through `ToolExecutionContext::call_tool`, one after another.
//! - `seq N + memory ledger`, `seq N + SQLite ledger`: `seq N` with an
//!   effect ledger (a started and a settled row per call, a checkpoint per
//!   turn); the SQLite file is on the real disk, and its figure is compared
//!   with the time of one `fdatasync` of a small write there. `seq 400 +
//!   SQLite, durable` has its tool settle durably (`durable_settle`: the
//!   settled row committed before the result is folded).
//!
//! `agent_loop --instr <workload> <n>` runs one workload of `n` calls once,
//! without warm-up or timing, for `cargo xtask bench --instructions` to run
//! under valgrind. Its workloads: `seq`, `par`, `nested`, `stack`,
//! `seq-ledger`, `seq-sqlite` (as above) and `floor`: `n` times, build `{"a": i, "b": 2}`, validate it
//! against the add tool's compiled schema (`jsonschema`'s `is_valid`),
//! `serde_json::from_value` it into the typed arguments and await the async
//! add: the work a call cannot avoid. `floor-registry` is the same with the
//! registry's `RegisteredTool::validate` (what the loop calls) as the check.
//! `parked` is a memory workload: `n` runs of a harness whose model never
//! answers (the add tool registered, default limits), each boxed and polled
//! once so it waits inside the model call, then kept (never dropped) until
//! the process exits; valgrind's "in use at exit" is what they hold. It
//! also prints the size of one run's future (`size_of_val`, unboxed).
#![allow(clippy::print_stdout, missing_docs)] // a benchmark prints its figures

#[path = "support/ledgered.rs"]
mod ledgered;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;
use tinyagents_core::{
    ChatModel, ChatRequest, ChatResponse, Cost, ModelError, ModelPrice, ModelToolCall, PriceTable,
    Rate, RunLimits, TinyAgentsError, ToolCall, ToolResult,
};
use tinyagents_harness::{AgentHarness, ToolExecutionContext};
use tinyagents_ledger::EffectLedger;
use tinyagents_middleware::{Middleware, Next, ToolCallContext, ToolMiddleware};
use tinyagents_models::ScriptedModel;
use tinytools::FnTool;

use ledgered::LedgerKind;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

struct PassThrough;

#[async_trait::async_trait]
impl Middleware for PassThrough {
    fn name(&self) -> &str {
        "pass-through"
    }
}

#[async_trait::async_trait]
impl ToolMiddleware for PassThrough {
    fn name(&self) -> &str {
        "pass-through"
    }
    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        next.run(ctx, call).await
    }
}

/// A tool that makes `n` nested `add` calls.
struct Fanout {
    spec: tinytools::ToolSpec,
}

#[async_trait::async_trait]
impl tinytools::Tool for Fanout {
    fn spec(&self) -> &tinytools::ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: serde_json::Value,
        _opts: tinytools::ToolCallOptions,
        context: Option<&tinytools::ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let harness = context
            .and_then(tinytools::ToolRunContext::host_extension)
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .ok_or_else(|| anyhow::anyhow!("no harness"))?;
        let n = args["n"].as_u64().unwrap_or(0);
        for i in 0..n {
            harness.call_tool("add", json!({"a": i, "b": 1})).await?;
        }
        Ok(ToolResult::text("fanned out"))
    }
}

fn nested_harness(n: u32) -> AgentHarness {
    let model = ScriptedModel::from_fn(move |request| {
        Ok(if request.messages.len() == 1 {
            ChatResponse::tool_calls(vec![ModelToolCall::new(None, "fanout", json!({"n": n}))])
        } else {
            ChatResponse::text("done")
        })
    });
    let fanout = Fanout {
        spec: tinytools::ToolSpec::new("fanout", "Calls add n times.", json!({"type": "object"})),
    };
    let limits = RunLimits::default()
        .with_max_tool_calls(n + 1)
        .with_max_nested_depth(1);
    AgentHarness::builder(Arc::new(model))
        .limits(limits)
        .tool(add_tool())
        .tool(fanout)
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"))
}

/// A model that calls `add` once per turn for `turns` turns, then answers.
fn sequential_model(turns: usize) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        // Transcript: user, then (assistant, tool) per turn: O(1) to count.
        let done = (request.messages.len() - 1) / 2;
        Ok(if done < turns {
            ChatResponse::tool_calls(vec![ModelToolCall::new(
                None,
                "add",
                json!({"a": done, "b": 1}),
            )])
        } else {
            ChatResponse::text("done")
        })
    })
}

/// A model that issues `calls` calls in its first turn, then answers.
fn parallel_model(calls: usize) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        Ok(if request.messages.len() == 1 {
            ChatResponse::tool_calls(
                (0..calls)
                    .map(|i| ModelToolCall::new(None, "add", json!({"a": i, "b": 1})))
                    .collect(),
            )
        } else {
            ChatResponse::text("done")
        })
    })
}

fn harness(model: ScriptedModel, calls: u32, stack: bool) -> AgentHarness {
    harness_with(model, calls, stack, None)
}

/// `seq N` under a token and a money cap (never reached), its model
/// priced: every model call estimates its prompt (the default estimate),
/// reserves its worst case on the run's node and settles it (issue 33).
fn budgeted_harness(calls: u32) -> AgentHarness {
    let model = sequential_model(calls as usize);
    let prices = PriceTable::new("USD").with_model(
        model.name(),
        ModelPrice {
            input: Rate::per_million_units(250),
            output: Rate::per_million_units(1_000),
            cached_input: None,
        },
    );
    let limits = RunLimits::default()
        .with_max_model_calls(calls + 2)
        .with_max_tool_calls(calls)
        .with_max_parallel_calls(calls)
        .with_max_tokens(u64::MAX / 2)
        .with_max_cost(Cost::from_units(1_000_000_000));
    AgentHarness::builder(Arc::new(model))
        .limits(limits)
        .prices(prices)
        .tool(add_tool())
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"))
}

/// `seq N` over `ledger`.
fn ledgered_harness(calls: u32, ledger: Arc<dyn EffectLedger>) -> AgentHarness {
    harness_with(sequential_model(calls as usize), calls, false, Some(ledger))
}

/// `seq N` over `ledger`, its add tool settling durably
/// (`ToolSpec::durable_settle`: one more commit per call).
fn durable_harness(calls: u32, ledger: Arc<dyn EffectLedger>) -> AgentHarness {
    let limits = RunLimits::default()
        .with_max_model_calls(calls + 2)
        .with_max_tool_calls(calls);
    let add = FnTool::new("add", "Adds two integers.", add)
        .map_spec(|spec| spec.read_only().durable_settle());
    AgentHarness::builder(Arc::new(sequential_model(calls as usize)))
        .limits(limits)
        .ledger(ledger)
        .tool(add)
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"))
}

fn harness_with(
    model: ScriptedModel,
    calls: u32,
    stack: bool,
    ledger: Option<Arc<dyn EffectLedger>>,
) -> AgentHarness {
    let limits = RunLimits::default()
        .with_max_model_calls(calls + 2)
        .with_max_tool_calls(calls)
        .with_max_parallel_calls(calls);
    let mut builder = AgentHarness::builder(Arc::new(model)).limits(limits);
    if let Some(ledger) = ledger {
        builder = builder.ledger(ledger);
    }
    if stack {
        for _ in 0..5 {
            builder = builder
                .middleware(Arc::new(PassThrough))
                .tool_middleware(Arc::new(PassThrough));
        }
    }
    builder
        .tool(add_tool())
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"))
}

/// Median, 10th and 90th percentile of µs per call over `runs` runs.
fn measure(
    rt: &tokio::runtime::Runtime,
    harness: &AgentHarness,
    calls: usize,
    runs: usize,
) -> (f64, f64, f64) {
    for _ in 0..3 {
        let run = rt
            .block_on(harness.run("go"))
            .unwrap_or_else(|e| panic!("warm-up run: {e}"));
        assert_eq!(
            (run.budget.tool_calls + run.budget.nested_tool_calls) as usize,
            calls
        );
    }
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let run = rt
                .block_on(harness.run("go"))
                .unwrap_or_else(|e| panic!("run: {e}"));
            let elapsed = start.elapsed();
            assert_eq!(
                (run.budget.tool_calls + run.budget.nested_tool_calls) as usize,
                calls
            );
            elapsed.as_secs_f64() * 1e6 / calls as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}

fn report(label: &str, (median, p10, p90): (f64, f64, f64), runs: usize) -> f64 {
    println!(
        "{label:<28} median {median:>7.3} µs/call   (p10 {p10:.3}, p90 {p90:.3}; {runs} runs)"
    );
    median
}

/// The async add every workload's tool runs.
async fn add(args: Add) -> anyhow::Result<String> {
    anyhow::Ok((args.a + args.b).to_string())
}

/// The read-only `add(a, b)` tool of every workload.
fn add_tool() -> impl tinytools::Tool {
    FnTool::new("add", "Adds two integers.", add).map_spec(tinytools::ToolSpec::read_only)
}

/// The floor: the per-call work no harness can avoid, `n` times: build the
/// arguments, check them against the add tool's schema (compiled once),
/// parse them into the typed arguments, await the add. With `registry`,
/// the check is `RegisteredTool::validate`, the registry's own (which the
/// loop uses); without, `jsonschema`'s `is_valid`, the cheapest check.
async fn floor(n: usize, registry: bool) {
    let mut tools = tinytools::ToolRegistry::new();
    tools
        .register(Arc::new(add_tool()))
        .unwrap_or_else(|e| panic!("floor registry: {e}"));
    let entry = tools
        .get("add")
        .unwrap_or_else(|| panic!("floor registry: no add"));
    let validator = jsonschema::validator_for(&entry.spec().parameters)
        .unwrap_or_else(|e| panic!("floor schema: {e}"));
    let mut total = 0usize;
    for i in 0..n {
        let args = std::hint::black_box(json!({"a": i, "b": 2}));
        if registry {
            entry
                .validate(&args)
                .unwrap_or_else(|e| panic!("floor validate: {e}"));
        } else {
            assert!(validator.is_valid(&args), "floor validate");
        }
        let typed: Add = serde_json::from_value(args).unwrap_or_else(|e| panic!("floor args: {e}"));
        let sum = add(typed)
            .await
            .unwrap_or_else(|e| panic!("floor add: {e}"));
        total += std::hint::black_box(sum).len();
    }
    assert!(total >= n);
}

/// A model that never answers: its calls wait forever (and are counted).
#[derive(Default)]
struct Silent {
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ChatModel for Silent {
    fn name(&self) -> &str {
        "silent"
    }

    async fn chat(&self, _request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        std::future::pending().await
    }
}

/// `n` idle runs: each run future is boxed, polled once (it then waits in
/// the silent model's call) and forgotten, so what it holds stays on the
/// heap until the process exits; the harness is never dropped either.
/// Prints the size of one unboxed run future, then exits without running
/// any destructor (valgrind's heap summary still prints at exit).
fn parked(rt: &tokio::runtime::Runtime, n: usize) -> ! {
    let model = Arc::new(Silent::default());
    let h = AgentHarness::builder(Arc::clone(&model) as Arc<dyn ChatModel>)
        .tool(add_tool())
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"));
    let future_size = std::mem::size_of_val(&h.run("go"));
    rt.block_on(async {
        for _ in 0..n {
            let mut run = Box::pin(h.run("go"));
            assert!(
                futures_util::poll!(run.as_mut()).is_pending(),
                "parked: a run ended without its model"
            );
            std::mem::forget(run);
        }
    });
    let waiting = model.calls.load(Ordering::Relaxed);
    assert_eq!(waiting, n, "parked {n}: runs waiting in the model call");
    println!(
        "instr parked {n}: {waiting} runs parked in the model call; future size {future_size} bytes"
    );
    std::process::exit(0)
}

/// `--instr <workload> <n>`: one run of one workload, nothing else, for
/// valgrind. The harness is built before the run and the run is not
/// repeated: the caller subtracts two sizes, so set-up cancels out.
fn instr(rt: &tokio::runtime::Runtime, workload: &str, n: usize) {
    let calls = u32::try_from(n).unwrap_or_else(|_| panic!("--instr: n too large"));
    let (h, expected) = match workload {
        "floor" | "floor-registry" => {
            rt.block_on(floor(n, workload == "floor-registry"));
            println!("instr {workload} {n}");
            return;
        }
        "parked" => parked(rt, n),
        "seq" => (harness(sequential_model(n), calls, false), n),
        "stack" => (harness(sequential_model(n), calls, true), n),
        "par" => (harness(parallel_model(n), calls, false), n),
        "nested" => (nested_harness(calls), n + 1),
        "seq-budget" => (budgeted_harness(calls), n),
        "seq-ledger" => (
            ledgered_harness(calls, ledgered::open(rt, LedgerKind::Memory)),
            n,
        ),
        "seq-sqlite-durable" => (
            durable_harness(calls, ledgered::open(rt, LedgerKind::Sqlite)),
            n,
        ),
        "seq-sqlite" => (
            ledgered_harness(calls, ledgered::open(rt, LedgerKind::Sqlite)),
            n,
        ),
        other => panic!(
            "--instr: unknown workload `{other}` (floor, floor-registry, seq, seq-budget, stack, \
             par, nested, seq-ledger, seq-sqlite, seq-sqlite-durable, parked)"
        ),
    };
    let run = rt
        .block_on(h.run("go"))
        .unwrap_or_else(|e| panic!("run: {e}"));
    let made = (run.budget.tool_calls + run.budget.nested_tool_calls) as usize;
    assert_eq!(made, expected, "{workload} {n}: calls made");
    println!("instr {workload} {n}: {made} calls");
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
            .unwrap_or_else(|| panic!("usage: agent_loop --instr <workload> <n>"));
        instr(&rt, workload, n);
        return;
    }
    println!("agent loop, scripted model, add(a, b); current-thread runtime");
    let mut seq = Vec::new();
    for (n, runs) in [(50usize, 400usize), (400, 60), (2000, 15)] {
        let h = harness(sequential_model(n), n as u32, false);
        seq.push((
            n,
            report(&format!("seq {n}"), measure(&rt, &h, n, runs), runs),
        ));
    }
    let h = harness(parallel_model(1000), 1000, false);
    let par = report("par 1000", measure(&rt, &h, 1000, 40), 40);
    let h = harness(sequential_model(400), 400, true);
    let stacked = report("seq 400 + 10 middlewares", measure(&rt, &h, 400, 60), 60);
    let h = nested_harness(1000);
    let nested = report("nested 1000 (per call)", measure(&rt, &h, 1001, 40), 40);
    let seq50 = seq[0].1;
    let seq400 = seq[1].1;
    let seq2000 = seq[2].1;
    println!();
    println!(
        "ratio seq 2000 / seq 50      {:.2}  (target <= 1.30)",
        seq2000 / seq50
    );
    println!(
        "middleware stack adds       {:.3} µs/call  (target <= 1.000)",
        stacked - seq400
    );
    println!("nested call                 {nested:.3} µs/call  (target <= 2.000)");
    println!(
        "nested / model-issued       {:.2}  (vs par 1000), {:.2} (vs seq 400)",
        nested / par,
        nested / seq400
    );
    println!(
        "worst per-call cost         {:.3} µs/call  (target <= 3.000)",
        seq50.max(seq2000).max(par)
    );
    println!();
    ledgered_workloads(&rt, &seq);
}

/// `seq 50 / 400 / 2000` with each ledger, against the plain `seq` figures
/// and (SQLite) the disk's fsync time.
fn ledgered_workloads(rt: &tokio::runtime::Runtime, plain: &[(usize, f64)]) {
    let (fsync, p10, p90) = ledgered::fsync_micros(300);
    println!(
        "fdatasync of 200 bytes      median {fsync:>7.3} µs       (p10 {p10:.3}, p90 {p90:.3}; 300 writes)"
    );
    for (kind, label, sizes) in [
        (
            LedgerKind::Memory,
            "memory ledger",
            [(50usize, 200usize), (400, 30), (2000, 8)],
        ),
        (
            LedgerKind::Sqlite,
            "SQLite ledger",
            [(50, 20), (400, 4), (2000, 2)],
        ),
    ] {
        let mut figures = Vec::new();
        for (n, runs) in sizes {
            let h = ledgered_harness(n as u32, ledgered::open(rt, kind));
            let median = report(
                &format!("seq {n} + {label}"),
                measure(rt, &h, n, runs),
                runs,
            );
            figures.push((n, median));
        }
        let (first, last) = (figures[0].1, figures[figures.len() - 1].1);
        println!(
            "  ratio {} 2000 / 50   {:.2}  (target <= 1.30)",
            kind.workload(),
            last / first
        );
        if kind == LedgerKind::Sqlite {
            let h = durable_harness(400, ledgered::open(rt, kind));
            let durable = report("seq 400 + SQLite, durable", measure(rt, &h, 400, 4), 4);
            let (_, plain400) = figures[1];
            println!(
                "  a durable settle adds      {:.3} µs/call  ({:.2} x the fsync time)",
                durable - plain400,
                (durable - plain400) / fsync
            );
        }
        for ((n, with), (_, without)) in figures.iter().zip(plain) {
            match kind {
                LedgerKind::Memory => println!(
                    "  memory ledger adds at {n:<5} {:.3} µs/call",
                    with - without
                ),
                LedgerKind::Sqlite => println!(
                    "  SQLite / fsync at {n:<5}     {:.2}  (target <= 1.50)",
                    with / fsync
                ),
            }
        }
    }
}
