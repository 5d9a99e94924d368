//! The errors of building agents and of delegated calls.

use tinyagents_core::{AgentId, RunStatus, TinyAgentsError};

use crate::session::SessionError;

/// Why an agent could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The requested id is not among the definitions visible to the user.
    #[error("agent '{agent}' is not defined or not visible to this user")]
    NotFound {
        /// The id asked for.
        agent: AgentId,
    },
    /// The definition names a model the factory does not know.
    #[error("agent '{agent}' uses model '{key}', which the model factory does not know")]
    UnknownModel {
        /// The agent.
        agent: AgentId,
        /// The model key.
        key: String,
    },
    /// The model factory failed.
    #[error("the model of agent '{agent}' could not be created: {message}")]
    Model {
        /// The agent.
        agent: AgentId,
        /// What went wrong.
        message: String,
    },
    /// The workspaces of an agent could not be resolved.
    #[error("the workspaces of agent '{agent}' could not be resolved: {message}")]
    Workspace {
        /// The agent.
        agent: AgentId,
        /// What went wrong.
        message: String,
    },
    /// The definition names a reducer the orchestrator does not know.
    #[error("agent '{agent}' uses compaction '{name}', which is not registered")]
    UnknownReducer {
        /// The agent.
        agent: AgentId,
        /// The reducer's name.
        name: String,
    },
    /// Two of an agent's tools would have the same name.
    #[error("agent '{agent}' would have two tools named '{name}' ({first} and {second})")]
    DuplicateToolName {
        /// The agent.
        agent: AgentId,
        /// The name.
        name: String,
        /// What had the name first (a tool name or an agent id).
        first: String,
        /// What asked for it again.
        second: String,
    },
    /// The harness refused the configuration.
    #[error("agent '{agent}' could not be built: {source}")]
    Harness {
        /// The agent.
        agent: AgentId,
        /// The harness's error.
        source: TinyAgentsError,
    },
}

/// Why a delegated call failed. The agent tool raises it (as the tool's
/// `Err`), so the calling run records a failed call, never success text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentToolError {
    /// The child run failed.
    #[error("agent '{agent}' failed: {source}")]
    ChildFailed {
        /// The called agent.
        agent: AgentId,
        /// The child run's error.
        source: TinyAgentsError,
    },
    /// The child run ended without an answer (cancelled, stopped at a
    /// limit, or waiting for an approval that a delegated run cannot get).
    #[error("agent '{agent}' did not answer: its run ended {status:?}")]
    ChildStopped {
        /// The called agent.
        agent: AgentId,
        /// How the child run ended.
        status: RunStatus,
    },
    /// The child session could not be read or written.
    #[error("the session of agent '{agent}' failed: {source}")]
    Session {
        /// The called agent.
        agent: AgentId,
        /// The store's error.
        source: SessionError,
    },
}

/// Why a run of a requested agent failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run failed.
    #[error(transparent)]
    Run {
        /// The harness's error.
        source: TinyAgentsError,
    },
    /// The session could not be read or written.
    #[error("session error: {source}")]
    Session {
        /// The store's error.
        source: SessionError,
    },
}
