//! Helpers for the wrap tests: a tool that follows a script and records
//! what it was told, and a driver for an onion of layers.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tinyagents_core::{
    CallId, RunContext, RunId, RunLimits, TinyAgentsError, ToolCall, ToolResult,
};
use tinytools::{Tool, ToolCallOptions, ToolRunContext, ToolSpec};

use crate::wrap::{Next, ToolCallContext, ToolMiddleware};

/// What the tool does on one attempt.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Answer "ok".
    Ok,
    /// Raise an error.
    Fail,
    /// Answer with an error result.
    ErrorResult,
    /// Sleep, then answer "ok".
    Sleep(Duration),
}

/// A tool that takes the next step of its script on each call.
pub(crate) struct ScriptTool {
    spec: ToolSpec,
    steps: Mutex<Vec<Step>>,
    seen: Mutex<Vec<ToolCallOptions>>,
}

impl ScriptTool {
    pub(crate) fn new(spec: ToolSpec, mut steps: Vec<Step>) -> Self {
        steps.reverse();
        Self {
            spec,
            steps: Mutex::new(steps),
            seen: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn seen_attempts(&self) -> Vec<u32> {
        self.seen.lock().iter().map(|o| o.attempt).collect()
    }

    pub(crate) fn seen_timeouts(&self) -> Vec<Option<Duration>> {
        self.seen.lock().iter().map(|o| o.timeout).collect()
    }
}

#[async_trait]
impl Tool for ScriptTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        opts: ToolCallOptions,
        _context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        self.seen.lock().push(opts);
        let step = self.steps.lock().pop().unwrap_or(Step::Ok);
        match step {
            Step::Ok => Ok(ToolResult::text("ok")),
            Step::Fail => anyhow::bail!("flaky backend"),
            Step::ErrorResult => Ok(ToolResult::error("no such file")),
            Step::Sleep(duration) => {
                tokio::time::sleep(duration).await;
                Ok(ToolResult::text("ok"))
            }
        }
    }
}

/// A layer that refuses every call.
pub(crate) struct Refuse;

#[async_trait]
impl ToolMiddleware for Refuse {
    fn name(&self) -> &str {
        "refuse"
    }

    async fn wrap_tool(
        &self,
        _ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        _next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        Err(TinyAgentsError::Denied {
            by: "refuse".into(),
            reason: format!("no {}", call.name),
        })
    }
}

/// Runs `call` through `layers` around `tool`, as the harness does.
pub(crate) async fn run_onion(
    layers: Vec<Arc<dyn ToolMiddleware>>,
    tool: &ScriptTool,
    call: ToolCall,
) -> Result<ToolResult, TinyAgentsError> {
    let run = RunContext::new(RunId::from("r"), RunLimits::default());
    run_onion_in(&run, layers, tool, call).await
}

/// Like [`run_onion`], in the run `run`.
pub(crate) async fn run_onion_in(
    run: &RunContext,
    layers: Vec<Arc<dyn ToolMiddleware>>,
    tool: &ScriptTool,
    call: ToolCall,
) -> Result<ToolResult, TinyAgentsError> {
    let tool_context = ToolRunContext::new(
        run.run_id.clone(),
        CallId::new("p1"),
        run.cancellation().clone(),
    );
    let ctx = ToolCallContext {
        run,
        spec: tool.spec(),
        parent_call_id: None,
        tool_context: &tool_context,
        opts: ToolCallOptions::default(),
        detailed_errors: true,
    };
    Next::new(&layers, tool).run(&ctx, &call).await
}
