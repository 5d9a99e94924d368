//! Helpers for the unit tests: a stub tool, a run context with a registry
//! attached, and shortcuts that drive the two admission hooks.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tinyagents_core::{
    CallId, RunContext, RunId, RunLimits, State, TinyAgentsError, ToolCall, ToolResult,
};
use tinytools::{Tool, ToolCallOptions, ToolRegistry, ToolRunContext, ToolSpec};

use crate::decision::ToolVerdict;
use crate::hooks::Middleware;

/// A tool that answers "ok".
pub(crate) struct StubTool {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for StubTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        _context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        Ok(ToolResult::text("ok"))
    }
}

/// A spec with an open object schema.
pub(crate) fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "a test tool", json!({"type": "object"}))
}

/// A run context with a registry of stub tools of these specs attached.
pub(crate) fn ctx_with(specs: impl IntoIterator<Item = ToolSpec>) -> RunContext {
    let mut registry = ToolRegistry::new();
    for spec in specs {
        registry.register(Arc::new(StubTool { spec })).unwrap();
    }
    let mut ctx = RunContext::new(RunId::from("r"), RunLimits::default());
    ctx.extensions.insert(Arc::new(registry));
    ctx
}

/// A call with id `id` (`p1` is model-issued, `p1/1` nested).
pub(crate) fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(CallId::new(id), name, arguments)
}

/// Runs `before_tool` as the harness does for a model-issued call.
pub(crate) async fn model(
    mw: &dyn Middleware,
    ctx: &mut RunContext,
    call: &ToolCall,
) -> ToolVerdict {
    let mut call = call.clone();
    mw.before_tool(ctx, &State::default(), &mut call)
        .await
        .unwrap()
}

/// Runs `check_nested_tool` as the harness does for a nested call.
pub(crate) async fn nested(
    mw: &dyn Middleware,
    ctx: &RunContext,
    call: &ToolCall,
) -> Result<(), TinyAgentsError> {
    mw.check_nested_tool(ctx, &State::default(), call).await
}

/// The reason of a `Denied` error, for assertions.
pub(crate) fn denied_reason(result: Result<(), TinyAgentsError>, by: &str) -> String {
    match result {
        Err(TinyAgentsError::Denied { by: who, reason }) => {
            assert_eq!(who, by);
            reason
        }
        other => panic!("expected a denial by {by}, got {other:?}"),
    }
}
