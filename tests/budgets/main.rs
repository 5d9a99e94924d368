//! Issue 33: budgets in tokens and money for the whole tree of runs,
//! through the facade.
//!
//! - `tree`: a coordinator and the agents it delegates to (from a
//!   model-issued call, a nested one and a nested-of-nested one) spend
//!   from one budget; the call that would cross `max_cost` is not made,
//!   and what was spent is exact to the smallest unit; concurrent delegated runs never overspend;
//!   a child's smaller share binds it alone;
//! - `durable`: a resumed and a recovered run go on from what they spent,
//!   counted once; a stored state edited to have spent less is refused;
//! - `reports`: usage and cost reach events, the run's report per agent,
//!   and spans; an unpriced model is reported, never guessed, and refused
//!   under `max_cost`.
//!
//! Prices: the model `m` costs 1,000 cents per million input tokens and
//! 2,000 per million output tokens, so an input token is 1,000,000
//! billionths of a cent and an output token 2,000,000. The prompt estimate
//! is fixed by the tests (`prompt_estimator`), so every reservation is
//! known.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod durable;
mod reports;
mod tree;

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    harness::AgentHarnessBuilder, orchestrator::ActiveAgent, orchestrator::AgentBuildRequest,
    orchestrator::AgentDefinition, orchestrator::AgentOrchestrator, orchestrator::BuildError,
    orchestrator::HostTools, orchestrator::InMemorySessionStore, orchestrator::ModelFactory,
    orchestrator::SessionStore,
};

/// The model every test prices.
pub(crate) const MODEL: &str = "m";

/// `m`'s prices, in cents per million tokens.
pub(crate) fn prices() -> PriceTable {
    PriceTable::new("USD").with_model(
        MODEL,
        ModelPrice {
            input: "1000".parse().unwrap(),
            output: "2000".parse().unwrap(),
            cached_input: Some("500".parse().unwrap()),
        },
    )
}

/// `n` billionths of a cent.
pub(crate) fn nanos(n: u64) -> Cost {
    Cost::from_nanos(n)
}

/// What `input` and `output` tokens of `m` cost.
pub(crate) fn cost_of(input: u64, output: u64) -> Cost {
    nanos(input * 1_000_000 + output * 2_000_000)
}

/// A final answer that used `input` and `output` tokens.
pub(crate) fn answer(text: &str, input: u64, output: u64) -> ChatResponse {
    ChatResponse::text(text).with_usage(Usage::new(input, output))
}

/// A tool call that used `input` and `output` tokens.
pub(crate) fn calling(
    tool: &str,
    args: serde_json::Value,
    input: u64,
    output: u64,
) -> ChatResponse {
    ScriptedModel::tool_call(tool, args).with_usage(Usage::new(input, output))
}

/// Model options capping a call's answer at `tokens`.
pub(crate) fn output_cap(tokens: u32) -> ModelOptions {
    ModelOptions {
        max_output_tokens: Some(tokens),
        ..ModelOptions::default()
    }
}

/// A harness on `model` (named `m`), priced, its prompts estimated at 0
/// tokens and its answers capped at `cap` tokens, with `add`.
pub(crate) fn priced(
    model: ScriptedModel,
    cap: u32,
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let builder = AgentHarness::builder(Arc::new(model.named(MODEL)))
        .prices(prices())
        .prompt_estimator(|_| 0)
        .model_options(output_cap(cap))
        .tool(tinyagents_tests::add_tool());
    configure(builder).build().unwrap()
}

/// Where the coordinator's delegation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The coordinator's model calls `Helper`.
    Model,
    /// The coordinator's model calls `hop`, whose tool calls `Helper`
    /// through the harness (a nested call).
    Nested,
    /// `hop` calls `hop`, which calls `Helper` (a nested-of-nested call).
    NestedOfNested,
}

impl Origin {
    /// The coordinator's model call that delegates once from this origin.
    pub(crate) fn delegation(self, input: u64, output: u64) -> ChatResponse {
        match self {
            Origin::Model => calling("Helper", json!({"query": "go"}), input, output),
            Origin::Nested => calling(
                "hop",
                json!({"tool": "Helper", "args": {"query": "go"}}),
                input,
                output,
            ),
            Origin::NestedOfNested => calling(
                "hop",
                json!({"hops": 2, "tool": "Helper", "args": {"query": "go"}}),
                input,
                output,
            ),
        }
    }
}

/// The team: a coordinator (`root`) that may call `helper` (function
/// `Helper`) and `hop`; both on `m`, priced, prompts estimated at 0, the
/// coordinator's answers capped at 10 tokens and the helper's at 50;
/// `limits` for every run, `share` the helper's own caps, and `parallel`
/// lets the coordinator's delegations run at once. Returns the team and
/// the helper's model (to count its calls).
pub(crate) async fn team(
    root_script: Vec<ChatResponse>,
    helper_script: Vec<ChatResponse>,
    limits: RunLimits,
    share: SpendCaps,
    parallel: bool,
) -> (ActiveAgent, Arc<ScriptedModel>) {
    let defs = [
        AgentDefinition {
            model_options: output_cap(10),
            ..AgentDefinition::new("root", "Root")
                .agent_tools(["helper"])
                .tools(["hop"])
        },
        AgentDefinition {
            model_options: output_cap(50),
            ..AgentDefinition::new("helper", "Helper")
                .description("Helps.")
                .tools(["add"])
                .budget(share)
                .exposed()
        },
    ];
    let root_model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new(root_script).named(MODEL));
    let helper_model = Arc::new(ScriptedModel::new(helper_script).named(MODEL));
    let helper: Arc<dyn ChatModel> = helper_model.clone();
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            Ok(if d.id.as_str() == "helper" {
                Arc::clone(&helper)
            } else {
                Arc::clone(&root_model)
            })
        },
    );
    let tools = HostTools::new()
        .with_shared(tinyagents_tests::hop())
        .with_shared(Arc::new(tinyagents_tests::add_tool()));
    let orchestrator =
        AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()) as Arc<dyn SessionStore>)
            .limits(limits.with_max_nested_depth(2))
            .prices(prices())
            .prompt_estimator(|_| 0)
            .parallel_delegation(parallel);
    let request =
        AgentBuildRequest::new("root", defs.into_iter().map(Arc::new), models).tools(tools);
    let root = orchestrator.get_or_create_agent(request).await.unwrap();
    (root, helper_model)
}

/// Runs the team on "go", collecting its events.
pub(crate) async fn run_team(
    root: &ActiveAgent,
) -> (
    Result<AgentRun, tinyagents::orchestrator::RunError>,
    Vec<AgentEvent>,
) {
    let (sink, collected) = tinyagents_tests::collector();
    let result = root.run(RunRequest::new("go"), &sink).await;
    drop(sink);
    (result, collected.await.unwrap())
}
