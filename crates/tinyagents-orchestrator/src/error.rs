//! The errors of building agents and of delegated calls.

use tinyagents_core::{AgentId, RunStatus, TinyAgentsError};
use tinyagents_harness::SuspendedRun;

use crate::session::SessionError;

/// Why an agent could not be built.
///
/// Its `Debug` is its message, with each problem of
/// [`Invalid`](Self::Invalid) on a line of its own: what `main` prints
/// when it returns the error.
#[derive(Clone, PartialEq, thiserror::Error)]
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
        /// The operating system's error, when one was met (`message`
        /// already says it).
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
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
    /// The definition names an ordinary tool the host does not have (a
    /// typo, or a tool not registered). Allow missing tools on the request
    /// ([`AgentBuildRequest::allow_missing_tools`](crate::AgentBuildRequest::allow_missing_tools))
    /// to omit it instead, reported by a `Warning` event on every run.
    #[error(
        "agent '{agent}' names tool '{tool}', which the host does not have (available: {})",
        list(available)
    )]
    UnknownTool {
        /// The agent.
        agent: AgentId,
        /// The name it gave.
        tool: String,
        /// The host's tools, sorted.
        available: Vec<String>,
    },
    /// An agent built in code was given what does not hold together; every
    /// problem found is listed.
    #[error("agent '{agent}' could not be built: {}", problems.join("; "))]
    Invalid {
        /// The agent.
        agent: AgentId,
        /// What is wrong, one sentence each.
        problems: Vec<String>,
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

impl std::fmt::Debug for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid { agent, problems } => {
                write!(f, "agent '{agent}' could not be built:")?;
                for problem in problems {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
            other => write!(f, "{other}"),
        }
    }
}

/// `names` for a message: comma-separated, or "none".
pub(crate) fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
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

impl From<TinyAgentsError> for RunError {
    fn from(source: TinyAgentsError) -> Self {
        Self::Run { source }
    }
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
    /// A typed run ended without an answer: it waits for approval (resume
    /// it from `suspended`), stopped at a limit, or was cancelled.
    #[error("the run ended {status:?} without an answer")]
    Unanswered {
        /// How it ended.
        status: RunStatus,
        /// Its state, when it waits for approval.
        suspended: Option<Box<SuspendedRun>>,
    },
    /// A typed run's answers never matched the schema.
    #[error("the answer does not match '{schema}' after {attempts} attempts: {problem}")]
    InvalidOutput {
        /// The schema's name.
        schema: String,
        /// Answers read.
        attempts: u32,
        /// What was wrong with the last one.
        problem: String,
    },
    /// The type's schema does not compile.
    #[error("the output schema '{schema}' does not compile: {message}")]
    OutputSchema {
        /// The schema's name.
        schema: String,
        /// The compiler's complaint.
        message: String,
    },
}
