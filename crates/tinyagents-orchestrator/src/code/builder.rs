//! `AgentBuilder`: an agent defined in code. Its methods never fail one by
//! one; `build` reports every problem at once.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use tinyagents_core::{AgentId, ChatModel, ModelOptions, PayloadCapture};
use tinyagents_harness::AgentHarnessBuilder;
use tinyagents_middleware::{Middleware, SecurityGate, ToolMiddleware};
use tinytools::{InvalidArgsPolicy, Tool};

use super::Agent;
use super::recipe::{Exposure, HarnessSetting, Recipe};
use super::tool::AgentTool;
use crate::agent::{ActiveAgent, AgentRole};
use crate::build::Governance;
use crate::definition::{AgentDefinition, Compaction, ToolPolicy};
use crate::error::BuildError;
use crate::names::normalize_function_name;
use crate::request::HostTools;
use crate::session::{InMemorySessionStore, SessionManager, SessionStore};

/// Builds an [`Agent`]: `Agent::builder("billing").model(m).instructions("…").tool(t).build()?`.
///
/// The agent gets the governance every orchestrated agent has: at most 40
/// model calls and 3 consecutive failing iterations per request, detailed
/// tool errors kept from the model, approval for tools whose spec asks for
/// it (and for those named by [`require_approval`](Self::require_approval)).
pub struct AgentBuilder {
    definition: AgentDefinition,
    model: Option<Arc<dyn ChatModel>>,
    tools: HostTools,
    names: BTreeSet<String>,
    agent_tools: Vec<Exposure>,
    middleware: Vec<Arc<dyn Middleware>>,
    tool_middleware: Vec<Arc<dyn ToolMiddleware>>,
    settings: Vec<HarnessSetting>,
    governance: Governance,
    sessions: Option<Arc<dyn SessionStore>>,
    problems: Vec<String>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("id", &self.definition.id)
            .field("tools", &self.names)
            .field("problems", &self.problems)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(crate) fn new(id: AgentId) -> Self {
        let display_name = id.to_string();
        Self {
            definition: AgentDefinition::new(id, display_name),
            model: None,
            tools: HostTools::new(),
            names: BTreeSet::new(),
            agent_tools: Vec::new(),
            middleware: Vec::new(),
            tool_middleware: Vec::new(),
            settings: Vec::new(),
            governance: Governance::default(),
            sessions: None,
            problems: Vec::new(),
        }
    }

    /// The model it runs on: a model, an `Arc` of one, or a shared
    /// `Arc<dyn ChatModel>` (what `models::from_env` returns).
    #[must_use]
    pub fn model(mut self, model: impl ChatModel + 'static) -> Self {
        self.model = Some(tinyagents_core::shared_model(model));
        self
    }

    /// Its standing instruction.
    #[must_use]
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.definition.system_instruction = text.into();
        self
    }

    /// The options of its model calls.
    #[must_use]
    pub fn model_options(mut self, options: ModelOptions) -> Self {
        self.definition.model_options = options;
        self
    }

    /// Adds a tool: any [`Tool`] (an `FnTool`, a type of your own), or
    /// another agent as [`Agent::as_tool`] exposes it (built then for this
    /// agent: its postures, its sessions, its ledger). A second tool of the
    /// same name is a build error.
    #[must_use]
    pub fn tool<T: Tool + 'static>(mut self, tool: T) -> Self {
        // An agent tool is built by its caller; any other tool is shared
        // as it is. The slot is `Some` until one of the two takes it.
        let mut slot = Some(tool);
        let agent_tool = (&mut slot as &mut dyn Any)
            .downcast_mut::<Option<AgentTool>>()
            .and_then(Option::take);
        match (agent_tool, slot) {
            (Some(agent_tool), _) => self.add_agent_tool(agent_tool),
            (None, Some(tool)) => self.add_tool(Arc::new(tool)),
            (None, None) => {}
        }
        self
    }

    /// Adds shared tools.
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        for tool in tools {
            self.add_tool(tool);
        }
        self
    }

    fn claim(&mut self, name: &str) -> bool {
        if self.names.insert(name.to_owned()) {
            return true;
        }
        self.problems.push(format!("two tools are named '{name}'"));
        false
    }

    fn add_tool(&mut self, tool: Arc<dyn Tool>) {
        let name = tool.spec().name.clone();
        if self.claim(&name) {
            self.definition.tools.push(name);
            self.tools.insert(tool);
        }
    }

    fn add_agent_tool(&mut self, tool: AgentTool) {
        let normalized = normalize_function_name(tool.name());
        if normalized != tool.name() {
            self.problems.push(format!(
                "agent tool name '{}' is not a function name (letters, digits and '_', at most 64): try '{normalized}'",
                tool.name()
            ));
            return;
        }
        if self.claim(tool.name()) {
            self.agent_tools.push(tool.exposure());
        }
    }

    fn policy(mut self, tool: &str, policy: ToolPolicy) -> Self {
        self.definition
            .tool_policies
            .insert(tool.to_owned(), policy);
        self
    }

    /// Every call of `tool` waits for a person (the run suspends; resume it
    /// with the decision). Called as a tool by another agent, this agent
    /// does not offer `tool` at all: a delegated run cannot ask anyone.
    #[must_use]
    pub fn require_approval(self, tool: &str) -> Self {
        self.policy(tool, ToolPolicy::RequireApproval)
    }

    /// `tool` runs without asking, even when its spec asks for approval.
    #[must_use]
    pub fn auto_approve(self, tool: &str) -> Self {
        self.policy(tool, ToolPolicy::AutoApprove)
    }

    /// `tool` is never offered.
    #[must_use]
    pub fn deny(self, tool: &str) -> Self {
        self.policy(tool, ToolPolicy::Deny)
    }

    /// Runs air-gapped whatever its caller: tools that send data off the
    /// machine are not offered.
    #[must_use]
    pub fn local_only(mut self) -> Self {
        self.definition.is_local_only = true;
        self
    }

    /// Keeps only the last `count` messages of a session's conversation.
    #[must_use]
    pub fn keep_last_messages(mut self, count: usize) -> Self {
        self.definition.compaction = Compaction::KeepLastMessages { count };
        self
    }

    crate::build::governance_setters!();

    /// Keeps sessions (and the child sessions of agents it calls) in
    /// `store`; in memory when not set.
    #[must_use]
    pub fn sessions(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.sessions = Some(store);
        self
    }

    /// Adds a lifecycle middleware.
    #[must_use]
    pub fn middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middleware.push(middleware);
        self
    }

    /// Adds a wrap layer around its tool calls.
    #[must_use]
    pub fn tool_middleware(mut self, layer: Arc<dyn ToolMiddleware>) -> Self {
        self.tool_middleware.push(layer);
        self
    }

    /// Sets the host's security gate.
    #[must_use]
    pub fn security_gate(self, gate: Arc<dyn SecurityGate>) -> Self {
        self.harness(move |builder| builder.security_gate(Arc::clone(&gate)))
    }

    /// Sets which payloads ride on events.
    #[must_use]
    pub fn payload_capture(self, capture: PayloadCapture) -> Self {
        self.harness(move |builder| builder.payload_capture(capture))
    }

    /// Sets what happens to arguments that break a tool's schema.
    #[must_use]
    pub fn invalid_args(self, policy: InvalidArgsPolicy) -> Self {
        self.harness(move |builder| builder.invalid_args(policy))
    }

    /// Any other harness setting, applied to every build of this agent.
    #[must_use]
    pub fn harness(
        mut self,
        setting: impl Fn(AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync + 'static,
    ) -> Self {
        self.settings.push(Arc::new(setting));
        self
    }

    /// Builds the agent, or reports every problem found: no model, two
    /// tools of one name, a policy for a tool it does not have, an agent
    /// tool that cannot be built.
    pub fn build(mut self) -> Result<Agent, BuildError> {
        let agent = self.definition.id.clone();
        let model = self.model.take();
        if model.is_none() {
            self.problems
                .push("it has no model: set one with .model(...)".to_owned());
        }
        for tool in self.definition.tool_policies.keys() {
            if !self.definition.tools.contains(tool) {
                self.problems.push(format!(
                    "a policy names tool '{tool}', which it does not have (tools: {})",
                    crate::error::list(&self.definition.tools)
                ));
            }
        }
        let Some(model) = model.filter(|_| self.problems.is_empty()) else {
            return Err(BuildError::Invalid {
                agent,
                problems: self.problems,
            });
        };
        let recipe = Arc::new(Recipe {
            definition: self.definition,
            model,
            tools: self.tools,
            agent_tools: self.agent_tools,
            middleware: self.middleware,
            tool_middleware: self.tool_middleware,
            settings: self.settings,
            governance: self.governance,
        });
        let store = self
            .sessions
            .unwrap_or_else(|| Arc::new(InMemorySessionStore::new()));
        let sessions = Arc::new(SessionManager::new(store));
        let built = recipe.build(AgentRole::Active, None, &sessions, None)?;
        Ok(Agent {
            recipe,
            active: ActiveAgent {
                agent: Arc::new(built),
                air_gapped: false,
                sessions,
            },
        })
    }
}
