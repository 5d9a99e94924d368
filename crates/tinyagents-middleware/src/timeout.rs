//! `TimeoutWrap`: a deadline around the rest of the onion, per tool or by
//! default. The harness enforces the spec's and the run's own timeouts
//! besides; this layer adds a host's tighter (or per-tool) bound, and tells
//! the tool through `ToolCallOptions::timeout`. Needs a Tokio runtime with
//! the time driver, as the harness runs in.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use tinyagents_core::{TinyAgentsError, ToolCall, ToolResult};

use crate::wrap::{Next, ToolCallContext, ToolMiddleware};

/// Fails a call with `TinyAgentsError::Timeout` when the rest of the onion
/// takes longer than its bound.
#[derive(Debug, Clone, Default)]
pub struct TimeoutWrap {
    default: Option<Duration>,
    per_tool: HashMap<String, Duration>,
}

impl TimeoutWrap {
    /// Bounds every call by `default`.
    pub fn new(default: Duration) -> Self {
        Self {
            default: Some(default),
            per_tool: HashMap::new(),
        }
    }

    /// Bounds only the tools given a bound with [`Self::with_tool`].
    pub fn per_tool() -> Self {
        Self::default()
    }

    /// Bounds calls of the tool `name` by `timeout` instead of the default.
    #[must_use]
    pub fn with_tool(mut self, name: impl Into<String>, timeout: Duration) -> Self {
        self.per_tool.insert(name.into(), timeout);
        self
    }

    /// The bound of a call of `name`, if any.
    pub fn timeout_for(&self, name: &str) -> Option<Duration> {
        self.per_tool.get(name).copied().or(self.default)
    }
}

#[async_trait]
impl ToolMiddleware for TimeoutWrap {
    fn name(&self) -> &str {
        "timeout"
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        let Some(limit) = self.timeout_for(&call.name) else {
            return next.run(ctx, call).await;
        };
        let mut opts = ctx.opts;
        opts.timeout = Some(opts.timeout.map_or(limit, |outer| outer.min(limit)));
        let inner = ToolCallContext { opts, ..*ctx };
        let what = call.name.clone();
        match tokio::time::timeout(limit, next.run(&inner, call)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(TinyAgentsError::Timeout {
                what,
                after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, spec};
    use crate::wrap_testing::{ScriptTool, Step, run_onion};
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn a_slow_call_times_out() {
        let tool = ScriptTool::new(spec("slow"), vec![Step::Sleep(Duration::from_secs(60))]);
        let wrap = TimeoutWrap::new(Duration::from_millis(250));
        let result = run_onion(
            vec![std::sync::Arc::new(wrap)],
            &tool,
            call("p1", "slow", json!({})),
        )
        .await;
        assert_eq!(
            result,
            Err(TinyAgentsError::Timeout {
                what: "slow".into(),
                after_ms: 250
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_call_passes_and_sees_its_bound() {
        let tool = ScriptTool::new(spec("quick"), vec![Step::Sleep(Duration::from_millis(10))]);
        let wrap = TimeoutWrap::per_tool().with_tool("quick", Duration::from_secs(1));
        let result = run_onion(
            vec![std::sync::Arc::new(wrap)],
            &tool,
            call("p1", "quick", json!({})),
        )
        .await;
        assert_eq!(result.map(|r| r.content), Ok("ok".to_owned()));
        assert_eq!(tool.seen_timeouts(), vec![Some(Duration::from_secs(1))]);
    }

    #[tokio::test(start_paused = true)]
    async fn per_tool_bounds_override_the_default_and_unbounded_tools_run_free() {
        let wrap =
            TimeoutWrap::new(Duration::from_secs(5)).with_tool("long", Duration::from_secs(60));
        assert_eq!(wrap.timeout_for("long"), Some(Duration::from_secs(60)));
        assert_eq!(wrap.timeout_for("other"), Some(Duration::from_secs(5)));
        let only = TimeoutWrap::per_tool();
        assert_eq!(only.timeout_for("other"), None);
        let tool = ScriptTool::new(spec("free"), vec![Step::Sleep(Duration::from_secs(600))]);
        let result = run_onion(
            vec![std::sync::Arc::new(only)],
            &tool,
            call("p1", "free", json!({})),
        )
        .await;
        assert!(result.is_ok());
        assert_eq!(tool.seen_timeouts(), vec![None]);
    }
}
