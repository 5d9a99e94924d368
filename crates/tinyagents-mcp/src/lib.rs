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
//! It is not a transport of its own (rmcp is), an MCP proxy, or a way around
//! the call path: nothing here executes a tool except through a harness.

/// The key of a served call's result `_meta` that names the server's run
/// of the call (its ledger rows and events are the run's); a client maps
/// the server's `_meta` into the result's host-only metadata as
/// `mcp_meta`.
pub const RUN_ID_META: &str = "tinyagents/run_id";

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
