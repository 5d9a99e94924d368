//! Agents exposed to other agents as tools.
//!
//! A host describes its agents as [`AgentDefinition`]s. An
//! [`AgentOrchestrator`] builds the agent a user asked for
//! ([`AgentOrchestrator::get_or_create_agent`]) together with the exposed
//! agents it may call, each as a [`BuiltAgent`] running on its own
//! `AgentHarness`. An agent that lists an exposed agent in its
//! `agent_tool_ids` gets a function for it ([`AgentAsTool`], made by an
//! [`AgentAsToolProvider`]): calling the function starts a separate run of
//! the called agent, in the restricted delegated shape (its own model,
//! instruction, tools, policies, workspaces and compaction; no memory,
//! skills or other active-only context; no tools that need approval; the
//! caller's air gap, tightened by its own).
//!
//! Around that:
//! - names and the save-time collision check ([`normalize_function_name`],
//!   [`AgentCatalog`]);
//! - child sessions per (parent session, child agent, conversation name),
//!   saved only after a successful call, in a [`SessionStore`] (in memory
//!   or SQLite), readable by the host as plain text ([`ChatTurn`]); a call
//!   appends what it added to the conversation, so its cost does not grow
//!   with the conversation's length (but for the run's own copy of its
//!   history);
//! - governance every built agent carries: 40 model calls and 3
//!   consecutive failing iterations per request ([`FunctionLoopCaps`]),
//!   detailed tool errors kept from the model, host middleware installed
//!   on every agent and seeing its identity;
//! - the build cache of exposed agents, with [`AgentOrchestrator::evict`]
//!   and [`AgentOrchestrator::invalidate`];
//! - additions of tinyagents (`docs/rules.md`, AT-31 and AT-32):
//!   `RunLimits::max_depth` caps chains of agents at run time, child
//!   events reach the caller's stream, child run ids name their calling
//!   call ([`child_run_id`]), an opt-in tree-wide budget and an opt-in
//!   parallel delegation.
//!
//! It is not the agent loop (`tinyagents-harness`), a model provider
//! (`tinyagents-models`), or a store of definitions a host must use: any
//! list of definitions visible to the user will do. The guide is
//! `docs/agent-as-tool.md`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod agent;
mod build;
mod catalog;
mod code;
mod collection;
mod compaction;
mod context;
mod definition;
mod error;
mod governance;
mod history;
mod model_factory;
mod names;
mod orchestrator;
mod provider;
mod request;
mod session;
mod session_run;
mod workspace;

pub use agent::{ActiveAgent, AgentRole, BuiltAgent};
pub use catalog::{AgentCatalog, CatalogError, find_collision};
pub use code::{Agent, AgentBuilder, AgentTool, OUTPUT_RETRIES, Typed, output_schema};
pub use collection::{AIAgentCollection, AgentCollection};
pub use compaction::{HistoryReducer, KeepLastMessages};
pub use context::{ContextKind, ContextProvider, ContextProviderFactory, NoContextProviders};
pub use definition::{AgentDefinition, Compaction, ToolPolicy, Viewer, resolve_variables};
pub use error::{AgentToolError, BuildError, RunError};
pub use governance::{
    FunctionLoopCaps, MAX_CONSECUTIVE_ERRORS_PER_REQUEST, MAX_ITERATIONS_PER_REQUEST, OmitReason,
    OmittedTool, trailing_failed_iterations,
};
pub use model_factory::{ModelFactory, ModelRegistry};
pub use names::{MAX_FUNCTION_NAME_LEN, normalize_function_name};
pub use orchestrator::AgentOrchestrator;
pub use provider::{
    AgentAsTool, AgentAsToolProvider, AgentToolOptions, CHILD_RUN_SEPARATOR, child_run_id,
    parent_of_child_run,
};
pub use request::{
    AgentBuildRequest, AgentBuilderCustomizer, BuilderCustomizer, HostTools, OptionsCustomizer,
};
/// The conformance suite every [`SessionStore`] backend passes (feature
/// `conformance`): [`session_conformance::run_all`].
#[cfg(feature = "conformance")]
pub use session::conformance as session_conformance;
pub use session::{
    ChatRole, ChatTurn, INCOGNITO_PROPERTY, InMemorySessionStore, SESSION_FORMAT, SESSION_PROPERTY,
    SessionError, SessionManager, SessionRecord, SessionScope, SessionStamp, SessionStore,
    child_session_id, normalize_conversation, transcript,
};
#[cfg(feature = "sqlite")]
pub use session::{SESSION_APPLICATION_ID, SESSION_SCHEMA_VERSION, SqliteSessionStore};
pub use session_run::SESSION_TURN_PROPERTY;
pub use workspace::{
    DefinitionWorkspaces, WorkspaceReadTool, WorkspaceResolver, WorkspaceWrap,
    resolve_in_workspaces,
};
