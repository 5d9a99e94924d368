//! `Agent::as_tool`: one agent offered to another as a function.

use std::sync::Arc;

use super::Agent;
use super::recipe::Recipe;

/// An agent as another agent's tool, made by [`Agent::as_tool`]: pass it
/// to [`AgentBuilder::tool`](super::AgentBuilder::tool). The calling agent
/// builds it in the delegated shape of the agent-as-tool rules: arguments
/// `query` and optional `conversation`; no tools that need approval; the
/// caller's air gap tightened by its own; a run at the caller's depth + 1
/// whose events reach the caller as `Delegated`; cancelled with the calling
/// call; its own child session per conversation when the caller runs in a
/// session; `ToolReplay::Never`.
#[derive(Clone)]
pub struct AgentTool {
    pub(crate) recipe: Arc<Recipe>,
    pub(crate) name: String,
    pub(crate) description: String,
}

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTool")
            .field("agent", &self.recipe.definition.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl AgentTool {
    /// The function name the calling model sees.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description the calling model reads.
    pub fn description(&self) -> &str {
        &self.description
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
            name: name.into(),
            description: description.into(),
        }
    }
}
