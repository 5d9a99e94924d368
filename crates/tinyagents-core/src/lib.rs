//! Core types of tinyagents.
//!
//! This crate holds what every other crate of the framework speaks: ids
//! ([`RunId`], [`CallId`], …), tool calls and results, transcript messages,
//! events, the error type, run limits, the shared budget ([`LimitTracker`]),
//! the tree's tokens and money ([`Spend`], [`PriceTable`]),
//! the context every hook reads ([`RunContext`], [`State`]) and the
//! [`ChatModel`] seam.
//!
//! It is not the agent loop (that is `tinyagents-harness`), nor a tool
//! registry (`tinytools`), nor a model provider (`tinyagents-models`). It
//! has no async runtime of its own.

mod backoff;
mod call;
mod context;
mod depth;
mod error;
mod event;
mod extensions;
mod hash;
pub mod hex;
mod ids;
mod key;
mod limits;
mod message;
mod model;
mod price;
mod source;
mod spend;
mod sync;
mod tracker;

pub use backoff::exponential_backoff;
pub use call::{ModelToolCall, ToolCall, ToolControl, ToolReplay, ToolResult};
pub use context::{PayloadCapture, RunContext, State};
pub use depth::{MAX_ARGUMENT_DEPTH, nesting, nests_deeper_than, text_nesting};
pub use error::TinyAgentsError;
pub use event::{AgentEvent, RunStatus};
pub use extensions::{Approvals, Extensions};
pub use hash::{args_hash, canonical_json};
pub use ids::{AgentId, CallId, RunId, SessionId};
pub use key::IdempotencyKey;
pub use limits::{LimitBehavior, LimitKind, RunLimits, Usage};
pub use message::Message;
pub use model::{
    ChatModel, ChatRequest, ChatResponse, DeltaSink, ModelDelta, ModelError, ModelOptions,
    OutputSchema, ToolDefinition, shared_model,
};
pub use price::{Cost, ModelPrice, PriceError, PriceTable, Rate};
pub use source::{ErrorSource, error_chain};
pub use spend::{Reservation, RunSpend, Spend, SpendCaps, Spent};
pub use tracker::{BudgetCounts, LimitTracker};

/// Re-exported so tools and models can share the cancellation token type.
pub use tokio_util::sync::CancellationToken;
