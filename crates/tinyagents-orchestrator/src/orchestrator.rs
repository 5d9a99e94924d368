//! `AgentOrchestrator`: the build walk, the caches and their invalidation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tinyagents_core::AgentId;

use crate::agent::{ActiveAgent, AgentRole, BuiltAgent};
use crate::build::{BuildContext, Governance};
use crate::collection::AgentCollection;
use crate::compaction::HistoryReducer;
use crate::definition::AgentDefinition;
use crate::error::BuildError;
use crate::provider::AgentAsToolProvider;
use crate::request::AgentBuildRequest;
use crate::session::{SessionManager, SessionStore};

/// Builds agents from definitions and keeps the exposed ones.
///
/// [`AgentOrchestrator::get_or_create_agent`] walks the requested agent's
/// `agent_tool_ids` depth-first with a visited set (so repeated ids,
/// self-references and cycles stop at their first visit), builds each
/// exposed dependency before its parents and puts it in
/// [`AgentOrchestrator::agents`], then builds the requested agent, whose
/// provider captures the already-built children.
///
/// Exposed agents are reused across builds while their definition, the
/// host middleware and their captured children are unchanged, and no
/// per-agent customiser asks for a rebuild. Tools, providers, context and
/// policies outside the definition are not compared: after changing them,
/// [`AgentOrchestrator::evict`] the agent or [`AgentOrchestrator::invalidate`].
pub struct AgentOrchestrator {
    agents: Arc<AgentCollection>,
    requested: Mutex<HashMap<AgentId, Arc<BuiltAgent>>>,
    sessions: Arc<SessionManager>,
    reducers: HashMap<String, Arc<dyn HistoryReducer>>,
    governance: Governance,
    build_lock: Mutex<()>,
}

impl std::fmt::Debug for AgentOrchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentOrchestrator")
            .field("agents", &self.agents.ids())
            .field("governance", &self.governance)
            .finish_non_exhaustive()
    }
}

impl AgentOrchestrator {
    /// An orchestrator keeping sessions in `store`, with the per-request
    /// caps of every built agent at their defaults: 40 model calls
    /// ([`MAX_ITERATIONS_PER_REQUEST`](crate::MAX_ITERATIONS_PER_REQUEST)) and 3 consecutive failing
    /// iterations ([`MAX_CONSECUTIVE_ERRORS_PER_REQUEST`](crate::MAX_CONSECUTIVE_ERRORS_PER_REQUEST)), detailed tool
    /// errors kept from the model, agent tools serial and budgets per run.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Self {
            agents: Arc::new(AgentCollection::new()),
            requested: Mutex::new(HashMap::new()),
            sessions: Arc::new(SessionManager::new(store)),
            reducers: HashMap::new(),
            governance: Governance::default(),
            build_lock: Mutex::new(()),
        }
    }

    crate::build::governance_setters!();

    /// Registers a reducer that definitions name with
    /// [`Compaction::Custom`](crate::Compaction::Custom).
    #[must_use]
    pub fn reducer(mut self, name: impl Into<String>, reducer: Arc<dyn HistoryReducer>) -> Self {
        self.reducers.insert(name.into(), reducer);
        self
    }

    /// The built exposed agents (the spec's `AIAgents`).
    pub fn agents(&self) -> &Arc<AgentCollection> {
        &self.agents
    }

    /// The sessions.
    pub fn sessions(&self) -> &Arc<SessionManager> {
        &self.sessions
    }

    /// The cached requested agent `id`, if any.
    pub fn cached_requested(&self, id: &AgentId) -> Option<Arc<BuiltAgent>> {
        self.requested.lock().get(id).cloned()
    }

    /// A provider of `agents` with this orchestrator's sessions and tool
    /// options (for hosts that expose agents to a harness of their own).
    pub fn provider(&self, agents: Vec<Arc<BuiltAgent>>) -> AgentAsToolProvider {
        AgentAsToolProvider::new(agents, Arc::clone(&self.sessions))
            .with_options(self.governance.tool_options)
    }

    /// Drops the cached builds of `id` (exposed and requested); the next
    /// build makes a new one, and rebuilds the cached agents that captured
    /// it. Returns whether anything was cached.
    pub fn evict(&self, id: &AgentId) -> bool {
        let exposed = self.agents.remove(id).is_some();
        let requested = self.requested.lock().remove(id).is_some();
        exposed || requested
    }

    /// Drops every cached build.
    pub fn invalidate(&self) {
        self.agents.clear();
        self.requested.lock().clear();
    }

    /// Builds (or reuses) the requested agent and the exposed agents it
    /// can reach.
    pub async fn get_or_create_agent(
        &self,
        request: AgentBuildRequest,
    ) -> Result<ActiveAgent, BuildError> {
        let _building = self.build_lock.lock();
        let visible: HashMap<&AgentId, &Arc<AgentDefinition>> =
            request.definitions.iter().map(|d| (&d.id, d)).collect();
        let Some(definition) = visible.get(&request.agent_id).map(|d| Arc::clone(d)) else {
            self.requested.lock().remove(&request.agent_id);
            return Err(BuildError::NotFound {
                agent: request.agent_id.clone(),
            });
        };
        if definition.is_exposed_as_tool {
            // An exposed agent asked for directly is never cached as the
            // requested agent; drop a build cached before it was exposed.
            self.requested.lock().remove(&definition.id);
        } else {
            // No longer exposed: its delegated build is stale.
            self.agents.remove(&definition.id);
        }
        let builder = BuildContext {
            request: &request,
            governance: &self.governance,
            sessions: &self.sessions,
            reducers: &self.reducers,
            ledger: self.governance.ledger.as_ref(),
        };
        let mut walk = Walk {
            orchestrator: self,
            builder: &builder,
            visible: &visible,
            visited: HashSet::from([definition.id.clone()]),
            in_progress: HashSet::from([definition.id.clone()]),
        };
        for id in &definition.agent_tool_ids {
            walk.ensure_exposed(id)?;
        }
        let children = walk.children_of(&definition);

        let cacheable =
            !definition.is_exposed_as_tool && !request.has_customizers() && !request.bypass_cache;
        if cacheable
            && let Some(cached) = self.requested.lock().get(&definition.id).cloned()
            && cached.matches(
                &definition,
                &request.run_middleware,
                &request.tool_middleware,
                &children,
            )
        {
            return Ok(self.active(cached, &request));
        }
        let agent = Arc::new(builder.build(&definition, AgentRole::Active, children)?);
        if cacheable {
            self.requested
                .lock()
                .insert(definition.id.clone(), Arc::clone(&agent));
        }
        Ok(self.active(agent, &request))
    }

    fn active(&self, agent: Arc<BuiltAgent>, request: &AgentBuildRequest) -> ActiveAgent {
        ActiveAgent {
            agent,
            air_gapped: request.air_gapped,
            sessions: Arc::clone(&self.sessions),
        }
    }
}

/// One build walk over the visible definitions.
struct Walk<'a> {
    orchestrator: &'a AgentOrchestrator,
    builder: &'a BuildContext<'a>,
    visible: &'a HashMap<&'a AgentId, &'a Arc<AgentDefinition>>,
    visited: HashSet<AgentId>,
    /// The requested agent and the definitions on the walk's stack: a
    /// reference back to one of them is a cycle, and stops.
    in_progress: HashSet<AgentId>,
}

/// A definition being walked and the next of its `agent_tool_ids`.
struct Frame {
    definition: Arc<AgentDefinition>,
    next: usize,
}

impl Walk<'_> {
    /// Marks `id` visited; its definition when it is visible and exposed
    /// and was not visited before. A missing, hidden or no-longer-exposed
    /// target's stale build is removed from the collection.
    fn visit(&mut self, id: &AgentId) -> Option<Arc<AgentDefinition>> {
        if !self.visited.insert(id.clone()) {
            return None;
        }
        match self.visible.get(id).filter(|d| d.is_exposed_as_tool) {
            Some(definition) => Some(Arc::clone(definition)),
            None => {
                self.orchestrator.agents.remove(id);
                None
            }
        }
    }

    /// Builds (or keeps) `id` and everything it reaches, children first.
    /// Iterative, so a long chain of definitions cannot exhaust the stack.
    fn ensure_exposed(&mut self, id: &AgentId) -> Result<(), BuildError> {
        let Some(definition) = self.visit(id) else {
            return Ok(());
        };
        self.in_progress.insert(definition.id.clone());
        let mut stack = vec![Frame {
            definition,
            next: 0,
        }];
        while let Some(frame) = stack.last_mut() {
            if let Some(child) = frame.definition.agent_tool_ids.get(frame.next).cloned() {
                frame.next += 1;
                if let Some(definition) = self.visit(&child) {
                    self.in_progress.insert(definition.id.clone());
                    stack.push(Frame {
                        definition,
                        next: 0,
                    });
                }
                continue;
            }
            if let Some(done) = stack.pop() {
                self.in_progress.remove(&done.definition.id);
                self.build_exposed(&done.definition)?;
            }
        }
        Ok(())
    }

    fn build_exposed(&mut self, definition: &Arc<AgentDefinition>) -> Result<(), BuildError> {
        let children = self.children_of(definition);
        let request = self.builder.request;
        let collection = &self.orchestrator.agents;
        if request.agent_customizer.is_none()
            && let Some(cached) = collection.get(&definition.id)
            && cached.matches(
                definition,
                &request.run_middleware,
                &request.tool_middleware,
                &children,
            )
        {
            return Ok(());
        }
        let agent = self
            .builder
            .build(definition, AgentRole::Delegated, children)?;
        collection.insert(Arc::new(agent));
        Ok(())
    }

    /// The built agents `definition` may call, in its order, each once:
    /// visible, still exposed and built. Itself and the agents whose build
    /// is in progress up the walk are left out: that reference closes a
    /// cycle, which stops at its first visit (an older cached build of
    /// them is never captured instead).
    fn children_of(&self, definition: &AgentDefinition) -> Vec<Arc<BuiltAgent>> {
        let mut seen = HashSet::new();
        definition
            .agent_tool_ids
            .iter()
            .filter(|id| seen.insert(*id))
            .filter(|id| **id != definition.id && !self.in_progress.contains(*id))
            .filter(|id| self.visible.get(id).is_some_and(|d| d.is_exposed_as_tool))
            .filter_map(|id| self.orchestrator.agents.get(id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemorySessionStore, ModelRegistry, SessionScope};
    use tinyagents_core::ChatResponse;
    use tinyagents_harness::{EventSink, RunRequest};
    use tinyagents_models::ScriptedModel;

    fn assert_send<T: Send>(_: &T) {}

    #[tokio::test]
    async fn builds_and_runs_are_send() {
        let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()));
        let model = Arc::new(ScriptedModel::new([ChatResponse::text("hi")]));
        let request = AgentBuildRequest::new(
            "solo",
            [Arc::new(AgentDefinition::new("solo", "Solo"))],
            Arc::new(ModelRegistry::new(model)),
        );
        let building = orchestrator.get_or_create_agent(request);
        assert_send(&building);
        let agent = building.await.unwrap();
        let (scope, events) = (SessionScope::new("s"), EventSink::none());
        let running = agent.run_in_session(&scope, RunRequest::new("q"), &events);
        assert_send(&running);
        assert_eq!(running.await.unwrap().final_text, "hi");
    }
}
