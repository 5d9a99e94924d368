//! The fleet's agent: a coordinator whose answers follow its transcript
//! (so a run recovered in another process goes on where it was), with a
//! `pay` tool that never repeats and records its effect in a table of its
//! own keyed by the call's idempotency key, a replay-safe `lookup`, a
//! `batch` that pays through nested calls, and a `clerk` agent it delegates
//! a payment to. Every harness is built over the worker's fenced ledger.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::postgres::{FactoryError, LeasedRun};
use tinyagents::prelude::*;
use tinyagents::{
    core::ChatRequest, core::ModelError, core::ToolReplay, harness::ToolExecutionContext,
};

/// The effects table: one row per payment (kind `pay`) or lookup.
pub(crate) const EFFECTS_DDL: &str = "CREATE TABLE IF NOT EXISTS fleet_effects (
    key TEXT NOT NULL,
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// Payments a run makes when nothing interrupts it: `p1`, the two of
/// `batch` and the clerk's.
pub(crate) const PAYMENTS_PER_RUN: i64 = 4;

/// Answers by how many assistant turns the transcript holds.
struct ByTurn(&'static [fn() -> ChatResponse]);

#[async_trait]
impl ChatModel for ByTurn {
    fn name(&self) -> &str {
        "by-turn"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let done = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        Ok(self
            .0
            .get(done)
            .map_or_else(|| ChatResponse::text("done"), |turn| turn()))
    }
}

const COORDINATOR: &[fn() -> ChatResponse] = &[
    || {
        ScriptedModel::tool_calls([
            ("lookup", json!({ "to": "a" })),
            ("pay", json!({ "to": "p1" })),
        ])
    },
    || ScriptedModel::tool_call("batch", json!({ "to": ["b1", "b2"] })),
    || ScriptedModel::tool_call("clerk", json!({ "query": "pay c1" })),
];

const CLERK: &[fn() -> ChatResponse] = &[|| ScriptedModel::tool_call("pay", json!({ "to": "c1" }))];

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct To {
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Batch {
    to: Vec<String>,
}

async fn record(url: &str, key: &str, ctx: &ToolRunContext, kind: &str) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    client
        .execute(
            "INSERT INTO fleet_effects (key, run_id, call_id, kind) VALUES ($1, $2, $3, $4)",
            &[&key, &ctx.run_id().as_str(), &ctx.call_id().as_str(), &kind],
        )
        .await?;
    drop(client);
    let _ = driver.await;
    Ok(())
}

fn pay(url: Arc<str>) -> impl Tool {
    FnTool::with_context("pay", "Pays.", move |args: To, ctx: ToolRunContext| {
        let url = Arc::clone(&url);
        async move {
            let key = ctx
                .idempotency_key()
                .map(ToString::to_string)
                .ok_or_else(|| anyhow::anyhow!("no idempotency key"))?;
            tokio::time::sleep(Duration::from_millis(40)).await;
            record(&url, &key, &ctx, "pay").await?;
            tokio::time::sleep(Duration::from_millis(40)).await;
            anyhow::Ok(format!("paid {}", args.to))
        }
    })
    .map_spec(|spec| spec.replay(ToolReplay::Never))
}

fn lookup(url: Arc<str>) -> impl Tool {
    FnTool::with_context(
        "lookup",
        "Looks up.",
        move |args: To, ctx: ToolRunContext| {
            let url = Arc::clone(&url);
            async move {
                let key = ctx
                    .idempotency_key()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(60)).await;
                record(&url, &key, &ctx, "lookup").await?;
                anyhow::Ok(format!("found {}", args.to))
            }
        },
    )
    .map_spec(ToolSpec::read_only)
}

fn batch() -> impl Tool {
    FnTool::with_context(
        "batch",
        "Pays several.",
        |args: Batch, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let mut said = Vec::new();
            for to in &args.to {
                said.push(exec.call_tool("pay", json!({ "to": to })).await?.content);
            }
            anyhow::Ok(said.join(" | "))
        },
    )
    .map_spec(|spec| spec.replay(ToolReplay::Never))
}

/// The harness of a claimed run, over its fenced ledger.
pub(crate) fn harness(url: &Arc<str>, run: &LeasedRun) -> Result<AgentHarness, FactoryError> {
    let clerk = Agent::builder("clerk")
        .model(Arc::new(ByTurn(CLERK)))
        .instructions("You pay what you are asked to.")
        .tool(pay(Arc::clone(url)))
        .ledger(Arc::clone(&run.ledger))
        .build()?;
    let limits = RunLimits::default()
        .with_max_nested_depth(2)
        .with_max_tool_calls(100);
    let mut builder = AgentHarness::builder(Arc::new(ByTurn(COORDINATOR)))
        .ledger(Arc::clone(&run.ledger))
        .limits(limits);
    builder.register(Arc::new(pay(Arc::clone(url))))?;
    builder.register(Arc::new(lookup(Arc::clone(url))))?;
    builder.register(Arc::new(batch()))?;
    builder.register(Arc::new(clerk.as_tool("clerk", "Pays for you.")))?;
    Ok(builder.build()?)
}
