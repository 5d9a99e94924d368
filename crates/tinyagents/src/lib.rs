//! tinyagents: run LLM agents that call tools, where what the tools may do,
//! how much they may spend and what happened when the process died are
//! enforced by the harness, not left to each tool.
//!
//! This crate is a facade: it re-exports the framework's crates and
//! documents how they fit together. Depend on it, or pick the crates:
//!
//! | crate | what it holds |
//! |---|---|
//! | [`tinyagents_core`] | ids, calls, results, messages, events, errors, limits, the shared budget, the `ChatModel` seam |
//! | [`tinytools`] | the `Tool` trait, specs, the registry, argument preparation, typed tools |
//! | [`middleware`] | lifecycle hooks, the `wrap_tool` onion, the security gate, built-in policies |
//! | [`ledger`] | the effect ledger: started/settled rows, checkpoints, recovery queries (memory, SQLite) |
//! | [`harness`] | `AgentHarness`: the agent loop |
//! | [`models`] | `ScriptedModel` and real providers |
//! | [`orchestrator`] | agents exposed to agents as tools: definitions, the build walk, child sessions, delegated governance |
//!
//! ```
//! use std::sync::Arc;
//! use tinyagents::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), TinyAgentsError> {
//! let model = ScriptedModel::new([
//!     ScriptedModel::tool_call("add", serde_json::json!({"a": 2, "b": 3})),
//!     ChatResponse::text("2 + 3 = 5"),
//! ]);
//! let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
//!     anyhow::Ok((args.a + args.b).to_string())
//! });
//! let harness = AgentHarness::builder(Arc::new(model)).tool(add)?.build()?;
//! let run = harness.run("What is 2 + 3?").await?;
//! assert_eq!(run.final_text, "2 + 3 = 5");
//! # Ok(())
//! # }
//! ```

#[doc(inline)]
pub use tinyagents_core::*;
#[doc(inline)]
pub use tinyagents_harness::*;
#[doc(inline)]
pub use tinyagents_ledger::{
    CallStatus, Checkpoint, EffectLedger, Found, InDoubt, LedgerError, LedgerFailure, LedgerRow,
    MemoryLedger, Outcome, PruneReport, Resolve, RunState, SqliteLedger, SqliteOptions, StartedRow,
    StoredResult,
};
#[doc(inline)]
pub use tinyagents_middleware::*;
#[doc(inline)]
pub use tinyagents_models::*;
#[doc(inline)]
pub use tinyagents_orchestrator::*;
#[doc(inline)]
pub use tinytools::*;

pub use tinyagents_core;
pub use tinyagents_harness as harness;
pub use tinyagents_ledger as ledger;
pub use tinyagents_middleware as middleware;
pub use tinyagents_models as models;
pub use tinyagents_orchestrator as orchestrator;
pub use tinytools;

/// The attribute `Tool`, `Middleware` and `ChatModel` impls carry.
pub use async_trait::async_trait;

/// What most programs need.
pub mod prelude {
    pub use crate::async_trait;
    pub use tinyagents_core::{
        AgentEvent, CallId, ChatModel, ChatResponse, LimitBehavior, Message, PayloadCapture,
        RunLimits, RunStatus, TinyAgentsError, ToolCall, ToolControl, ToolResult,
    };
    pub use tinyagents_harness::{
        AgentHarness, AgentRun, EventSink, RunHandle, RunRequest, event_channel,
    };
    pub use tinyagents_middleware::{Middleware, SecurityGate, ToolMiddleware, ToolVerdict};
    pub use tinyagents_models::ScriptedModel;
    pub use tinytools::{FnTool, Tool, ToolCallOptions, ToolRunContext, ToolSpec};
}
