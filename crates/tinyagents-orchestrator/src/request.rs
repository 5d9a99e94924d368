//! `AgentBuildRequest`: everything one build needs from the host.

use std::collections::BTreeMap;
use std::sync::Arc;

use tinyagents_core::{AgentId, ModelOptions};
use tinyagents_harness::AgentHarnessBuilder;
use tinyagents_middleware::{Middleware, ToolMiddleware};
use tinytools::Tool;

use crate::context::{ContextProviderFactory, NoContextProviders};
use crate::definition::AgentDefinition;
use crate::model_factory::ModelFactory;
use crate::workspace::{DefinitionWorkspaces, WorkspaceResolver};

/// Customises the requested agent's harness builder (this request only).
pub type BuilderCustomizer = Arc<dyn Fn(AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync>;

/// Customises the requested agent's model options (this request only).
pub type OptionsCustomizer = Arc<dyn Fn(&mut ModelOptions) + Send + Sync>;

/// Customises the harness builder of every agent the request builds,
/// exposed dependencies included.
pub type AgentBuilderCustomizer =
    Arc<dyn Fn(&AgentDefinition, AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync>;

/// The host's ordinary tools, by name; definitions pick from them.
#[derive(Clone, Default)]
pub struct HostTools {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for HostTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

impl HostTools {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (replacing one of the same name).
    #[must_use]
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds a shared tool (replacing one of the same name).
    #[must_use]
    pub fn with_shared(mut self, tool: Arc<dyn Tool>) -> Self {
        self.insert(tool);
        self
    }

    /// Adds a shared tool (replacing one of the same name, which it returns).
    pub fn insert(&mut self, tool: Arc<dyn Tool>) -> Option<Arc<dyn Tool>> {
        self.tools.insert(tool.spec().name.clone(), tool)
    }

    /// The tool `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

/// What a host gives [`AgentOrchestrator::get_or_create_agent`](crate::AgentOrchestrator::get_or_create_agent).
#[derive(Clone)]
pub struct AgentBuildRequest {
    /// The agent asked for.
    pub agent_id: AgentId,
    /// The definitions visible to the current user; ids resolve only here.
    pub definitions: Vec<Arc<AgentDefinition>>,
    /// Makes each agent's model.
    pub models: Arc<dyn ModelFactory>,
    /// Makes each agent's context providers.
    pub context_providers: Arc<dyn ContextProviderFactory>,
    /// Resolves each agent's workspaces.
    pub workspaces: Arc<dyn WorkspaceResolver>,
    /// The host's ordinary tools.
    pub tools: HostTools,
    /// Host runtime middleware, installed on every built agent.
    pub run_middleware: Vec<Arc<dyn Middleware>>,
    /// Host wrap layers, installed on every built agent (inside the
    /// workspace wrap).
    pub tool_middleware: Vec<Arc<dyn ToolMiddleware>>,
    /// Customises the requested agent's builder.
    pub builder_customizer: Option<BuilderCustomizer>,
    /// Customises the requested agent's model options.
    pub options_customizer: Option<OptionsCustomizer>,
    /// Customises every built agent's builder.
    pub agent_customizer: Option<AgentBuilderCustomizer>,
    /// Build the requested agent afresh and do not cache it.
    pub bypass_cache: bool,
    /// The initiating run's posture: no network-egress tools anywhere in
    /// the tree when set.
    pub air_gapped: bool,
    /// Whether a definition may name ordinary tools the host does not have:
    /// omitted, and reported by a `Warning` event on every run of the agent.
    /// Off by default: such a name is a build error
    /// ([`BuildError::UnknownTool`](crate::BuildError::UnknownTool)).
    pub allow_missing_tools: bool,
}

impl std::fmt::Debug for AgentBuildRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuildRequest")
            .field("agent_id", &self.agent_id)
            .field(
                "definitions",
                &self.definitions.iter().map(|d| &d.id).collect::<Vec<_>>(),
            )
            .field("tools", &self.tools)
            .field("run_middleware", &self.run_middleware.len())
            .field("tool_middleware", &self.tool_middleware.len())
            .field("customizers", &self.has_customizers())
            .field("bypass_cache", &self.bypass_cache)
            .field("air_gapped", &self.air_gapped)
            .field("allow_missing_tools", &self.allow_missing_tools)
            .finish_non_exhaustive()
    }
}

impl AgentBuildRequest {
    /// A request for `agent_id` among `definitions`, with models from
    /// `models`, no context providers, the definitions' own workspaces, no
    /// tools, no middleware, not air-gapped.
    pub fn new(
        agent_id: impl Into<AgentId>,
        definitions: impl IntoIterator<Item = Arc<AgentDefinition>>,
        models: Arc<dyn ModelFactory>,
    ) -> Self {
        Self {
            agent_id: agent_id.into(),
            definitions: definitions.into_iter().collect(),
            models,
            context_providers: Arc::new(NoContextProviders),
            workspaces: Arc::new(DefinitionWorkspaces),
            tools: HostTools::new(),
            run_middleware: Vec::new(),
            tool_middleware: Vec::new(),
            builder_customizer: None,
            options_customizer: None,
            agent_customizer: None,
            bypass_cache: false,
            air_gapped: false,
            allow_missing_tools: false,
        }
    }

    /// Sets the host's tools.
    #[must_use]
    pub fn tools(mut self, tools: HostTools) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the context-provider factory.
    #[must_use]
    pub fn context_providers(mut self, factory: Arc<dyn ContextProviderFactory>) -> Self {
        self.context_providers = factory;
        self
    }

    /// Sets the workspace resolver.
    #[must_use]
    pub fn workspaces(mut self, resolver: Arc<dyn WorkspaceResolver>) -> Self {
        self.workspaces = resolver;
        self
    }

    /// Adds host runtime middleware (installed on every built agent).
    #[must_use]
    pub fn run_middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.run_middleware.push(middleware);
        self
    }

    /// Adds a host wrap layer (installed on every built agent).
    #[must_use]
    pub fn tool_middleware(mut self, layer: Arc<dyn ToolMiddleware>) -> Self {
        self.tool_middleware.push(layer);
        self
    }

    /// Customises the requested agent's builder.
    #[must_use]
    pub fn customize_builder(
        mut self,
        f: impl Fn(AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync + 'static,
    ) -> Self {
        self.builder_customizer = Some(Arc::new(f));
        self
    }

    /// Customises the requested agent's model options.
    #[must_use]
    pub fn customize_options(
        mut self,
        f: impl Fn(&mut ModelOptions) + Send + Sync + 'static,
    ) -> Self {
        self.options_customizer = Some(Arc::new(f));
        self
    }

    /// Customises every built agent's builder (exposed dependencies are
    /// rebuilt and replace their collection entries).
    #[must_use]
    pub fn customize_agents(
        mut self,
        f: impl Fn(&AgentDefinition, AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync + 'static,
    ) -> Self {
        self.agent_customizer = Some(Arc::new(f));
        self
    }

    /// Builds the requested agent afresh and does not cache it.
    #[must_use]
    pub fn bypass_cache(mut self) -> Self {
        self.bypass_cache = true;
        self
    }

    /// Sets the initiating run's air-gap posture.
    #[must_use]
    pub fn air_gapped(mut self, air_gapped: bool) -> Self {
        self.air_gapped = air_gapped;
        self
    }

    /// Lets definitions name ordinary tools the host does not have: they are
    /// omitted, and every run of the agent reports each by a `Warning`
    /// event.
    #[must_use]
    pub fn allow_missing_tools(mut self) -> Self {
        self.allow_missing_tools = true;
        self
    }

    /// Whether the request carries any customiser.
    pub fn has_customizers(&self) -> bool {
        self.builder_customizer.is_some()
            || self.options_customizer.is_some()
            || self.agent_customizer.is_some()
    }
}
