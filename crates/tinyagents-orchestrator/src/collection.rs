//! `AgentCollection`: the built exposed agents, by id.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tinyagents_core::AgentId;

use crate::agent::BuiltAgent;

/// The exposed agents an orchestrator has built, by id (the spec's
/// `AIAgentCollection`). Providers capture agents out of it at build time;
/// replacing an entry never changes what a provider captured.
#[derive(Debug, Default)]
pub struct AgentCollection {
    agents: RwLock<HashMap<AgentId, Arc<BuiltAgent>>>,
}

/// The name the specification uses.
pub type AIAgentCollection = AgentCollection;

impl AgentCollection {
    /// An empty collection.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent `id`.
    pub fn get(&self, id: &AgentId) -> Option<Arc<BuiltAgent>> {
        self.agents.read().get(id).cloned()
    }

    /// Adds `agent` under its id, returning the one it replaces.
    pub fn insert(&self, agent: Arc<BuiltAgent>) -> Option<Arc<BuiltAgent>> {
        self.agents.write().insert(agent.id().clone(), agent)
    }

    /// Removes the agent `id`, returning it.
    pub fn remove(&self, id: &AgentId) -> Option<Arc<BuiltAgent>> {
        self.agents.write().remove(id)
    }

    /// Whether `id` is in the collection.
    pub fn contains(&self, id: &AgentId) -> bool {
        self.agents.read().contains_key(id)
    }

    /// The ids, sorted.
    pub fn ids(&self) -> Vec<AgentId> {
        let mut ids: Vec<AgentId> = self.agents.read().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// How many agents it holds.
    pub fn len(&self) -> usize {
        self.agents.read().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.agents.read().is_empty()
    }

    /// Removes every agent.
    pub fn clear(&self) {
        self.agents.write().clear();
    }
}
