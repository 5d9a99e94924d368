//! What the MCP client adds to a `tools/call` round trip. Plain timing
//! (medians over many samples), no framework: the figures we publish are
//! the medians and the differences between these workloads.
//!
//! The server is an rmcp `ServerHandler` written here: it lists one tool,
//! `echo` (annotations `readOnlyHint: true`, `openWorldHint: false`), and
//! answers a call of it at once with its `text` argument as a text result.
//! It is served in-process over two `tokio::io::simplex` pipes, one a
//! direction, with the newline-delimited JSON-RPC codec of stdio
//! (`AsyncRwTransport`), so the figures hold the whole protocol work of
//! both sides (serialising, framing, parsing, the services' tasks) and no
//! process scheduling.
//!
//! - `raw`: `Peer::call_tool` on a plain rmcp client (`()` as its
//!   handler): the transport round trip.
//! - `tool`: the same server through `McpClient::connect_stream`, calling
//!   `execute_with_context` of its tool with a run context: the round trip
//!   plus the client's own work (the offered check, the request timeout,
//!   the progress route, the cancel guard, the result mapping). `tool −
//!   raw` is the client's overhead.
//! - `harness mcp N`: one `AgentHarness` run whose scripted model calls the
//!   MCP tool once a turn, `N` times, then answers; per call is the run's
//!   time divided by `N`. `harness local N` is the same run with an
//!   in-process echo tool of the same spec (the MCP tool's, cloned), so
//!   their difference is what going to the MCP server costs a call on the
//!   enforced path.
//! - `concurrent64`: 64 tasks on one connection, each making calls one
//!   after another (64 in flight at any time), on a 2-worker runtime;
//!   calls/s, for `tool` and for `raw`.
//!
//! The sequential workloads run on a current-thread runtime (server,
//! client services and caller on one thread: the work, not the cross-core
//! wake-ups) and again, for `raw` and `tool`, on a 2-worker runtime.
//! The two workloads compared (`raw` and `tool`, `harness mcp` and
//! `harness local`, the two `concurrent64`) are sampled in alternating
//! rounds on connections open side by side, so that a load from outside
//! falls on both alike; the bench prints each one's median, the
//! difference of the medians and the median of the per-round differences.
#![allow(clippy::print_stdout, missing_docs)] // a benchmark prints its figures

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpEntry,
    ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tinyagents_core::{
    CallId, CancellationToken, ChatResponse, Message, ModelToolCall, RunId, RunLimits, RunStatus,
    ToolResult,
};
use tinyagents_harness::AgentHarness;
use tinyagents_mcp::{DEFAULT_MAX_MESSAGE_BYTES, McpClient, RemoteServer, Trust};
use tinyagents_models::ScriptedModel;
use tinytools::{Tool, ToolCallOptions, ToolRunContext, ToolSpec};
use tokio::io::{ReadHalf, SimplexStream, WriteHalf};

/// Sequential calls in one sample.
const CALLS: usize = 200;
/// Samples of a sequential workload (after one warm-up sample).
const SAMPLES: usize = 100;
/// Calls in flight in `concurrent64`, and the calls each task makes.
const TASKS: usize = 64;
const CALLS_PER_TASK: usize = 20;
/// Samples of a concurrent workload.
const CONCURRENT_SAMPLES: usize = 30;
/// The capacity of each in-process pipe.
const PIPE_BYTES: usize = 64 * 1024;
/// What every call echoes.
const TEXT: &str = "hello";

/// The server: one read-only `echo` tool, answered at once.
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tool = McpEntry::new("echo", "Answers with its text.", Arc::new(echo_schema()));
        tool.annotations = Some(ToolAnnotations::new().read_only(true).open_world(false));
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

fn echo_schema() -> JsonObject {
    match json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"]
    }) {
        Value::Object(schema) => schema,
        _ => unreachable!("an object"),
    }
}

/// The arguments of every call, built per call (as a model's are).
fn args() -> Value {
    json!({ "text": TEXT })
}

/// Starts an echo server on the current runtime; the client's ends.
fn serve_echo() -> (ReadHalf<SimplexStream>, WriteHalf<SimplexStream>) {
    let (server_read, client_write) = tokio::io::simplex(PIPE_BYTES);
    let (client_read, server_write) = tokio::io::simplex(PIPE_BYTES);
    tokio::spawn(async move {
        let transport = AsyncRwTransport::new_server(server_read, server_write);
        if let Ok(service) = Echo.serve(transport).await {
            let _ = service.waiting().await;
        }
    });
    (client_read, client_write)
}

/// A plain rmcp client of a fresh echo server, framed as `McpClient`'s.
async fn raw_client() -> RunningService<RoleClient, ()> {
    let (read, write) = serve_echo();
    let transport =
        AsyncRwTransport::new_client(read, write).with_max_line_length(DEFAULT_MAX_MESSAGE_BYTES);
    ().serve(transport)
        .await
        .unwrap_or_else(|e| panic!("raw client: {e}"))
}

/// Our client of a fresh echo server, and its one tool.
async fn mcp_client() -> (McpClient, Arc<dyn Tool>) {
    let (read, write) = serve_echo();
    let server = RemoteServer::stream("bench").trust(Trust::Trusted);
    let client = McpClient::connect_stream(server, read, write)
        .await
        .unwrap_or_else(|e| panic!("McpClient: {e}"));
    let tool = client
        .tools()
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the server lists no tool"));
    assert_eq!(tool.spec().name, "bench_echo");
    (client, tool)
}

/// One raw `tools/call`.
async fn raw_call(peer: &Peer<RoleClient>) {
    let Value::Object(arguments) = args() else {
        unreachable!("an object")
    };
    let result = peer
        .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("raw call: {e}"));
    assert_eq!(result.content.len(), 1);
    std::hint::black_box(result);
}

/// One call of the MCP tool, as the harness makes it.
async fn tool_call(tool: &dyn Tool, context: &ToolRunContext) {
    let result = tool
        .execute_with_context(args(), ToolCallOptions::default(), Some(context))
        .await
        .unwrap_or_else(|e| panic!("tool call: {e}"));
    assert_eq!(result.content, TEXT);
    std::hint::black_box(result);
}

fn context(call: &str) -> ToolRunContext {
    ToolRunContext::new(RunId::new("r"), CallId::new(call), CancellationToken::new())
}

/// Median, 10th and 90th percentile.
fn quantiles(samples: &[f64]) -> [f64; 3] {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    [at(0.5), at(0.1), at(0.9)]
}

/// The samples of one workload: µs per call and calls/s.
#[derive(Default)]
struct Samples {
    wall: Vec<f64>,
    rate: Vec<f64>,
}

impl Samples {
    /// Times one sample: `sample` makes some calls and says how many.
    async fn take(&mut self, sample: &mut impl AsyncFnMut() -> usize) {
        let start = Instant::now();
        let calls = sample().await as f64;
        let elapsed = start.elapsed().as_secs_f64();
        self.wall.push(elapsed * 1e6 / calls);
        self.rate.push(calls / elapsed);
    }
}

/// `rounds` rounds (after a warm-up round) of one sample of `a` and one of
/// `b`, in alternating order, so that whatever else loads the machine
/// loads both alike.
async fn paired(
    rounds: usize,
    mut a: impl AsyncFnMut() -> usize,
    mut b: impl AsyncFnMut() -> usize,
) -> (Samples, Samples) {
    let (mut first, mut second) = (Samples::default(), Samples::default());
    for round in 0..=rounds {
        if round % 2 == 0 {
            first.take(&mut a).await;
            second.take(&mut b).await;
        } else {
            second.take(&mut b).await;
            first.take(&mut a).await;
        }
    }
    for samples in [&mut first, &mut second] {
        for figures in [&mut samples.wall, &mut samples.rate] {
            if !figures.is_empty() {
                figures.remove(0); // the warm-up round
            }
        }
    }
    (first, second)
}

/// `raw` and `tool`: `SAMPLES` rounds of `CALLS` sequential calls each.
fn raw_and_tool(rt: &tokio::runtime::Runtime) -> (Samples, Samples) {
    rt.block_on(async {
        let raw = raw_client().await;
        let peer = raw.peer().clone();
        let (client, tool) = mcp_client().await;
        let context = context("p1");
        let figures = paired(
            SAMPLES,
            async || {
                for _ in 0..CALLS {
                    raw_call(&peer).await;
                }
                CALLS
            },
            async || {
                for _ in 0..CALLS {
                    tool_call(tool.as_ref(), &context).await;
                }
                CALLS
            },
        )
        .await;
        let _ = raw.cancel().await;
        client.close().await;
        figures
    })
}

/// An in-process echo with the MCP tool's spec.
struct LocalEcho {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for LocalEcho {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        _context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        Ok(ToolResult::text(
            args.get("text").and_then(Value::as_str).unwrap_or_default(),
        ))
    }
}

/// A harness whose model calls `bench_echo` once a turn, `calls` times,
/// then answers.
fn harness(tool: Arc<dyn Tool>, calls: usize) -> AgentHarness {
    let model = ScriptedModel::from_fn(move |request| {
        // Transcript: user, then (assistant, tool) per turn: O(1) to count.
        let done = (request.messages.len() - 1) / 2;
        Ok(if done < calls {
            ChatResponse::tool_calls(vec![ModelToolCall::new(None, "bench_echo", args())])
        } else {
            ChatResponse::text("done")
        })
    });
    let calls = u32::try_from(calls).unwrap_or(u32::MAX);
    let limits = RunLimits::default()
        .with_max_model_calls(calls + 2)
        .with_max_tool_calls(calls);
    AgentHarness::builder(Arc::new(model))
        .limits(limits)
        .tools([tool])
        .build()
        .unwrap_or_else(|e| panic!("bench harness: {e}"))
}

/// One run of `harness`, checked: `CALLS` calls, all answered.
async fn run(harness: &AgentHarness) -> usize {
    let run = harness
        .run("go")
        .await
        .unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(run.status, RunStatus::Completed, "{}", run.final_text);
    assert_eq!(run.budget.tool_calls as usize, CALLS);
    let last = run.messages.iter().rev().find_map(|m| match m {
        Message::Tool { content, .. } => Some(content.as_str()),
        _ => None,
    });
    assert_eq!(last, Some(TEXT), "the calls were answered");
    CALLS
}

/// `harness mcp` and `harness local`: `SAMPLES` rounds of one run each.
fn harness_runs(rt: &tokio::runtime::Runtime) -> (Samples, Samples) {
    rt.block_on(async {
        let (client, tool) = mcp_client().await;
        let local: Arc<dyn Tool> = Arc::new(LocalEcho {
            spec: tool.spec().clone(),
        });
        let (mcp, local) = (harness(tool, CALLS), harness(local, CALLS));
        let figures = paired(
            SAMPLES,
            async || run(&mcp).await,
            async || run(&local).await,
        )
        .await;
        client.close().await;
        figures
    })
}

/// `TASKS` tasks making `CALLS_PER_TASK` calls each with `call`; the calls.
async fn fan_out<F>(call: F) -> usize
where
    F: Fn() -> tokio::task::JoinHandle<()>,
{
    let tasks: Vec<_> = (0..TASKS).map(|_| call()).collect();
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("task: {e}"));
    }
    TASKS * CALLS_PER_TASK
}

/// `concurrent64` for `raw` and `tool`, `CONCURRENT_SAMPLES` rounds.
fn concurrent(rt: &tokio::runtime::Runtime) -> (Samples, Samples) {
    rt.block_on(async {
        let raw = raw_client().await;
        let peer = raw.peer().clone();
        let (client, tool) = mcp_client().await;
        let figures = paired(
            CONCURRENT_SAMPLES,
            async || {
                fan_out(|| {
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        for _ in 0..CALLS_PER_TASK {
                            raw_call(&peer).await;
                        }
                    })
                })
                .await
            },
            async || {
                fan_out(|| {
                    let tool = Arc::clone(&tool);
                    tokio::spawn(async move {
                        let context = context("p1");
                        for _ in 0..CALLS_PER_TASK {
                            tool_call(tool.as_ref(), &context).await;
                        }
                    })
                })
                .await
            },
        )
        .await;
        let _ = raw.cancel().await;
        client.close().await;
        figures
    })
}

/// Prints a workload's µs per call; its median.
fn report(label: &str, samples: &Samples) -> f64 {
    let [median, p10, p90] = quantiles(&samples.wall);
    println!(
        "{label:<28} median {median:>8.3} µs/call   (p10 {p10:.3}, p90 {p90:.3}; {} samples)",
        samples.wall.len()
    );
    median
}

/// Prints a workload's calls/s; its median.
fn report_rate(label: &str, samples: &Samples) -> f64 {
    let [median, p10, p90] = quantiles(&samples.rate);
    println!(
        "{label:<28} median {median:>8.0} calls/s   (p10 {p10:.0}, p90 {p90:.0}; {} samples)",
        samples.rate.len()
    );
    median
}

/// The median of the per-round differences `b − a` (µs per call).
fn paired_difference(a: &[f64], b: &[f64]) -> f64 {
    let differences: Vec<f64> = a.iter().zip(b).map(|(a, b)| b - a).collect();
    quantiles(&differences)[0]
}

fn main() {
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let workers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));

    println!(
        "MCP tools/call to an in-process echo server over newline-delimited JSON-RPC pipes; \
         a sample is {CALLS} sequential calls (a harness sample: one run of {CALLS} calls)"
    );
    println!("current-thread runtime:");
    let (raw, tool) = raw_and_tool(&current);
    let raw_median = report("raw (rmcp Peer::call_tool)", &raw);
    let tool_median = report("tool (McpTool execute)", &tool);
    let (mcp, local) = harness_runs(&current);
    let mcp_median = report(&format!("harness mcp {CALLS}"), &mcp);
    let local_median = report(&format!("harness local {CALLS}"), &local);
    println!("2-worker runtime:");
    let (raw2, tool2) = raw_and_tool(&workers);
    let raw2_median = report("raw (rmcp Peer::call_tool)", &raw2);
    let tool2_median = report("tool (McpTool execute)", &tool2);
    println!(
        "2-worker runtime, {TASKS} calls in flight on one connection \
         ({TASKS} tasks x {CALLS_PER_TASK} calls a sample):"
    );
    let (raw64, tool64) = concurrent(&workers);
    let raw64 = report_rate("concurrent64 raw", &raw64);
    let tool64 = report_rate("concurrent64 tool", &tool64);
    println!();
    let overhead = tool_median - raw_median;
    println!(
        "tool − raw = {overhead:.3} µs (target ≤ 10 µs: {}); median of the paired \
         differences {:.3} µs; 2 workers {:.3} µs",
        if overhead <= 10.0 { "pass" } else { "MISS" },
        paired_difference(&raw.wall, &tool.wall),
        tool2_median - raw2_median,
    );
    println!(
        "harness mcp − harness local = {:.3} µs a call (median of the paired differences {:.3})",
        mcp_median - local_median,
        paired_difference(&local.wall, &mcp.wall),
    );
    println!(
        "concurrent64: tool {tool64:.0} calls/s, raw {raw64:.0} calls/s (tool / raw {:.2})",
        tool64 / raw64
    );
}
