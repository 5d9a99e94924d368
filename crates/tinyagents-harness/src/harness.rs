//! `AgentHarness` and its builder.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};
use tinyagents_core::{
    AgentId, ChatModel, ChatRequest, ModelOptions, PayloadCapture, PriceTable, RunLimits,
    TinyAgentsError,
};
use tinyagents_ledger::{EffectLedger, LedgerFailure};
use tinyagents_middleware::{Middleware, SecurityGate, ToolMiddleware};
use tinytools::{InvalidArgsPolicy, Tool, ToolRegistry};

use crate::call::{CallPath, Hooks};
use crate::pricing::{Pricing, PromptEstimator};
use crate::resumed::Resumed;

/// Runs agents: a model, its tools, the policies around them and the limits
/// of each run. Cheap to share; one harness runs many runs at once.
pub struct AgentHarness {
    pub(crate) model: Arc<dyn ChatModel>,
    /// The call path's configuration: tools, hooks, wraps, gate, ledger.
    pub(crate) calls: CallPath,
    pub(crate) limits: RunLimits,
    pub(crate) capture: PayloadCapture,
    pub(crate) system_prompt: Option<String>,
    pub(crate) options: ModelOptions,
    pub(crate) event_buffer: usize,
    /// Told to every run as `Warning` events after `RunStarted`.
    pub(crate) warnings: Arc<[String]>,
    /// The one piece of process state: without a ledger, the waiting calls
    /// resumes have decided (a suspended state resumes once).
    pub(crate) resumed: Resumed,
    /// What model calls are priced and estimated with.
    pub(crate) pricing: Pricing,
}

impl std::fmt::Debug for AgentHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarness")
            .field("model", &self.model.name())
            .field("tools", &self.calls.tools.len())
            .field("middlewares", &self.calls.middlewares.len())
            .field("wraps", &self.calls.wraps.len())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl AsRef<AgentHarness> for AgentHarness {
    fn as_ref(&self) -> &AgentHarness {
        self
    }
}

impl AgentHarness {
    /// Starts building a harness around `model`: a model, an `Arc` of one,
    /// or a shared `Arc<dyn ChatModel>` (kept as it is).
    pub fn builder(model: impl ChatModel + 'static) -> AgentHarnessBuilder {
        AgentHarnessBuilder {
            model: tinyagents_core::shared_model(model),
            tools: ToolRegistry::new(),
            allowed: None,
            middlewares: Vec::new(),
            wraps: Vec::new(),
            gate: None,
            limits: RunLimits::default(),
            capture: PayloadCapture::default(),
            system_prompt: None,
            options: ModelOptions::default(),
            injected: Map::new(),
            invalid_args: InvalidArgsPolicy::default(),
            agent_id: None,
            detailed_errors: false,
            ledger: None,
            ledger_failure: LedgerFailure::Abort,
            event_buffer: crate::events::DEFAULT_EVENT_BUFFER,
            warnings: Vec::new(),
            problems: Vec::new(),
            prices: None,
            estimator: None,
        }
    }

    /// The limits each run starts with.
    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// The registry.
    pub fn tools(&self) -> &ToolRegistry {
        &self.calls.tools
    }

    /// How many events a run started with [`AgentHarness::start`] buffers
    /// (see [`AgentHarnessBuilder::event_buffer`]).
    pub fn event_buffer(&self) -> usize {
        self.event_buffer
    }

    /// The agent this harness runs, if named.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.calls.agent_id.as_ref()
    }
}

/// Builds an [`AgentHarness`].
pub struct AgentHarnessBuilder {
    model: Arc<dyn ChatModel>,
    tools: ToolRegistry,
    allowed: Option<HashSet<String>>,
    middlewares: Vec<Arc<dyn Middleware>>,
    wraps: Vec<Arc<dyn ToolMiddleware>>,
    gate: Option<Arc<dyn SecurityGate>>,
    limits: RunLimits,
    capture: PayloadCapture,
    system_prompt: Option<String>,
    options: ModelOptions,
    injected: Map<String, Value>,
    invalid_args: InvalidArgsPolicy,
    agent_id: Option<AgentId>,
    detailed_errors: bool,
    ledger: Option<Arc<dyn EffectLedger>>,
    ledger_failure: LedgerFailure,
    event_buffer: usize,
    warnings: Vec<String>,
    /// Why tools given to [`tool`](Self::tool) or [`tools`](Self::tools)
    /// were not registered; [`build`](Self::build) reports them.
    problems: Vec<String>,
    prices: Option<Arc<PriceTable>>,
    estimator: Option<PromptEstimator>,
}

impl std::fmt::Debug for AgentHarnessBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarnessBuilder")
            .finish_non_exhaustive()
    }
}

impl AgentHarnessBuilder {
    /// Registers a tool the model may call.
    ///
    /// A tool that cannot be registered (its name is taken or malformed,
    /// its schema does not compile) is not an error here: the builder keeps
    /// the problem and [`build`](Self::build) reports every such problem at
    /// once. Use [`register`](Self::register) for the error at once.
    #[must_use]
    pub fn tool(self, tool: impl Tool) -> Self {
        self.tools([Arc::new(tool) as Arc<dyn Tool>])
    }

    /// Registers shared tools the model may call, in order; problems are
    /// kept for [`build`](Self::build), as with [`tool`](Self::tool).
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        for tool in tools {
            if let Err(e) = self.tools.register(tool) {
                self.problems.push(e.to_string());
            }
        }
        self
    }

    /// Registers a shared tool the model may call.
    ///
    /// # Errors
    ///
    /// [`TinyAgentsError::ToolRegistration`] at once when the tool cannot be
    /// registered (its name is taken or malformed, its schema does not
    /// compile); the builder is unchanged.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<&mut Self, TinyAgentsError> {
        self.tools
            .register(tool)
            .map_err(|e| TinyAgentsError::ToolRegistration { source: e.into() })?;
        Ok(self)
    }

    /// Uses `registry` as the tools (replacing any registered so far).
    #[must_use]
    pub fn registry(mut self, registry: ToolRegistry) -> Self {
        self.tools = registry;
        self
    }

    /// The tools registered so far (for a customiser that adds policies by
    /// what the agent has).
    pub fn registered(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Restricts the run to these tools (the hosted run's allow-list): the
    /// model is told only of them, and any other name is not found.
    #[must_use]
    pub fn allow_tools<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.allowed = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Adds a lifecycle middleware (before hooks run in the order added).
    #[must_use]
    pub fn middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middlewares.push(middleware);
        self
    }

    /// Adds a wrap layer (the first added is the outermost).
    #[must_use]
    pub fn tool_middleware(mut self, layer: Arc<dyn ToolMiddleware>) -> Self {
        self.wraps.push(layer);
        self
    }

    /// Sets the host's security gate.
    #[must_use]
    pub fn security_gate(mut self, gate: Arc<dyn SecurityGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Sets the limits of each run.
    #[must_use]
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets which payloads ride on events.
    #[must_use]
    pub fn payload_capture(mut self, capture: PayloadCapture) -> Self {
        self.capture = capture;
        self
    }

    /// Sets the standing instruction.
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the model options.
    #[must_use]
    pub fn model_options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Supplies a value for an injected argument (tools declare which).
    #[must_use]
    pub fn inject(mut self, key: impl Into<String>, value: Value) -> Self {
        self.injected.insert(key.into(), value);
        self
    }

    /// Sets what happens to arguments that break a tool's schema.
    #[must_use]
    pub fn invalid_args(mut self, policy: InvalidArgsPolicy) -> Self {
        self.invalid_args = policy;
        self
    }

    /// Whether the text of a tool's raised error (or panic) reaches the
    /// model. Off by default (as everywhere in tinyagents: the
    /// orchestrator and `Agent` agree): the model reads only that the tool
    /// failed, since an error's text may carry what the model should not
    /// see. The host still reads it: the call's `ToolFailed` event, its
    /// settled ledger row and an `EndRun` run error
    /// (`TinyAgentsError::ToolFailed::detail`) keep the error's own text,
    /// redacted like every payload. The harness's own refusals are never
    /// withheld, and a tool's own error result (`ToolResult::error`) is its
    /// answer, always read.
    #[must_use]
    pub fn include_detailed_errors(mut self, include: bool) -> Self {
        self.detailed_errors = include;
        self
    }

    /// Records every tool call in `ledger`: a started row before it runs, a
    /// settled row after, and a checkpoint per turn, so that
    /// [`AgentHarness::recover`] can resume a run whose process died.
    #[must_use]
    pub fn ledger(mut self, ledger: Arc<dyn EffectLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// What happens when a started row cannot be written:
    /// [`LedgerFailure::Abort`] (the default) refuses the call.
    #[must_use]
    pub fn ledger_failure(mut self, failure: LedgerFailure) -> Self {
        self.ledger_failure = failure;
        self
    }

    /// How many events a run started with [`AgentHarness::start`] buffers
    /// (at least 1; [`DEFAULT_EVENT_BUFFER`](crate::DEFAULT_EVENT_BUFFER)
    /// unless set): the capacity of the channel between the run and its
    /// [`RunHandle`](crate::RunHandle), and how many events the handle keeps
    /// while [`RunHandle::wait`](crate::RunHandle::wait) drives the run.
    #[must_use]
    pub fn event_buffer(mut self, capacity: usize) -> Self {
        self.event_buffer = capacity.max(1);
        self
    }

    /// A warning every run of this harness reports, as an
    /// [`AgentEvent::Warning`](tinyagents_core::AgentEvent::Warning) right
    /// after its `RunStarted` (for what a build let through that a person
    /// should know of, such as a tool a definition names that is missing).
    #[must_use]
    pub fn warning(mut self, message: impl Into<String>) -> Self {
        self.warnings.push(message.into());
        self
    }

    /// Names the agent.
    #[must_use]
    pub fn agent_id(mut self, id: AgentId) -> Self {
        self.agent_id = Some(id);
        self
    }

    /// Prices the model calls of this harness's runs, and of the runs they
    /// delegate to whose harness sets none (the table is the tree's when
    /// this harness runs its root). A model the table does not name is
    /// counted as unpriced, never guessed; under a `max_cost` its calls are
    /// refused ([`TinyAgentsError::ModelUnpriced`]).
    #[must_use]
    pub fn prices(mut self, prices: impl Into<Arc<PriceTable>>) -> Self {
        self.prices = Some(prices.into());
        self
    }

    /// Estimates a model call's prompt tokens for its reservation under a
    /// `max_tokens` or `max_cost` (a tokenizer's count), instead of the
    /// default estimate: a token per three bytes of the transcript's text
    /// and the tools' definitions, plus four per message. Called before
    /// every model call of a capped tree, with the whole request.
    #[must_use]
    pub fn prompt_estimator(
        mut self,
        estimator: impl Fn(&ChatRequest<'_>) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.estimator = Some(Arc::new(estimator));
        self
    }

    /// Builds the harness.
    ///
    /// # Errors
    ///
    /// [`TinyAgentsError::Config`] when a tool given to
    /// [`tool`](Self::tool) or [`tools`](Self::tools) could not be
    /// registered (one message naming every such problem: "2 problems: a
    /// tool named 'a' is already registered; tool 'b' has an invalid
    /// parameter schema: ..."), or when the allow-list names a tool that is
    /// not registered.
    pub fn build(self) -> Result<AgentHarness, TinyAgentsError> {
        match self.problems.as_slice() {
            [] => {}
            [one] => return Err(TinyAgentsError::Config(one.clone())),
            many => {
                return Err(TinyAgentsError::Config(format!(
                    "{} problems: {}",
                    many.len(),
                    many.join("; ")
                )));
            }
        }
        let unknown = self
            .allowed
            .iter()
            .flatten()
            .find(|n| self.tools.get(n).is_none());
        if let Some(unknown) = unknown {
            return Err(TinyAgentsError::Config(format!(
                "the allow-list names '{unknown}', which is not registered"
            )));
        }
        let model_tools = self
            .tools
            .model_dispatch()
            .definitions()
            .iter()
            .filter(|d| self.allowed.as_ref().is_none_or(|a| a.contains(&d.name)))
            .cloned()
            .collect::<Vec<_>>();
        let pricing = Pricing::new(self.prices, self.estimator, &model_tools);
        let wraps_concurrent_safe = self.wraps.iter().all(|w| w.concurrent_safe());
        Ok(AgentHarness {
            model: self.model,
            calls: CallPath {
                tools: Arc::new(self.tools),
                allowed: self.allowed,
                model_tools,
                middlewares: Arc::new(Hooks::new(self.middlewares)),
                wraps: self.wraps,
                wraps_concurrent_safe,
                gate: self.gate,
                injected: self.injected,
                invalid_args: self.invalid_args,
                detailed_errors: self.detailed_errors,
                ledger: self.ledger,
                ledger_failure: self.ledger_failure,
                agent_id: self.agent_id,
                tool_timeout: self.limits.tool_timeout,
            },
            limits: self.limits,
            capture: self.capture,
            system_prompt: self.system_prompt,
            options: self.options,
            event_buffer: self.event_buffer,
            warnings: self.warnings.into(),
            resumed: Resumed::default(),
            pricing,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tinyagents_models::ScriptedModel;
    use tinytools::{FnTool, ToolSpec};

    use super::*;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Echo {
        text: String,
    }

    fn echo(name: &str) -> impl Tool {
        echo_with(name, |spec| spec)
    }

    fn echo_with(name: &str, spec: impl FnOnce(ToolSpec) -> ToolSpec) -> impl Tool {
        FnTool::new(name.to_owned(), "Echoes.", |args: Echo| async move {
            anyhow::Ok(args.text)
        })
        .map_spec(spec)
    }

    fn builder() -> AgentHarnessBuilder {
        AgentHarness::builder(Arc::new(ScriptedModel::new([])))
    }

    #[test]
    fn build_reports_every_tool_that_could_not_be_registered() {
        let broken = echo_with("b", |s| {
            ToolSpec::new(s.name, s.description, json!({"type": 12}))
        });
        let error = builder()
            .tool(echo("a"))
            .tool(echo("a"))
            .tool(broken)
            .tool(echo("fine"))
            .build()
            .unwrap_err();
        let TinyAgentsError::Config(message) = error else {
            panic!("not a configuration error: {error:?}");
        };
        assert!(
            message.starts_with("2 problems: a tool named 'a' is already registered; tool 'b' has an invalid parameter schema: "),
            "{message}"
        );

        let one = builder()
            .tool(echo("a"))
            .tool(echo("a"))
            .build()
            .unwrap_err();
        assert_eq!(
            one.to_string(),
            "configuration error: a tool named 'a' is already registered"
        );
    }

    #[test]
    fn good_tools_build_and_register_still_fails_at_once() {
        let harness = builder()
            .tool(echo("a"))
            .tools([Arc::new(echo("b")) as Arc<dyn Tool>, Arc::new(echo("c"))])
            .build()
            .unwrap();
        let names: Vec<&str> = harness
            .tools()
            .model_dispatch()
            .definitions()
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);

        let mut builder = builder().tool(echo("a"));
        assert!(matches!(
            builder.register(Arc::new(echo("a"))),
            Err(TinyAgentsError::ToolRegistration { .. })
        ));
        assert!(builder.build().is_ok(), "an immediate error is not kept");
    }
}
