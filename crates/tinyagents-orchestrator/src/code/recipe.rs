//! What an [`Agent`](super::Agent) was built from, kept so the agent can be
//! built again in the delegated shape when another agent calls it as a tool.

use std::collections::HashMap;
use std::sync::Arc;

use tinyagents_core::ChatModel;
use tinyagents_harness::AgentHarnessBuilder;
use tinyagents_ledger::EffectLedger;
use tinyagents_middleware::{Middleware, ToolMiddleware};

use crate::agent::{AgentRole, BuiltAgent};
use crate::build::{BuildContext, Governance};
use crate::definition::AgentDefinition;
use crate::error::BuildError;
use crate::model_factory::ModelRegistry;
use crate::request::{AgentBuildRequest, HostTools};
use crate::session::SessionManager;

/// A change to the harness builder of every build of one agent.
pub(crate) type HarnessSetting =
    Arc<dyn Fn(AgentHarnessBuilder) -> AgentHarnessBuilder + Send + Sync>;

/// An agent called as a tool: who, and under which function name.
#[derive(Clone)]
pub(crate) struct Exposure {
    pub(crate) recipe: Arc<Recipe>,
    pub(crate) name: String,
    pub(crate) description: String,
}

/// Everything one agent's builds need.
pub(crate) struct Recipe {
    pub(crate) definition: AgentDefinition,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) tools: HostTools,
    pub(crate) agent_tools: Vec<Exposure>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) tool_middleware: Vec<Arc<dyn ToolMiddleware>>,
    pub(crate) settings: Vec<HarnessSetting>,
    pub(crate) governance: Governance,
}

impl Recipe {
    /// Builds the agent in `role`: as the agent a host runs
    /// ([`AgentRole::Active`]), or as `exposure`'s function for a caller
    /// ([`AgentRole::Delegated`]: no tools that need approval, the caller's
    /// posture tightened by its own). The agents it calls are built in the
    /// delegated shape beneath it, keeping child sessions in `sessions` and,
    /// when they have no ledger of their own, recording in `ledger`.
    pub(crate) fn build(
        &self,
        role: AgentRole,
        exposure: Option<&Exposure>,
        sessions: &Arc<SessionManager>,
        inherited: Option<&Arc<dyn EffectLedger>>,
    ) -> Result<BuiltAgent, BuildError> {
        let ledger = self.governance.ledger.as_ref().or(inherited);
        let children = self
            .agent_tools
            .iter()
            .map(|child| {
                child
                    .recipe
                    .build(AgentRole::Delegated, Some(child), sessions, ledger)
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut definition = self.definition.clone();
        if let Some(exposure) = exposure {
            definition.display_name.clone_from(&exposure.name);
            definition.description.clone_from(&exposure.description);
            definition.is_exposed_as_tool = true;
        }
        let settings = self.settings.clone();
        let mut request = AgentBuildRequest::new(
            definition.id.clone(),
            [],
            Arc::new(ModelRegistry::new(Arc::clone(&self.model))),
        )
        .tools(self.tools.clone());
        request.run_middleware.clone_from(&self.middleware);
        request.tool_middleware.clone_from(&self.tool_middleware);
        if !settings.is_empty() {
            request = request.customize_agents(move |_, builder| {
                settings
                    .iter()
                    .fold(builder, |builder, setting| setting(builder))
            });
        }
        let context = BuildContext {
            request: &request,
            governance: &self.governance,
            sessions,
            reducers: &HashMap::new(),
            ledger,
        };
        context.build(&Arc::new(definition), role, children)
    }
}
