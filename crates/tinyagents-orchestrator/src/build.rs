//! Building one agent from its definition: the restricted shape of a
//! delegated build, or the full shape of the requested agent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tinyagents_core::{ChatModel, PriceTable, RunLimits, SpendCaps};
use tinyagents_harness::{AgentHarness, AgentHarnessBuilder, PromptEstimator};
use tinyagents_ledger::{EffectLedger, LedgerFailure};
use tinytools::Tool;

use crate::agent::{AgentRole, BuiltAgent, PostureBuild};
use crate::compaction::{HistoryReducer, KeepLastMessages};
use crate::context::{ContextProvider, attaches};
use crate::definition::{AgentDefinition, Compaction};
use crate::error::BuildError;
use crate::governance::{
    ApprovalHold, AutoApproval, FunctionLoopCaps, MAX_CONSECUTIVE_ERRORS_PER_REQUEST,
    MAX_ITERATIONS_PER_REQUEST, ToolSelection,
};
use crate::provider::{AgentAsToolProvider, AgentToolOptions};
use crate::request::AgentBuildRequest;
use crate::session::SessionManager;
use crate::workspace::WorkspaceWrap;

/// What governs every agent a builder makes, whether it builds from
/// definitions (the orchestrator) or from code (`Agent::builder`): the run
/// limits (40 model calls by default), the consecutive-failure cap, whether
/// tool errors reach the model (off), how agent tools behave, and the
/// ledger.
#[derive(Clone)]
pub(crate) struct Governance {
    pub(crate) limits: RunLimits,
    pub(crate) max_consecutive_errors: u32,
    pub(crate) detailed_errors: bool,
    pub(crate) tool_options: AgentToolOptions,
    pub(crate) ledger: Option<Arc<dyn EffectLedger>>,
    pub(crate) ledger_failure: LedgerFailure,
    pub(crate) prices: Option<Arc<PriceTable>>,
    pub(crate) prompt_estimator: Option<PromptEstimator>,
}

impl Default for Governance {
    fn default() -> Self {
        Self {
            limits: RunLimits::default().with_max_model_calls(MAX_ITERATIONS_PER_REQUEST),
            max_consecutive_errors: MAX_CONSECUTIVE_ERRORS_PER_REQUEST,
            detailed_errors: false,
            tool_options: AgentToolOptions::default(),
            ledger: None,
            ledger_failure: LedgerFailure::default(),
            prices: None,
            prompt_estimator: None,
        }
    }
}

impl std::fmt::Debug for Governance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governance")
            .field("limits", &self.limits)
            .field("max_consecutive_errors", &self.max_consecutive_errors)
            .field("detailed_errors", &self.detailed_errors)
            .field("tool_options", &self.tool_options)
            .field("ledger", &self.ledger.is_some())
            .finish_non_exhaustive()
    }
}

/// The governance setters of a builder whose agents it governs (a
/// `governance: Governance` field): written once, for the orchestrator and
/// for `Agent::builder`.
macro_rules! governance_setters {
    () => {
        /// Sets every limit of the runs of the agents it builds (including
        /// `max_depth`, the cap on chains of agents calling agents). This
        /// replaces them all, the 40-model-call cap included: to change
        /// one, use [`map_limits`](Self::map_limits) or
        /// [`max_nested_depth`](Self::max_nested_depth).
        #[must_use]
        pub fn limits(mut self, limits: tinyagents_core::RunLimits) -> Self {
            self.governance.limits = limits;
            self
        }

        /// Changes the limits of the runs of the agents it builds from
        /// what they are.
        #[must_use]
        pub fn map_limits(
            mut self,
            f: impl FnOnce(tinyagents_core::RunLimits) -> tinyagents_core::RunLimits,
        ) -> Self {
            self.governance.limits = f(self.governance.limits);
            self
        }

        /// Lets the tools of the agents it builds nest calls up to `depth`
        /// levels (0 turns nesting off), leaving every other limit as it is.
        #[must_use]
        pub fn max_nested_depth(self, depth: u32) -> Self {
            self.map_limits(|limits| limits.with_max_nested_depth(depth))
        }

        /// How many consecutive failing iterations a request tolerates (3).
        #[must_use]
        pub fn max_consecutive_errors(mut self, n: u32) -> Self {
            self.governance.max_consecutive_errors = n;
            self
        }

        /// Whether the text of a tool's raised error reaches the model (off
        /// by default; the harness's own refusals always do). The host's
        /// events and ledger rows keep it either way.
        #[must_use]
        pub fn include_detailed_errors(mut self, include: bool) -> Self {
            self.governance.detailed_errors = include;
            self
        }

        /// Lets agent tools run concurrently; calls on the same child
        /// session still wait for each other. Off by default.
        #[must_use]
        pub fn parallel_delegation(mut self, parallel: bool) -> Self {
            self.governance.tool_options.parallel = parallel;
            self
        }

        /// Prices the model calls of the agents it builds (see
        /// `AgentHarnessBuilder::prices`): their usage is costed, and a
        /// `max_cost` in the limits or an agent's
        /// [`budget`](crate::AgentDefinition::budget) binds.
        #[must_use]
        pub fn prices(
            mut self,
            prices: impl Into<std::sync::Arc<tinyagents_core::PriceTable>>,
        ) -> Self {
            self.governance.prices = Some(prices.into());
            self
        }

        /// Estimates the prompt tokens of the model calls of the agents it
        /// builds, for their reservations (see
        /// `AgentHarnessBuilder::prompt_estimator`).
        #[must_use]
        pub fn prompt_estimator(
            mut self,
            estimator: impl Fn(&tinyagents_core::ChatRequest<'_>) -> u64 + Send + Sync + 'static,
        ) -> Self {
            self.governance.prompt_estimator = Some(std::sync::Arc::new(estimator));
            self
        }

        /// Lets delegated runs spend from their caller's budget of tool
        /// and model calls (tree-wide). Off by default: each delegated run
        /// counts its own calls. Tokens and money are always the tree's.
        #[must_use]
        pub fn shared_budget(mut self, shared: bool) -> Self {
            self.governance.tool_options.shared_budget = shared;
            self
        }

        /// Records every tool call of the agents it builds in `ledger`
        /// (started and settled rows, checkpoints), so a run whose process
        /// died can be recovered. A delegated run's rows are keyed by its
        /// run id, [`child_run_id`](crate::child_run_id) of the calling run
        /// and call, which links them to the call that started it.
        #[must_use]
        pub fn ledger(
            mut self,
            ledger: std::sync::Arc<dyn tinyagents_ledger::EffectLedger>,
        ) -> Self {
            self.governance.ledger = Some(ledger);
            self
        }

        /// What a built agent does when a started row cannot be written
        /// ([`LedgerFailure::Abort`](tinyagents_ledger::LedgerFailure::Abort),
        /// refusing the call, by default).
        #[must_use]
        pub fn ledger_failure(mut self, failure: tinyagents_ledger::LedgerFailure) -> Self {
            self.governance.ledger_failure = failure;
            self
        }
    };
}
pub(crate) use governance_setters;

/// What every build of an orchestrator shares.
pub(crate) struct BuildContext<'a> {
    pub(crate) request: &'a AgentBuildRequest,
    pub(crate) governance: &'a Governance,
    pub(crate) sessions: &'a Arc<SessionManager>,
    pub(crate) reducers: &'a HashMap<String, Arc<dyn HistoryReducer>>,
    /// The ledger the agent records in: the governance's, or one it
    /// inherits from the agent that calls it.
    pub(crate) ledger: Option<&'a Arc<dyn EffectLedger>>,
}

/// What does not depend on the posture.
struct Shape {
    model: Arc<dyn ChatModel>,
    instruction: String,
    options: tinyagents_core::ModelOptions,
    providers: Vec<Arc<dyn ContextProvider>>,
    workspaces: Arc<[std::path::PathBuf]>,
}

impl BuildContext<'_> {
    /// Builds `definition` in `role`, offering `children` as agent tools.
    pub(crate) fn build(
        &self,
        definition: &Arc<AgentDefinition>,
        role: AgentRole,
        children: Vec<Arc<BuiltAgent>>,
    ) -> Result<BuiltAgent, BuildError> {
        let active = role == AgentRole::Active;
        let warnings = self.wiring(definition, &children)?;
        let shape = self.shape(definition, active)?;
        let provider = AgentAsToolProvider::new(children, Arc::clone(self.sessions))
            .with_options(self.governance.tool_options);
        let open = if definition.is_local_only {
            None
        } else {
            Some(self.posture(definition, active, false, &shape, &provider, &warnings)?)
        };
        let air_gapped = self.posture(definition, active, true, &shape, &provider, &warnings)?;
        Ok(BuiltAgent {
            definition: Arc::clone(definition),
            role,
            open,
            air_gapped,
            children: provider.agents().to_vec(),
            reducer: self.reducer(definition)?,
            workspaces: shape.workspaces,
            context_providers: shape
                .providers
                .iter()
                .map(|p| p.name().to_owned())
                .collect(),
            host_middleware: self.request.run_middleware.clone(),
            host_tool_middleware: self.request.tool_middleware.clone(),
        })
    }

    /// Checks what `definition` names: an ordinary tool the host does not
    /// have is a build error (or, when the request allows missing tools, a
    /// warning); an agent tool id that resolves to no visible exposed
    /// agent is omitted (the specification's rule for catalogue data that
    /// changes under a running host) and reported. Returns the warnings
    /// every run of the agent reports.
    fn wiring(
        &self,
        definition: &AgentDefinition,
        children: &[Arc<BuiltAgent>],
    ) -> Result<Vec<String>, BuildError> {
        let mut warnings = Vec::new();
        let host: Vec<String> = self.request.tools.names().map(str::to_owned).collect();
        for tool in &definition.tools {
            if self.request.tools.get(tool).is_some() {
                continue;
            }
            let error = BuildError::UnknownTool {
                agent: definition.id.clone(),
                tool: tool.clone(),
                available: host.clone(),
            };
            if !self.request.allow_missing_tools {
                return Err(error);
            }
            warnings.push(format!("{error}: omitted"));
        }
        let exposed: Vec<String> = self
            .request
            .definitions
            .iter()
            .filter(|d| d.is_exposed_as_tool && d.id != definition.id)
            .map(|d| d.id.to_string())
            .collect();
        for id in &definition.agent_tool_ids {
            let resolved = *id == definition.id
                || children.iter().any(|c| c.id() == id)
                || exposed.iter().any(|e| e == id.as_str());
            if !resolved {
                warnings.push(format!(
                    "agent '{}' names agent tool '{id}', which is not a visible agent exposed as a tool: omitted (exposed agents: {})",
                    definition.id,
                    crate::error::list(&exposed)
                ));
            }
        }
        Ok(warnings)
    }

    fn shape(&self, definition: &AgentDefinition, active: bool) -> Result<Shape, BuildError> {
        let model = self.request.models.model_for(definition)?;
        let mut options = definition.model_options.clone();
        if let (true, Some(customize)) = (active, &self.request.options_customizer) {
            customize(&mut options);
        }
        let providers: Vec<Arc<dyn ContextProvider>> = self
            .request
            .context_providers
            .providers(definition)
            .into_iter()
            .filter(|p| attaches(p.as_ref(), definition, active))
            .collect();
        let mut instruction = definition.resolved_instruction();
        for text in providers.iter().filter_map(|p| p.instructions()) {
            if !instruction.is_empty() {
                instruction.push_str("\n\n");
            }
            instruction.push_str(&text);
        }
        let workspaces = self.request.workspaces.resolve(definition)?;
        Ok(Shape {
            model,
            instruction,
            options,
            providers,
            workspaces: Arc::from(workspaces),
        })
    }

    fn reducer(
        &self,
        definition: &AgentDefinition,
    ) -> Result<Option<Arc<dyn HistoryReducer>>, BuildError> {
        Ok(match &definition.compaction {
            Compaction::None => None,
            Compaction::KeepLastMessages { count } => Some(Arc::new(KeepLastMessages::new(*count))),
            Compaction::Custom { name } => {
                Some(self.reducers.get(name).cloned().ok_or_else(|| {
                    BuildError::UnknownReducer {
                        agent: definition.id.clone(),
                        name: name.clone(),
                    }
                })?)
            }
        })
    }

    fn posture(
        &self,
        definition: &AgentDefinition,
        active: bool,
        air_gapped: bool,
        shape: &Shape,
        provider: &AgentAsToolProvider,
        warnings: &[String],
    ) -> Result<PostureBuild, BuildError> {
        let mut selection = ToolSelection::default();
        let mut seen = HashSet::new();
        for name in &definition.tools {
            if seen.insert(name.as_str()) {
                selection.consider(
                    definition,
                    name,
                    self.request.tools.get(name),
                    active,
                    air_gapped,
                );
            }
        }
        for tool in shape.providers.iter().flat_map(|p| p.tools()) {
            let name = tool.spec().name.clone();
            selection.consider(definition, &name, Some(&tool), active, air_gapped);
        }

        let mut builder = AgentHarness::builder(Arc::clone(&shape.model))
            .agent_id(definition.id.clone())
            .model_options(shape.options.clone())
            .limits(limits_of(&self.governance.limits, definition))
            .include_detailed_errors(self.governance.detailed_errors)
            .middleware(Arc::new(FunctionLoopCaps::new(
                self.governance.max_consecutive_errors,
            )));
        for warning in warnings {
            builder = builder.warning(warning.clone());
        }
        if let Some(prices) = &self.governance.prices {
            builder = builder.prices(Arc::clone(prices));
        }
        if let Some(estimator) = &self.governance.prompt_estimator {
            let estimator = Arc::clone(estimator);
            builder = builder.prompt_estimator(move |request| estimator(request));
        }
        if let Some(ledger) = self.ledger {
            builder = builder
                .ledger(Arc::clone(ledger))
                .ledger_failure(self.governance.ledger_failure);
        }
        if !shape.instruction.is_empty() {
            builder = builder.system_prompt(shape.instruction.clone());
        }
        if !selection.needs_approval.is_empty() {
            builder = builder.middleware(Arc::new(ApprovalHold::new(std::mem::take(
                &mut selection.needs_approval,
            ))));
        }
        if !selection.auto_approved.is_empty() {
            builder = builder.middleware(Arc::new(AutoApproval::new(std::mem::take(
                &mut selection.auto_approved,
            ))));
        }
        for middleware in &self.request.run_middleware {
            builder = builder.middleware(Arc::clone(middleware));
        }
        for middleware in shape.providers.iter().filter_map(|p| p.middleware()) {
            builder = builder.middleware(middleware);
        }
        if !shape.workspaces.is_empty() {
            let wrap = WorkspaceWrap::new(Arc::clone(&shape.workspaces));
            builder = builder.tool_middleware(Arc::new(wrap));
        }
        for layer in &self.request.tool_middleware {
            builder = builder.tool_middleware(Arc::clone(layer));
        }

        let mut names: HashMap<String, String> = HashMap::new();
        let mut tools = Vec::with_capacity(selection.included.len());
        for tool in &selection.included {
            let name = tool.spec().name.clone();
            claim(definition, &mut names, &name, &name)?;
            register(definition, &mut builder, Arc::clone(tool))?;
            tools.push(name);
        }
        let mut offered = HashSet::new();
        for tool in provider.tools(air_gapped) {
            // The provider keeps duplicates; a harness offers each agent
            // once (the spec asks callers to deduplicate).
            if !offered.insert(Arc::as_ptr(tool.agent()) as usize) {
                continue;
            }
            let name = tool.spec().name.clone();
            claim(definition, &mut names, &name, tool.agent_id().as_str())?;
            register(definition, &mut builder, tool)?;
        }

        builder = match &self.request.agent_customizer {
            Some(customize) => customize(definition, builder),
            None => builder,
        };
        if let (true, Some(customize)) = (active, &self.request.builder_customizer) {
            builder = customize(builder);
        }
        let harness = builder.build().map_err(|source| BuildError::Harness {
            agent: definition.id.clone(),
            source,
        })?;
        Ok(PostureBuild {
            harness,
            tools,
            omitted: selection.omitted,
        })
    }
}

/// Records that `what` takes the tool name `name`, refusing a second taker.
fn claim(
    definition: &AgentDefinition,
    names: &mut HashMap<String, String>,
    name: &str,
    what: &str,
) -> Result<(), BuildError> {
    if let Some(first) = names.get(name) {
        return Err(BuildError::DuplicateToolName {
            agent: definition.id.clone(),
            name: name.to_owned(),
            first: first.clone(),
            second: what.to_owned(),
        });
    }
    names.insert(name.to_owned(), what.to_owned());
    Ok(())
}

fn register(
    definition: &AgentDefinition,
    builder: &mut AgentHarnessBuilder,
    tool: Arc<dyn Tool>,
) -> Result<(), BuildError> {
    builder
        .register(tool)
        .map(|_| ())
        .map_err(|source| BuildError::Harness {
            agent: definition.id.clone(),
            source,
        })
}

/// The limits of `definition`'s runs: the builder's, with its share of the
/// tree's tokens and money.
fn limits_of(limits: &RunLimits, definition: &AgentDefinition) -> RunLimits {
    let caps = SpendCaps::of(limits).within(definition.budget);
    let mut limits = limits.clone();
    limits.max_tokens = caps.max_tokens;
    limits.max_cost = caps.max_cost;
    limits
}
