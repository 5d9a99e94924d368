//! `ToolExecutionContext`: a tool's handle on the harness.

use std::sync::Arc;

use serde_json::{Map, Value};
use tinyagents_core::{AgentId, CallId, LimitTracker, RunId, TinyAgentsError, ToolResult};
use tinytools::ToolRunContext;

use super::tool_runner::{NESTED_SCOPE, NestedToolRunner};
use crate::events::EventSink;

/// What the tools of one run segment may know of it; attached to the run's
/// context once, shared by every call's [`ToolExecutionContext`].
#[derive(Debug)]
pub(crate) struct RunShared {
    pub(crate) run_id: RunId,
    pub(crate) agent_id: Option<AgentId>,
    pub(crate) depth: u32,
    pub(crate) properties: Arc<Map<String, Value>>,
    pub(crate) tracker: Arc<LimitTracker>,
    pub(crate) events: EventSink,
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

    /// A sink that forwards a delegated run's events into this run's
    /// stream, wrapped with this call's id, `agent_id` and the child's depth.
    pub fn delegate_events(&self, agent_id: AgentId) -> EventSink {
        match &self.run {
            Some(run) => run
                .events
                .delegated(self.call_id.clone(), agent_id, run.depth + 1),
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
