//! Lifecycle hooks: `Middleware`.

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{ChatResponse, RunContext, State, TinyAgentsError, ToolCall, ToolResult};
use tinytools::{ToolRegistry, ToolSpec};

use crate::decision::ToolVerdict;

/// Hooks around the model and tool calls of a run.
///
/// `before_*` hooks run in registration order and `after_*` hooks in
/// reverse. An `Err` from any hook fails closed: the call is refused (or
/// the result withheld) with a message that names the middleware.
///
/// `before_tool` and `after_tool` never run for nested calls (they take
/// `&mut RunContext`, which a tool future cannot lend): an enforcement must
/// also implement [`Middleware::check_nested_tool`], and accounting
/// [`Middleware::observe_nested_result`].
#[async_trait]
pub trait Middleware: Send + Sync {
    /// The name errors and refusals cite.
    fn name(&self) -> &str;

    /// Before each model call; may change the state (for example trim it).
    async fn before_model(
        &self,
        _ctx: &mut RunContext,
        _state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        Ok(())
    }

    /// After each model call; may rewrite the response.
    async fn after_model(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _response: &mut ChatResponse,
    ) -> Result<(), TinyAgentsError> {
        Ok(())
    }

    /// Before a model-issued call runs: may rewrite the call, deny it or
    /// defer it for approval.
    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(ToolVerdict::Allow)
    }

    /// After a model-issued call produced its result: may rewrite it.
    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _call: &ToolCall,
        _result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        Ok(())
    }

    /// Admission of a nested call, after validation and before host
    /// authorisation. The first `Err` refuses the call. The default admits.
    async fn check_nested_tool(
        &self,
        _ctx: &RunContext,
        _state: &State,
        _call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        Ok(())
    }

    /// Sees the result of a nested call that produced one. Cannot rewrite
    /// it; keep state behind interior mutability.
    async fn observe_nested_result(
        &self,
        _ctx: &RunContext,
        _state: &State,
        _call: &ToolCall,
        _result: &ToolResult,
    ) {
    }

    /// Scrubs a payload of a model-issued call bound for events or
    /// persistence (arguments under payload capture, ledger rows). Never
    /// changes what the tool receives.
    fn redact(&self, _payload: &mut Value) {}
}

/// The spec of the tool `name` in the run's registry (the harness attaches
/// the registry to every run's context). `None` outside the harness or for
/// an unknown tool: policies that need a spec refuse then.
pub fn tool_spec<'a>(ctx: &'a RunContext, name: &str) -> Option<&'a ToolSpec> {
    ctx.extensions
        .get::<ToolRegistry>()
        .and_then(|registry| registry.get(name))
        .map(|entry| entry.spec())
}
