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
#![allow(clippy::print_stdout, missing_docs)] // a benchmark prints its figures

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tinyagents_core::{
    ChatResponse, ModelToolCall, RunLimits, TinyAgentsError, ToolCall, ToolResult,
};
use tinyagents_harness::{AgentHarness, ToolExecutionContext};
use tinyagents_middleware::{Middleware, Next, ToolCallContext, ToolMiddleware};
use tinyagents_models::ScriptedModel;
use tinytools::FnTool;

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
        call: ToolCall,
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
    let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
        anyhow::Ok((args.a + args.b).to_string())
    })
    .map_spec(tinytools::ToolSpec::read_only);
    let fanout = Fanout {
        spec: tinytools::ToolSpec::new("fanout", "Calls add n times.", json!({"type": "object"})),
    };
    let limits = RunLimits::default()
        .with_max_tool_calls(n + 1)
        .with_max_nested_depth(1);
    AgentHarness::builder(Arc::new(model))
        .limits(limits)
        .tool(add)
        .and_then(|b| b.tool(fanout))
        .and_then(|b| b.build())
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
    let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
        anyhow::Ok((args.a + args.b).to_string())
    })
    .map_spec(tinytools::ToolSpec::read_only);
    let limits = RunLimits::default()
        .with_max_model_calls(calls + 2)
        .with_max_tool_calls(calls)
        .with_max_parallel_calls(calls);
    let mut builder = AgentHarness::builder(Arc::new(model)).limits(limits);
    if stack {
        for _ in 0..5 {
            builder = builder
                .middleware(Arc::new(PassThrough))
                .tool_middleware(Arc::new(PassThrough));
        }
    }
    builder
        .tool(add)
        .and_then(|b| b.build())
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

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
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
}
