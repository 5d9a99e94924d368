//! Issue 33 over MCP: a served agent's tokens and money are its caller's
//! tree's. The result's `_meta` says what the served call's run spent
//! (`tinyagents/spent`) and a tinyagents client records it, so the caller's
//! `budget.spent`, `spend_report` and caps hold it; a capped caller sends
//! what its tree has left (`tinyagents/budget`) and the server runs the
//! call under it; `_meta` that cannot be read is ignored with a warning,
//! the answer kept.
//!
//! Prices: the model `m` costs 1,000 cents per million input tokens and
//! 2,000 per million output tokens (an input token is 1,000,000 billionths
//! of a cent, an output token 2,000,000), at the caller and at the server.
//! The caller's reservations are fixed: a prompt estimate of 10 and at
//! most 10 output tokens, 20 tokens a call.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tinyagents::core::{
    AgentId, CallId, Cost, LimitKind, ModelPrice, PriceTable, RunId, RunSpend, Spent, Usage,
};
use tinyagents::mcp::rmcp::ServerHandler;
use tinyagents::mcp::rmcp::ServiceExt;
use tinyagents::mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, ContentBlock,
    ErrorData, ListToolsResult, MetaObject, PaginatedRequestParams, Request, RequestMetaObject,
    ServerCapabilities, ServerConfig, ServerResult, Tool as McpToolEntry,
};
use tinyagents::mcp::rmcp::service::{PeerRequestOptions, RequestContext, RoleServer};
use tinyagents::mcp::{BUDGET_META, McpClient, McpServer, RUN_ID_META, RemoteServer, SPENT_META};
use tinyagents::orchestrator::child_run_id;
use tinyagents::prelude::*;
use tinyagents_tests::call_answer;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

use crate::served::connected;

const MODEL: &str = "m";

fn prices() -> PriceTable {
    PriceTable::new("USD").with_model(
        MODEL,
        ModelPrice {
            input: "1000".parse().unwrap(),
            output: "2000".parse().unwrap(),
            cached_input: None,
        },
    )
}

/// What `input` and `output` tokens of `m` cost.
fn cost_of(input: u64, output: u64) -> Cost {
    Cost::from_nanos(input * 1_000_000 + output * 2_000_000)
}

/// What `calls` model calls of `m` that used `input` and `output` tokens
/// together spent.
fn spent(input: u64, output: u64, calls: u32) -> Spent {
    Spent {
        usage: Usage::new(input, output),
        cost: cost_of(input, output),
        model_calls: calls,
        unpriced_calls: 0,
    }
}

fn answer(text: &str, input: u64, output: u64) -> ChatResponse {
    ChatResponse::text(text).with_usage(Usage::new(input, output))
}

fn calling(tool: &str, input: u64, output: u64) -> ChatResponse {
    ScriptedModel::tool_call(tool, json!({"query": "refund inv-7"}))
        .with_usage(Usage::new(input, output))
}

/// A caller on `m` answering with `responses`, with `client`'s tools,
/// `limits` and fixed reservations (20 tokens a call).
fn caller(
    client: &McpClient,
    responses: Vec<ChatResponse>,
    limits: RunLimits,
) -> (Arc<ScriptedModel>, AgentHarness) {
    let model = Arc::new(ScriptedModel::new(responses).named(MODEL).recording());
    let harness = AgentHarness::builder(Arc::clone(&model))
        .tools(client.tools())
        .prices(prices())
        .prompt_estimator(|_| 10)
        .model_options(ModelOptions {
            max_output_tokens: Some(10),
            ..ModelOptions::default()
        })
        .limits(limits)
        .build()
        .unwrap();
    (model, harness)
}

/// The agent `billing` on `model`, its builder changed by `configure`.
fn billing(
    model: &Arc<ScriptedModel>,
    configure: impl FnOnce(
        tinyagents::orchestrator::AgentBuilder,
    ) -> tinyagents::orchestrator::AgentBuilder,
) -> Agent {
    let builder = Agent::builder("billing")
        .model(Arc::clone(model))
        .instructions("You handle billing.")
        .limits(RunLimits::default());
    configure(builder).build().unwrap()
}

/// A server of `agent`, pricing its model calls; a client of it, whose
/// tool is `served_billing`.
async fn desk(agent: &Agent) -> McpClient {
    let server = McpServer::builder("desk")
        .agent(agent.as_tool("billing", "Billing questions."))
        .prices(prices())
        .build()
        .unwrap();
    connected(&server).await
}

/// Issue 33 (usage "rolled up to the root through … agents served over
/// MCP (the `_meta` of a served result carries it back to a tinyagents
/// client)"): the served agent's usage and cost, priced at the server, are
/// in the caller's `budget.spent` and in its report as a run of its own
/// under the caller, named by the server's run id; the relay's own turns
/// are not model calls.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_agents_usage_and_cost_reach_the_callers_budget_and_report() {
    let served = Arc::new(ScriptedModel::new([answer("refunded", 120, 30)]).named(MODEL));
    let client = desk(&billing(&served, |agent| agent)).await;
    let (_, harness) = caller(
        &client,
        vec![calling("served_billing", 10, 2), answer("done", 20, 3)],
        RunLimits::default(),
    );
    let run = harness.run("refund inv-7").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("refunded".to_owned(), false))
    );

    let served_spent = spent(120, 30, 1);
    let meta = &run.tool_metadata(&CallId::new("p1")).unwrap()["mcp_meta"];
    assert_eq!(
        meta[SPENT_META],
        serde_json::to_value(served_spent).unwrap()
    );
    let remote = RunId::new(meta[RUN_ID_META].as_str().unwrap());

    assert_eq!(run.budget.spent, spent(150, 35, 3));
    assert_eq!(
        run.spend_report(),
        vec![
            RunSpend {
                run_id: run.run_id.clone(),
                agent: None,
                parent: None,
                own: spent(30, 5, 2),
                total: spent(150, 35, 3),
            },
            RunSpend {
                run_id: remote,
                agent: Some(AgentId::new("served_billing")),
                parent: Some(run.run_id.clone()),
                own: served_spent,
                total: served_spent,
            },
        ]
    );
}

/// Issue 33 ("a call that would exceed the remaining budget is not made"):
/// a served agent that reserves little and reports 550 tokens takes the
/// caller's tree past its `max_tokens` of 100, so the caller's next model
/// call is not made: `LimitReached(Tokens)` under `LimitBehavior::Stop`,
/// `LimitExceeded { Tokens, limit: 100, used: 562 }` under the default.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_agents_spend_past_the_callers_max_tokens_refuses_its_next_model_call() {
    let served = Arc::new(
        ScriptedModel::new([answer("refunded", 500, 50), answer("refunded", 500, 50)]).named(MODEL),
    );
    let agent = billing(&served, |agent| {
        agent.model_options(ModelOptions {
            max_output_tokens: Some(1),
            ..ModelOptions::default()
        })
    });
    let client = desk(&agent).await;
    let script = || vec![calling("served_billing", 10, 2), answer("never", 0, 0)];
    let capped = RunLimits::default().with_max_tokens(100);

    let (model, stopping) = caller(
        &client,
        script(),
        capped.clone().with_behavior(LimitBehavior::Stop),
    );
    let run = stopping.run("refund inv-7").await.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::Tokens));
    assert_eq!(model.requests().len(), 1, "the second call was not made");
    // The caller had 88 tokens left, which the served agent's own run
    // passed too: it stopped there, and its call answers so.
    let (text, is_error) = call_answer(&run.messages, "p1").unwrap();
    assert!(is_error, "{text}");
    assert!(text.contains("limit 88, used 550"), "{text}");
    assert_eq!(run.budget.spent, spent(510, 52, 2));
    let meta = &run.tool_metadata(&CallId::new("p1")).unwrap()["mcp_meta"];
    assert_eq!(
        run.spend_report()[1],
        RunSpend {
            run_id: RunId::new(meta[RUN_ID_META].as_str().unwrap()),
            agent: Some(AgentId::new("served_billing")),
            parent: Some(run.run_id.clone()),
            own: spent(500, 50, 1),
            total: spent(500, 50, 1),
        }
    );
    assert_eq!(run.spend_report().len(), 2);

    let (model, failing) = caller(&client, script(), capped);
    let error = failing.run("refund inv-7").await.unwrap_err();
    assert_eq!(
        error,
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::Tokens,
            limit: 100,
            used: 562,
        }
    );
    assert_eq!(model.requests().len(), 1, "the second call was not made");
}

/// Issue 33 (limits "shared by every depth and by delegated agents"): a
/// caller capped at 100 tokens and 1 cent that spent 12 tokens sends what
/// is left; the served agent's first model call (its default reservation,
/// over 4,000 tokens) is refused before it is made, and the call answers
/// exactly as the same agent stopped by its own `max_tokens` of 88 does.
/// Nothing was spent below the caller, which goes on within its budget.
#[tokio::test(flavor = "multi_thread")]
async fn the_budget_left_goes_down_the_wire_and_stops_the_served_agents_model_call_before_it_is_made()
 {
    let served = Arc::new(
        ScriptedModel::new([answer("refunded", 5, 5)])
            .named(MODEL)
            .recording(),
    );
    let client = desk(&billing(&served, |agent| agent)).await;
    let limits = RunLimits::default()
        .with_max_tokens(100)
        .with_max_cost("1".parse().unwrap());
    let (_, harness) = caller(
        &client,
        vec![calling("served_billing", 10, 2), answer("done", 10, 2)],
        limits,
    );
    let run = harness.run("refund inv-7").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert!(served.requests().is_empty(), "the served model was called");
    let (text, is_error) = call_answer(&run.messages, "p1").unwrap();
    assert!(is_error, "{text}");
    assert!(text.contains("limit 88, used 0"), "{text}");
    assert_eq!(run.budget.spent, spent(20, 4, 2));
    assert_eq!(run.spend_report().len(), 1, "{:?}", run.spend_report());

    let own_cap = billing(&Arc::new(ScriptedModel::new([]).named(MODEL)), |agent| {
        agent.limits(RunLimits::default().with_max_tokens(88))
    });
    let uncapped = desk(&own_cap).await;
    let (_, harness) = caller(
        &uncapped,
        vec![calling("served_billing", 10, 2), answer("done", 10, 2)],
        RunLimits::default(),
    );
    let by_its_own_limit = harness.run("refund inv-7").await.unwrap();
    assert_eq!(
        call_answer(&by_its_own_limit.messages, "p1"),
        Some((text, true))
    );
}

/// Issue 33: what goes down the wire is exactly what the caller's tree has
/// left, in tokens and in money (0.05 cents less the 0.014 spent, in the
/// smallest unit), and a caller nothing caps sends no budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_capped_caller_sends_what_its_tree_has_left_and_an_uncapped_one_sends_nothing() {
    let server = Answering::new(Map::new());
    let received = Arc::clone(&server.received);
    let client = server.connect().await;
    let script = || vec![calling("odd_lookup", 10, 2), answer("done", 10, 2)];
    let limits = RunLimits::default()
        .with_max_tokens(100)
        .with_max_cost("0.05".parse().unwrap());
    let (_, capped) = caller(&client, script(), limits);
    assert_eq!(
        capped.run("look").await.unwrap().status,
        RunStatus::Completed
    );
    let (_, free) = caller(&client, script(), RunLimits::default());
    assert_eq!(free.run("look").await.unwrap().status, RunStatus::Completed);
    assert_eq!(
        *received.lock().unwrap(),
        vec![Some(json!({"max_tokens": 88, "max_cost": "0.036"})), None]
    );
}

/// Issue 33: a result whose `tinyagents/spent` is not what a run spent is
/// an answer all the same: kept, with nothing recorded and a warning
/// naming the key and what was wrong.
#[tokio::test]
async fn a_spent_meta_the_client_cannot_read_is_ignored_with_a_warning_and_the_answer_kept() {
    let warnings = Warnings::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let mut meta = Map::new();
    meta.insert(SPENT_META.to_owned(), json!("lots"));
    meta.insert(RUN_ID_META.to_owned(), json!("remote-1"));
    let client = Answering::new(meta).connect().await;
    let (_, harness) = caller(
        &client,
        vec![calling("odd_lookup", 10, 2), answer("done", 10, 2)],
        RunLimits::default().with_max_tokens(100),
    );
    let run = harness.run("look").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("found".to_owned(), false))
    );
    assert_eq!(run.budget.spent, spent(20, 4, 2));
    assert_eq!(run.spend_report().len(), 1, "{:?}", run.spend_report());
    let warned = warnings.texts();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("`tinyagents/spent`") && w.contains("invalid type: string")),
        "{warned:?}"
    );
}

/// Issue 33: a spend whose server names no run (or names it as no string)
/// is recorded all the same, under the calling run's child for the call;
/// a run id that is not a string is warned about.
#[tokio::test]
async fn a_spend_without_a_readable_run_id_is_recorded_under_the_calls_child_run() {
    let warnings = Warnings::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    for run_id in [None, Some(json!(7))] {
        let mut meta = Map::new();
        meta.insert(
            SPENT_META.to_owned(),
            serde_json::to_value(spent(40, 4, 1)).unwrap(),
        );
        if let Some(run_id) = &run_id {
            meta.insert(RUN_ID_META.to_owned(), run_id.clone());
        }
        let client = Answering::new(meta).connect().await;
        let (_, harness) = caller(
            &client,
            vec![calling("odd_lookup", 10, 2), answer("done", 10, 2)],
            RunLimits::default(),
        );
        let run = harness.run("look").await.unwrap();
        assert_eq!(
            call_answer(&run.messages, "p1"),
            Some(("found".to_owned(), false))
        );
        assert_eq!(run.budget.spent, spent(60, 8, 3));
        assert_eq!(
            run.spend_report()[1],
            RunSpend {
                run_id: child_run_id(&run.run_id, &CallId::new("p1")),
                agent: Some(AgentId::new("odd_lookup")),
                parent: Some(run.run_id.clone()),
                own: spent(40, 4, 1),
                total: spent(40, 4, 1),
            }
        );
        let warned = warnings
            .texts()
            .into_iter()
            .filter(|w| w.contains("`tinyagents/run_id`"))
            .count();
        assert_eq!(warned, usize::from(run_id.is_some()), "{run_id:?}");
    }
}

/// Issue 33: a budget the server cannot read does not fail the call: it
/// runs under the server's limits, and the server warns naming the key.
#[tokio::test]
async fn a_budget_the_server_cannot_read_is_ignored_with_a_warning_and_the_call_runs() {
    let warnings = Warnings::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let lookup = FnTool::new("lookup", "Looks up.", |_: Value| async {
        anyhow::Ok("found")
    });
    let server = McpServer::builder("desk").tool(lookup).build().unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(async move {
        server
            .serve_io(read, write, tinyagents::core::CancellationToken::new())
            .await
    });
    let raw = ().serve(client_io).await.unwrap();
    let mut meta = RequestMetaObject::new();
    meta.insert(BUDGET_META.to_owned(), json!("lots"));
    let mut options = PeerRequestOptions::no_options();
    options.meta = Some(meta);
    let request =
        ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("lookup")));
    let handle = raw
        .peer()
        .send_request_with_option(request, options)
        .await
        .unwrap();
    let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
        panic!("not a tool result");
    };
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(
        serde_json::to_value(&result.content).unwrap()[0]["text"],
        "found"
    );
    let meta = result.meta.unwrap();
    assert_eq!(meta.get(SPENT_META), Some(&json!(Spent::default())));
    let warned = warnings.texts();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("`tinyagents/budget`") && w.contains("lookup")),
        "{warned:?}"
    );
}

/// A server of one tool, `lookup`, that answers "found" with `meta` as its
/// result's `_meta` and keeps the budget each call's request carried.
#[derive(Clone)]
struct Answering {
    meta: Map<String, Value>,
    received: Arc<Mutex<Vec<Option<Value>>>>,
}

impl Answering {
    fn new(meta: Map<String, Value>) -> Self {
        Self {
            meta,
            received: Arc::default(),
        }
    }

    /// A client of it over an in-memory stream; its tool is `odd_lookup`.
    async fn connect(self) -> McpClient {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            if let Ok(running) = self.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let (read, write) = tokio::io::split(client_io);
        McpClient::connect_stream(RemoteServer::stream("odd"), read, write)
            .await
            .unwrap()
    }
}

impl ServerHandler for Answering {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"}).as_object().cloned().unwrap();
        Ok(ListToolsResult::with_all_items(vec![McpToolEntry::new(
            "lookup",
            "Looks up.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let budget = context.meta.get(BUDGET_META).cloned();
        self.received.lock().unwrap().push(budget);
        let mut result = CallToolResult::success(vec![ContentBlock::text("found")]);
        result.meta = Some(MetaObject(self.meta.clone()));
        Ok(CallToolResponse::from(result))
    }
}

/// The warnings logged on this thread while it is the default subscriber,
/// each as its fields' text.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn texts(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = Fields::default();
            event.record(&mut text);
            self.0.lock().unwrap().push(text.0);
        }
    }
}

#[derive(Default)]
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}
