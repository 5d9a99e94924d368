//! `ToolExecutionContext`: a tool's handle on the harness.

use std::sync::Arc;

use serde_json::Value;
use tinyagents_core::{CallId, TinyAgentsError, ToolResult};
use tinytools::ToolRunContext;

use super::nested::{NESTED_SCOPE, NestedToolRunner};

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
    runner: Option<Arc<dyn NestedToolRunner>>,
    call_id: CallId,
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
    pub(crate) fn new(runner: Option<Arc<dyn NestedToolRunner>>, call_id: CallId) -> Self {
        Self { runner, call_id }
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
            .try_with(|scope| {
                (scope.call_id == *context.call_id()).then(|| Arc::clone(&scope.runner))
            })
            .ok()
            .flatten();
        Self::new(runner, context.call_id().clone())
    }

    /// The call this context belongs to (the parent of its nested calls).
    pub fn call_id(&self) -> &CallId {
        &self.call_id
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
            Some(runner) => runner.call(&self.call_id, name, arguments).await,
            None => Err(TinyAgentsError::ToolFailed {
                tool: name.to_owned(),
                message: format!(
                    "cannot call tool '{name}' from {}: nested tool calls are only available while the agent loop executes the calling tool",
                    self.call_id
                ),
            }),
        }
    }
}
