//! `Agent::as_tool`: one agent offered to another as a function.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{TinyAgentsError, ToolResult};
use tinytools::{Reconciled, Tool, ToolCallOptions, ToolRunContext, ToolSpec};

use super::Agent;
use super::recipe::{Exposure, Recipe};
use crate::agent::AgentRole;
use crate::error::BuildError;
use crate::provider::{AgentAsTool, agent_tool_spec};
use crate::session::SessionManager;

/// An agent as another agent's tool, made by [`Agent::as_tool`].
///
/// Handed to [`AgentBuilder::tool`](super::AgentBuilder::tool), the calling
/// agent builds it in the delegated shape of the agent-as-tool rules, for
/// each of its postures and with its own sessions: arguments `query` and
/// optional `conversation`; no tools that need approval; the caller's air
/// gap tightened by its own; a run at the caller's depth + 1 whose events
/// reach the caller as `Delegated`; cancelled with the calling call; a child
/// session per conversation when the caller runs in a session (in the
/// caller's store); the caller's ledger when it has none; `ToolReplay::Never`.
///
/// It is also a [`Tool`] for a plain `AgentHarness`: there it is built
/// once, on its first call, for an open caller, keeping child sessions in
/// the agent's own store.
#[derive(Clone)]
pub struct AgentTool {
    pub(crate) recipe: Arc<Recipe>,
    /// Its name and description are the spec's.
    spec: ToolSpec,
    sessions: Arc<SessionManager>,
    built: Arc<OnceLock<Result<AgentAsTool, BuildError>>>,
}

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTool")
            .field("agent", &self.recipe.definition.id)
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl AgentTool {
    /// The function name the calling model sees.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The description the calling model reads.
    pub fn description(&self) -> &str {
        &self.spec.description
    }

    /// Where the agent keeps the child sessions of a plain harness's calls
    /// (the agent's own store): a host that serves the agent can forget a
    /// caller's conversations when the caller is gone.
    pub fn session_store(&self) -> &Arc<dyn crate::session::SessionStore> {
        self.sessions.store()
    }

    pub(crate) fn exposure(self) -> Exposure {
        Exposure {
            recipe: self.recipe,
            name: self.spec.name,
            description: self.spec.description,
        }
    }

    /// The delegated build behind the [`Tool`] impl, made on first use.
    fn built(&self) -> Result<&AgentAsTool, TinyAgentsError> {
        let built = self.built.get_or_init(|| {
            let exposure = self.clone().exposure();
            let agent =
                self.recipe
                    .build(AgentRole::Delegated, Some(&exposure), &self.sessions, None)?;
            Ok(AgentAsTool::new(
                Arc::new(agent),
                Arc::clone(&self.sessions),
                self.recipe.governance.tool_options,
                false,
            ))
        });
        built.as_ref().map_err(|error| {
            TinyAgentsError::tool_failed(self.spec.name.clone(), error.to_string())
        })
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        self.built()?
            .execute_with_context(args, opts, context)
            .await
    }

    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        self.built()?.reconcile(context).await
    }
}

impl Agent {
    /// This agent as a tool named `name` (letters, digits and `_`), which
    /// another agent's model calls with a `query` (and, to keep separate
    /// lines of work, a `conversation` name), reading `description` to
    /// know when to.
    pub fn as_tool(&self, name: impl Into<String>, description: impl Into<String>) -> AgentTool {
        AgentTool {
            recipe: Arc::clone(&self.recipe),
            spec: agent_tool_spec(
                &name.into(),
                &description.into(),
                self.recipe.governance.tool_options,
            ),
            sessions: Arc::clone(&self.active.sessions),
            built: Arc::new(OnceLock::new()),
        }
    }
}
