//! `ToolExecutionContext`: a tool's handle on the harness.

use std::sync::Arc;

use serde_json::{Map, Value};
use tinyagents_core::{AgentId, CallId, LimitTracker, RunId, Spend, TinyAgentsError, ToolResult};
use tinytools::ToolRunContext;

use super::tool_runner::{NESTED_SCOPE, NestedToolRunner};
use crate::events::{EventSink, WeakEventSink};

/// What the tools of one run segment may know of it; attached to the run's
/// context once, shared by every call's [`ToolExecutionContext`].
#[derive(Debug)]
pub(crate) struct RunShared {
    pub(crate) run_id: RunId,
    pub(crate) agent_id: Option<AgentId>,
    pub(crate) depth: u32,
    pub(crate) properties: Arc<Map<String, Value>>,
    pub(crate) tracker: Arc<LimitTracker>,
    /// The run's node of its tree's tokens and money.
    pub(crate) spend: Spend,
    /// Weak: a tool may keep its context past its call, and must not keep
    /// the run's stream open with it.
    pub(crate) events: WeakEventSink,
}

/// A tool's handle on the harness while the agent loop executes it. The
/// harness installs one as the host extension of every call's
/// [`ToolRunContext`]:
///
/// ```ignore
/// let harness = context
///     .and_then(tinytools::ToolRunContext::host_extension)
///     .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
///     .expect("installed by the agent loop");
/// let found = harness.call_tool("search", json!({"q": "tinyagents"})).await?;
/// ```
#[derive(Clone)]
pub struct ToolExecutionContext {
    runner: Option<NestedToolRunner>,
    call_id: CallId,
    run: Option<Arc<RunShared>>,
    /// The call's `execute_tool` span: its nested calls' spans open under
    /// it, wherever the tool makes them.
    span: tracing::Span,
}

impl std::fmt::Debug for ToolExecutionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolExecutionContext")
            .field("call_id", &self.call_id)
            .field("in_loop", &self.runner.is_some())
            .finish()
    }
}

/// A run's spare [`ToolExecutionContext`]: a call takes it instead of
/// allocating one, and gives it back when no tool kept a handle on it, so
/// calls one after another share one allocation.
///
/// Only a context nothing else holds is written to or kept (`Arc::get_mut`
/// decides), so a tool that kept its context (in a task it spawned, say)
/// keeps it unchanged and the next call allocates its own. The spare holds
/// no span and no nested runner between calls: a call's span ends with its
/// call.
#[derive(Default)]
pub(crate) struct SpareContext(parking_lot::Mutex<Option<Arc<ToolExecutionContext>>>);

impl SpareContext {
    /// A context for one call: the spare one, rewritten, or a new one.
    pub(crate) fn take(
        &self,
        runner: NestedToolRunner,
        call_id: CallId,
        run: &Arc<RunShared>,
        span: tracing::Span,
    ) -> Arc<ToolExecutionContext> {
        if let Some(mut spare) = self.0.lock().take()
            && let Some(context) = Arc::get_mut(&mut spare)
        {
            context.runner = Some(runner);
            context.call_id = call_id;
            context.span = span;
            if context
                .run
                .as_ref()
                .is_none_or(|kept| !Arc::ptr_eq(kept, run))
            {
                context.run = Some(Arc::clone(run));
            }
            return spare;
        }
        Arc::new(ToolExecutionContext::new(
            Some(runner),
            call_id,
            Some(Arc::clone(run)),
            span,
        ))
    }

    /// Keeps `context` for the next call, when no one else holds it; its
    /// span and runner are let go now.
    pub(crate) fn give_back(&self, mut context: Arc<ToolExecutionContext>) {
        if let Some(unique) = Arc::get_mut(&mut context) {
            unique.runner = None;
            unique.span = tracing::Span::none();
            *self.0.lock() = Some(context);
        }
    }
}

impl std::fmt::Debug for SpareContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareContext").finish_non_exhaustive()
    }
}

impl ToolExecutionContext {
    pub(crate) fn new(
        runner: Option<NestedToolRunner>,
        call_id: CallId,
        run: Option<Arc<RunShared>>,
        span: tracing::Span,
    ) -> Self {
        Self {
            runner,
            call_id,
            run,
            span,
        }
    }

    /// The context for the call `context` describes: the harness's own when
    /// it installed one, else the runner the loop installed in the current
    /// task for exactly that call id. Outside the agent loop the context has
    /// no runner, and [`Self::call_tool`] says so.
    pub fn from_run_context(context: &ToolRunContext) -> Self {
        if let Some(installed) = context
            .host_extension()
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .filter(|installed| installed.call_id == *context.call_id())
        {
            return installed.clone();
        }
        let runner = NESTED_SCOPE
            .try_with(|scope| (scope.call_id == *context.call_id()).then(|| scope.runner.clone()))
            .ok()
            .flatten();
        Self::new(
            runner,
            context.call_id().clone(),
            None,
            tracing::Span::current(),
        )
    }

    /// The call this context belongs to (the parent of its nested calls).
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }

    /// The run executing the call (`None` outside the agent loop).
    pub fn run_id(&self) -> Option<&RunId> {
        self.run.as_ref().map(|run| &run.run_id)
    }

    /// The agent executing the call.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.run.as_ref().and_then(|run| run.agent_id.as_ref())
    }

    /// The run's sub-agent depth: 0 for a run a host started.
    pub fn depth(&self) -> u32 {
        self.run.as_ref().map_or(0, |run| run.depth)
    }

    /// The run's host metadata (its additional properties), to carry into
    /// a delegated run.
    pub fn properties(&self) -> Option<&Arc<Map<String, Value>>> {
        self.run.as_ref().map(|run| &run.properties)
    }

    /// The run's budget, for a delegated run that spends from the same one.
    pub fn tracker(&self) -> Option<&Arc<LimitTracker>> {
        self.run.as_ref().map(|run| &run.tracker)
    }

    /// The run's node of its tree's tokens and money: a delegated run is
    /// made under it ([`RunRequest::spend`](crate::RunRequest::spend)), and
    /// what a served agent reports it spent is recorded on it.
    pub fn spend(&self) -> Option<&Spend> {
        self.run.as_ref().map(|run| &run.spend)
    }

    /// A sink that forwards a delegated run's events into this run's
    /// stream, wrapped with this call's id, `agent_id` and the child's depth.
    pub fn delegate_events(&self, agent_id: AgentId) -> EventSink {
        match &self.run {
            Some(run) => {
                run.events
                    .upgrade()
                    .delegated(self.call_id.clone(), agent_id, run.depth + 1)
            }
            None => EventSink::none(),
        }
    }

    /// Calls another tool through the harness, as a nested call of this
    /// one: the same lookup, argument preparation, policies, budget, ledger
    /// rows and events as a model-issued call, with the documented
    /// exceptions. A refusal is an `Err`; a tool that reports its own
    /// failure (`is_error`) is an `Ok`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<ToolResult, TinyAgentsError> {
        match &self.runner {
            Some(runner) => {
                runner
                    .call(&self.call_id, name, arguments, &self.span)
                    .await
            }
            None => Err(TinyAgentsError::tool_failed(
                name,
                format!(
                    "cannot call tool '{name}' from {}: nested tool calls are only available while the agent loop executes the calling tool",
                    self.call_id
                ),
            )),
        }
    }
}
