//! `RetryWrap`: runs a failed call again, with exponential backoff, for
//! tools whose spec declares them safe to replay (`ToolReplay::Safe`); any
//! other tool runs once. Retries raised failures (`ToolFailed`) and
//! timeouts only: a refusal, a spent budget or a cancellation is final, and
//! a result the tool reports as an error (`is_error`) is an answer, not a
//! failure. Each attempt is numbered in `ToolCallOptions::attempt`.

use std::time::Duration;

use async_trait::async_trait;
use tinyagents_core::{TinyAgentsError, ToolCall, ToolReplay, ToolResult, exponential_backoff};

use crate::wrap::{Next, ToolCallContext, ToolMiddleware};

/// Retries replay-safe tools on failure.
#[derive(Debug, Clone, Copy)]
pub struct RetryWrap {
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl RetryWrap {
    /// At most `max_attempts` attempts in all (at least 1), waiting 100 ms
    /// after the first failure, doubling up to 2 s.
    pub fn new(max_attempts: u32) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }

    /// Waits `initial` after the first failure, doubling up to `max`.
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// The wait after failed attempt `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        exponential_backoff(self.initial_backoff, self.max_backoff, attempt)
    }

    fn retryable(error: &TinyAgentsError) -> bool {
        matches!(
            error,
            TinyAgentsError::ToolFailed { .. } | TinyAgentsError::Timeout { .. }
        )
    }
}

#[async_trait]
impl ToolMiddleware for RetryWrap {
    fn name(&self) -> &str {
        "retry"
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        if ctx.spec.replay != ToolReplay::Safe || self.max_attempts == 1 {
            return next.run(ctx, call).await;
        }
        let attempt_ctx = |n: u32| {
            let mut opts = ctx.opts;
            opts.attempt = ctx.opts.attempt.saturating_add(n);
            ToolCallContext { opts, ..*ctx }
        };
        for n in 0..self.max_attempts - 1 {
            let error = match next.run(&attempt_ctx(n), call).await {
                Ok(result) => return Ok(result),
                Err(error) => error,
            };
            let delay = self.backoff(n);
            let out_of_time = ctx.run.remaining().is_some_and(|left| left <= delay);
            if !Self::retryable(&error) || out_of_time || ctx.run.is_cancelled() {
                return Err(error);
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = ctx.run.cancellation().cancelled() => return Err(TinyAgentsError::Cancelled),
            }
        }
        next.run(&attempt_ctx(self.max_attempts - 1), call).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{call, spec};
    use crate::timeout::TimeoutWrap;
    use crate::wrap::ToolMiddleware;
    use crate::wrap_testing::{ScriptTool, Step, run_onion};
    use serde_json::json;

    fn fast() -> RetryWrap {
        RetryWrap::new(3).with_backoff(Duration::from_millis(10), Duration::from_millis(40))
    }

    #[tokio::test(start_paused = true)]
    async fn a_replay_safe_tool_is_retried_until_it_succeeds() {
        let tool = ScriptTool::new(
            spec("read").read_only(),
            vec![Step::Fail, Step::Fail, Step::Ok],
        );
        let result = run_onion(vec![Arc::new(fast())], &tool, call("p1", "read", json!({}))).await;
        assert_eq!(result.map(|r| r.content), Ok("ok".to_owned()));
        assert_eq!(tool.seen_attempts(), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_failure_is_returned_after_max_attempts() {
        let tool = ScriptTool::new(spec("read").read_only(), vec![Step::Fail; 5]);
        let result = run_onion(vec![Arc::new(fast())], &tool, call("p1", "read", json!({}))).await;
        assert!(matches!(result, Err(TinyAgentsError::ToolFailed { .. })));
        assert_eq!(tool.seen_attempts(), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tool_not_safe_to_replay_runs_once() {
        let tool = ScriptTool::new(spec("pay"), vec![Step::Fail, Step::Ok]);
        let result = run_onion(vec![Arc::new(fast())], &tool, call("p1", "pay", json!({}))).await;
        assert!(matches!(result, Err(TinyAgentsError::ToolFailed { .. })));
        assert_eq!(tool.seen_attempts(), vec![0]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_result_is_an_answer_not_a_failure() {
        let tool = ScriptTool::new(spec("read").read_only(), vec![Step::ErrorResult, Step::Ok]);
        let result = run_onion(vec![Arc::new(fast())], &tool, call("p1", "read", json!({}))).await;
        assert!(result.is_ok_and(|r| r.is_error));
        assert_eq!(tool.seen_attempts(), vec![0]);
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_inside_the_retry_layer_are_retried() {
        let tool = ScriptTool::new(
            spec("read").read_only(),
            vec![Step::Sleep(Duration::from_secs(30)), Step::Ok],
        );
        let layers: Vec<Arc<dyn ToolMiddleware>> = vec![
            Arc::new(fast()),
            Arc::new(TimeoutWrap::new(Duration::from_secs(1))),
        ];
        let result = run_onion(layers, &tool, call("p1", "read", json!({}))).await;
        assert_eq!(result.map(|r| r.content), Ok("ok".to_owned()));
        assert_eq!(tool.seen_attempts(), vec![0, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_not_retried() {
        let tool = ScriptTool::new(spec("read").read_only(), vec![Step::Ok]);
        let layers: Vec<Arc<dyn ToolMiddleware>> =
            vec![Arc::new(fast()), Arc::new(crate::wrap_testing::Refuse)];
        let result = run_onion(layers, &tool, call("p1", "read", json!({}))).await;
        assert!(matches!(result, Err(TinyAgentsError::Denied { .. })));
        assert!(tool.seen_attempts().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_run_stops_waiting_to_retry() {
        let tool = ScriptTool::new(spec("read").read_only(), vec![Step::Fail, Step::Ok]);
        let run = tinyagents_core::RunContext::new("r".into(), Default::default());
        let token = run.cancellation().clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            token.cancel();
        });
        let slow = RetryWrap::new(3).with_backoff(Duration::from_secs(30), Duration::from_secs(30));
        let result = crate::wrap_testing::run_onion_in(
            &run,
            vec![Arc::new(slow)],
            &tool,
            call("p1", "read", json!({})),
        )
        .await;
        assert_eq!(result, Err(TinyAgentsError::Cancelled));
        assert_eq!(tool.seen_attempts(), vec![0]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_retry_when_the_wall_clock_cannot_cover_the_backoff() {
        let tool = ScriptTool::new(spec("read").read_only(), vec![Step::Fail, Step::Ok]);
        let limits =
            tinyagents_core::RunLimits::default().with_wall_clock(Some(Duration::from_secs(5)));
        let run = tinyagents_core::RunContext::new("r".into(), limits);
        let slow = RetryWrap::new(3).with_backoff(Duration::from_secs(30), Duration::from_secs(30));
        let result = crate::wrap_testing::run_onion_in(
            &run,
            vec![Arc::new(slow)],
            &tool,
            call("p1", "read", json!({})),
        )
        .await;
        assert!(matches!(result, Err(TinyAgentsError::ToolFailed { .. })));
        assert_eq!(tool.seen_attempts(), vec![0]);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let wrap =
            RetryWrap::new(10).with_backoff(Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<_> = (0..4).map(|n| wrap.backoff(n).as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 350, 350]);
        assert_eq!(wrap.backoff(u32::MAX), Duration::from_millis(350));
    }
}
