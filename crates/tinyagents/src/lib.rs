//! tinyagents: run LLM agents that call tools, where what the tools may do,
//! how much they may spend and what happened when the process died are
//! enforced by the harness, not left to each tool.
//!
//! Every tool call, whether the model issued it, another tool nested it or
//! a delegated agent made it, goes through one path: the policies and the
//! host's gate, the run's budget, the effect ledger's rows, the events.
//!
//! ```
//! use tinyagents::prelude::*;
//!
//! #[json_schema]
//! struct Add {
//!     a: i64,
//!     b: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
//!     anyhow::Ok(args.a + args.b)
//! });
//! let agent = Agent::builder("calculator")
//!     .model(ScriptedModel::new([
//!         ScriptedModel::tool_call("add", serde_json::json!({"a": 2, "b": 3})),
//!         ChatResponse::text("2 + 3 = 5"),
//!     ]))
//!     .instructions("Add what you are asked to add.")
//!     .tool(add)
//!     .build()?;
//! let run = agent.run("What is 2 + 3?").await?;
//! assert_eq!(run.final_text, "2 + 3 = 5");
//! # Ok(())
//! # }
//! ```
//!
//! # What is where
//!
//! The root holds the names almost every program uses; [`prelude`] brings
//! them (and the rest of the common program) into scope. Everything else
//! lives in one module per crate, each a re-export of the crate of the same
//! idea:
//!
//! | module | what it holds |
//! |---|---|
//! | [`core`] | ids, calls, results, messages, events, errors, limits, the shared budget, the tree's tokens and money (`Spend`, `PriceTable`), the `ChatModel` seam |
//! | [`tools`] | the `Tool` trait, specs, the registry, argument preparation, typed tools |
//! | [`middleware`] | lifecycle hooks, the `wrap_tool` onion, the security gate, built-in policies, redaction |
//! | [`ledger`] | the effect ledger: started/settled rows, checkpoints, recovery queries (memory, SQLite) |
//! | [`harness`] | `AgentHarness`, the agent loop: runs, run handles, suspension and resume, recovery |
//! | [`models`] | `ScriptedModel` and the OpenAI-compatible and Anthropic providers |
//! | [`orchestrator`] | `Agent`, agents as tools, definitions, sessions, delegated governance |
//! | [`runs`] | the run store: run records, sealed suspended states, approvals with who and why, leases, history (SQLite; PostgreSQL in `postgres`) |
//! | `mcp` | MCP servers' tools as tools (`McpClient`), agents and tools served over MCP (`McpServer`); feature `mcp` |
//! | `otel` | OpenTelemetry export of the run's GenAI spans over OTLP (`Export`, `layer`); feature `otel` |
//! | `postgres` | the ledger, the session store and the run store on PostgreSQL (`PgDatabase`), and workers that lease runs; feature `postgres` |
//! | `console` | the web console (`Console`): runs, the live call tree, the approval inbox, calls in doubt, sessions, as an axum router; feature `console` |
//!
//! A tool's argument type needs `Deserialize` and `JsonSchema`:
//! [`#[json_schema]`](json_schema) derives both (and `Serialize`) through
//! this crate's re-exports of [`serde`] and [`schemars`], so a program needs
//! only `tinyagents` and `tokio` in its manifest.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `openai` | yes | `models::OpenAiModel`, OpenAI-compatible chat completions over HTTPS (reqwest, rustls) |
//! | `anthropic` | yes | `models::AnthropicModel`, Anthropic's Messages API over HTTPS |
//! | `sqlite` | yes | `ledger::SqliteLedger`, `runs::SqliteRunStore` and, with `orchestrator`, `orchestrator::SqliteSessionStore` (bundled SQLite) |
//! | `orchestrator` | yes | [`Agent`], agents as tools, sessions, definitions (`orchestrator`) |
//! | `mcp` | no | the `mcp` module: MCP both ways, on rmcp (implies `orchestrator`) |
//! | `otel` | no | the `otel` module: OTLP export (HTTP/protobuf, gRPC) of the spans, on opentelemetry 0.33 |
//! | `postgres` | no | the `postgres` module: ledger, sessions and leased runs on PostgreSQL, on tokio-postgres and deadpool-postgres (implies `orchestrator`) |
//! | `console` | no | the `console` module: the web console over the stores, on axum (implies `orchestrator`) |
//!
//! With `default-features = false` the crate is the core, the tools, the
//! middleware, the ledger's memory store and the harness with
//! `ScriptedModel`: no HTTP, no TLS, no SQLite.

#[cfg(feature = "orchestrator")]
#[doc(inline)]
pub use tinyagents_orchestrator::Agent;

#[doc(inline)]
pub use tinyagents_core::{
    AgentEvent, ChatModel, RunLimits, RunStatus, TinyAgentsError, ToolResult,
};
#[doc(inline)]
pub use tinyagents_harness::{AgentHarness, AgentRun, RunHandle, RunRequest};
#[doc(inline)]
pub use tinyagents_models::ScriptedModel;
#[doc(inline)]
pub use tinytools::{FnTool, Tool, ToolSpec};

#[cfg(feature = "console")]
#[doc(inline)]
pub use tinyagents_console as console;
#[doc(inline)]
pub use tinyagents_core as core;
#[doc(inline)]
pub use tinyagents_harness as harness;
#[doc(inline)]
pub use tinyagents_ledger as ledger;
#[cfg(feature = "mcp")]
#[doc(inline)]
pub use tinyagents_mcp as mcp;
#[doc(inline)]
pub use tinyagents_middleware as middleware;
#[doc(inline)]
pub use tinyagents_models as models;
#[cfg(feature = "orchestrator")]
#[doc(inline)]
pub use tinyagents_orchestrator as orchestrator;
#[cfg(feature = "otel")]
#[doc(inline)]
pub use tinyagents_otel as otel;
#[cfg(feature = "postgres")]
#[doc(inline)]
pub use tinyagents_postgres as postgres;
#[doc(inline)]
pub use tinyagents_runs as runs;
#[doc(inline)]
pub use tinytools as tools;

/// The attribute `Tool`, `Middleware`, `SecurityGate` and `ChatModel` impls
/// carry.
pub use async_trait::async_trait;
/// Derives `Deserialize`, `Serialize` and `JsonSchema` through this crate's
/// re-exports (see the crate docs).
pub use tinyagents_macros::json_schema;

/// `anyhow`, whose `Result` tool functions return.
pub use anyhow;
/// `schemars`, the JSON Schema derive tools' argument types use (1.x).
pub use schemars;
/// `serde`.
pub use serde;
/// `serde_json`, for arguments and results.
pub use serde_json;

/// What most programs need: `use tinyagents::prelude::*;`.
pub mod prelude {
    pub use crate::{anyhow, async_trait, json_schema, schemars, serde, serde_json};

    pub use tinyagents_core::{
        AgentEvent, AgentId, CallId, ChatModel, ChatResponse, Cost, IdempotencyKey, LimitBehavior,
        LimitKind, Message, ModelOptions, ModelPrice, PayloadCapture, PriceTable, RunId, RunLimits,
        RunStatus, SpendCaps, Spent, TinyAgentsError, ToolCall, ToolControl, ToolReplay,
        ToolResult, Usage,
    };
    pub use tinyagents_harness::{
        AgentHarness, AgentRun, ApprovalDecision, EventSink, PendingCall, ResumeOptions, RunHandle,
        RunRequest, SealedRun, SuspendedRun, ToolExecutionContext, event_channel,
    };
    #[cfg(feature = "sqlite")]
    pub use tinyagents_ledger::SqliteLedger;
    pub use tinyagents_ledger::{EffectLedger, MemoryLedger};
    #[cfg(feature = "mcp")]
    pub use tinyagents_mcp::{McpClient, McpLock, McpServer, RemoteServer, Trust};
    pub use tinyagents_middleware::{Middleware, SecurityGate, ToolMiddleware, ToolVerdict};
    pub use tinyagents_models::ScriptedModel;
    #[cfg(all(feature = "orchestrator", feature = "sqlite"))]
    pub use tinyagents_orchestrator::SqliteSessionStore;
    #[cfg(feature = "orchestrator")]
    pub use tinyagents_orchestrator::{
        Agent, AgentTool, BuildError, RunError, SessionScope, Typed, child_run_id,
    };
    pub use tinytools::{
        FnTool, Reconciled, SideEffects, Tool, ToolCallOptions, ToolRunContext, ToolSpec,
    };
}
