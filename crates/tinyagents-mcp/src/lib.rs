//! The Model Context Protocol both ways, on the official Rust SDK (`rmcp`).
//!
//! **Client** ([`McpClient`]): connects to an MCP server over stdio (a child
//! process it starts and always reaps) or Streamable HTTP, lists its tools
//! and offers each as a [`tinytools::Tool`] whose spec carries the server's
//! schema and the flags the policies act on: the cautious ones, loosened by
//! the server's annotations only when the host trusts it ([`Trust`]), and
//! changed per tool by the host. A call of such a tool goes through the
//! harness's one enforced path like any other: policies, gate, budget,
//! ledger rows, timeout, cancellation (sent to the server as
//! `notifications/cancelled`), redaction, and the server's progress
//! notifications become progress events. The tool list follows
//! `notifications/tools/list_changed`, and each tool's definition is
//! pinned: one that changes after the host vetted it is refused until the
//! host accepts it, a new one is not offered until then, and an
//! [`McpLock`] pins definitions across processes.
//!
//! **Server** ([`McpServer`]): serves agents (as agent-as-tool functions
//! taking `query` and optional `conversation`, under the delegated
//! governance of the agent-as-tool rules) and plain tools over stdio or
//! Streamable HTTP. Each MCP call is one run of the server's own harness,
//! with its limits, ledger and policies, in which the MCP client stands
//! where a model would: it issues one call. A call that needs a person's
//! approval is put to a client that can be asked (elicitation), bound to
//! the waiting call and used once; Streamable HTTP checks `Host` and
//! `Origin`.
//!
//! **Budgets across the wire.** A served call's tokens and money belong to
//! the tree of the run that called it, as a delegated agent's do. The
//! result's `_meta` says what the call's run spent ([`SPENT_META`]); a
//! tinyagents client records it on a child of the calling run's node
//! ([`tinyagents_core::Spend::record`]), so the caller's `budget.spent`
//! and `spend_report()` hold it and its caps refuse what follows. When the
//! caller's tree is capped, the request's `_meta` carries what it has left
//! ([`BUDGET_META`]), and the server runs the call under it, so a served
//! agent's model call the caller cannot afford is not made.
//!
//! It is not a transport of its own (rmcp is), an MCP proxy, or a way around
//! the call path: nothing here executes a tool except through a harness.

/// The key of a served call's result `_meta` that names the server's run
/// of the call (its ledger rows and events are the run's); a client maps
/// the server's `_meta` into the result's host-only metadata as
/// `mcp_meta`.
pub const RUN_ID_META: &str = "tinyagents/run_id";

/// The key of a served call's result `_meta` that says what the call's run
/// spent: the tokens and money of the runs it delegated to (a served
/// agent's, at every depth), as a [`Spent`](tinyagents_core::Spent) in
/// JSON (`{"usage": {...}, "cost": "12.5", "model_calls": 1,
/// "unpriced_calls": 0}`, the cost in the currency's smallest unit). The
/// relay's own turns are not model calls and are not in it. A tinyagents
/// client records it on the calling run's tree, under the run
/// [`RUN_ID_META`] names; a value it cannot read is ignored with a warning
/// (the tool's answer is kept).
pub const SPENT_META: &str = "tinyagents/spent";

/// The key of a `tools/call` request's `_meta` that says what the calling
/// run's tree has left, as a [`SpendCaps`](tinyagents_core::SpendCaps) in
/// JSON (`{"max_tokens": 1200, "max_cost": "40"}`; a missing or `null`
/// field leaves that unbounded): for each of tokens and money, the least
/// room over the calling run's node and those above it
/// ([`Spend::left`](tinyagents_core::Spend::left)). A tinyagents client
/// sends it when the tree caps anything; a tinyagents server runs the call
/// under a root capped by it, so its own limits are lowered to it, never
/// raised. Money is in the smallest unit of the caller's currency: the
/// server is taken to price in the same one.
pub const BUDGET_META: &str = "tinyagents/budget";

mod annotations;
mod client;
mod error;
mod server;

pub use annotations::spec_from_annotations;
pub use client::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_REQUEST_TIMEOUT, MCP_LOCK_FORMAT,
    McpClient, McpLock, PinnedTool, RemoteServer, ToolListChange, Trust, UnvettedTool,
};
pub use error::McpError;
pub use rmcp;
pub use server::{DEFAULT_MAX_CONCURRENT_CALLS, HttpServer, McpServer, McpServerBuilder};
