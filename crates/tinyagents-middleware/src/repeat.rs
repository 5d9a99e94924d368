//! `RepeatProgressMiddleware`: refuses the K-th identical consecutive call
//! (same tool, same canonical arguments) of a run, so a model stuck in a
//! loop gets told instead of spending its budget.
//!
//! It counts model-issued calls only, in `before_tool`. Nested calls never
//! reach `before_tool`, so they are never counted and never refused here
//! (the default `check_nested_tool` admits them). A call a person approved
//! (its id and arguments are in `RunContext::approvals`) is being admitted
//! again by a resumed run: it was counted, and allowed, when the model
//! issued it, so it is neither counted again nor refused.

use std::collections::HashMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use tinyagents_core::{RunContext, RunId, State, TinyAgentsError, ToolCall, canonical_json};

use crate::decision::ToolVerdict;
use crate::hooks::Middleware;

/// How many runs' streaks are kept before the least recently used is
/// forgotten.
const DEFAULT_MAX_RUNS: usize = 1024;

/// The current run of identical calls in one run.
#[derive(Debug)]
struct Streak {
    name: String,
    arguments: String,
    count: u32,
    touched: u64,
}

#[derive(Debug, Default)]
struct Streaks {
    by_run: HashMap<RunId, Streak>,
    clock: u64,
}

/// Refuses the `limit`-th identical consecutive model-issued call.
#[derive(Debug)]
pub struct RepeatProgressMiddleware {
    limit: u32,
    max_runs: usize,
    streaks: Mutex<Streaks>,
}

impl RepeatProgressMiddleware {
    /// Refuses the `limit`-th identical consecutive call and every identical
    /// call after it. `limit` is at least 2 (a first call is never a repeat).
    pub fn new(limit: u32) -> Self {
        Self {
            limit: limit.max(2),
            max_runs: DEFAULT_MAX_RUNS,
            streaks: Mutex::new(Streaks::default()),
        }
    }

    /// Keeps the streaks of at most `runs` runs (default 1024); beyond it
    /// the least recently active run's streak is forgotten.
    #[must_use]
    pub fn with_max_runs(mut self, runs: usize) -> Self {
        self.max_runs = runs.max(1);
        self
    }

    /// The configured `limit`.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Forgets the streak of `run_id` (for a host that ends runs).
    pub fn forget(&self, run_id: &RunId) {
        self.streaks.lock().by_run.remove(run_id);
    }

    /// Counts `call` in its run's streak and decides about it: the one
    /// decision of this middleware. Nested calls are neither counted nor
    /// refused.
    pub fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        if call.id.is_nested() || ctx.is_call_approved(call) {
            return ToolVerdict::Allow;
        }
        let arguments = match &call.raw_arguments {
            Some(raw) => raw.clone(),
            None => canonical_json(&call.arguments),
        };
        let count = {
            let mut streaks = self.streaks.lock();
            streaks.clock += 1;
            let now = streaks.clock;
            if !streaks.by_run.contains_key(&ctx.run_id) && streaks.by_run.len() >= self.max_runs {
                evict_oldest(&mut streaks.by_run);
            }
            let streak = streaks
                .by_run
                .entry(ctx.run_id.clone())
                .or_insert_with(|| Streak {
                    name: String::new(),
                    arguments: String::new(),
                    count: 0,
                    touched: now,
                });
            streak.touched = now;
            if streak.count > 0 && streak.name == call.name && streak.arguments == arguments {
                streak.count = streak.count.saturating_add(1);
            } else {
                streak.name.clone_from(&call.name);
                streak.arguments = arguments;
                streak.count = 1;
            }
            streak.count
        };
        if count < self.limit {
            return ToolVerdict::Allow;
        }
        ToolVerdict::deny(format!(
            "refused: this is call {count} in a row of '{}' with the same arguments, and the earlier calls already \
             returned their results. Use those results, change the arguments, or try a different approach.",
            call.name
        ))
    }
}

fn evict_oldest(by_run: &mut HashMap<RunId, Streak>) {
    let oldest = by_run
        .iter()
        .min_by_key(|(_, streak)| streak.touched)
        .map(|(run, _)| run.clone());
    if let Some(run) = oldest {
        by_run.remove(&run);
    }
}

#[async_trait]
impl Middleware for RepeatProgressMiddleware {
    fn name(&self) -> &str {
        "repeat_progress"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(self.decide(ctx, call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, ctx_with, model, nested};
    use serde_json::json;
    use tinyagents_core::RunLimits;

    #[tokio::test]
    async fn the_kth_identical_consecutive_call_is_refused() {
        let mw = RepeatProgressMiddleware::new(3);
        let mut ctx = ctx_with([]);
        let a = call("p1", "search", json!({"q": "x", "n": 1}));
        // Same arguments with keys in another order are identical.
        let a_reordered: ToolCall = call(
            "p2",
            "search",
            serde_json::from_str(r#"{"n":1,"q":"x"}"#).unwrap(),
        );
        assert_eq!(model(&mw, &mut ctx, &a).await, ToolVerdict::Allow);
        assert_eq!(model(&mw, &mut ctx, &a_reordered).await, ToolVerdict::Allow);
        let verdict = model(&mw, &mut ctx, &a).await;
        assert!(
            matches!(&verdict, ToolVerdict::Deny { reason } if reason.starts_with("refused: this is call 3 in a row of 'search'")),
            "{verdict:?}"
        );
        // It stays refused while the model keeps repeating.
        assert!(matches!(
            model(&mw, &mut ctx, &a).await,
            ToolVerdict::Deny { .. }
        ));
    }

    #[tokio::test]
    async fn a_different_call_resets_the_streak() {
        let mw = RepeatProgressMiddleware::new(2);
        let mut ctx = ctx_with([]);
        let a = call("p1", "search", json!({"q": "x"}));
        let b = call("p2", "search", json!({"q": "y"}));
        let c = call("p3", "read", json!({"q": "x"}));
        for next in [&a, &b, &a, &c, &a] {
            assert_eq!(model(&mw, &mut ctx, next).await, ToolVerdict::Allow);
        }
        assert!(matches!(
            model(&mw, &mut ctx, &a).await,
            ToolVerdict::Deny { .. }
        ));
    }

    #[tokio::test]
    async fn nested_calls_are_neither_counted_nor_refused() {
        let mw = RepeatProgressMiddleware::new(2);
        let mut ctx = ctx_with([]);
        let a = call("p1", "search", json!({}));
        let inner = call("p1/1", "search", json!({}));
        assert_eq!(model(&mw, &mut ctx, &a).await, ToolVerdict::Allow);
        for _ in 0..5 {
            assert_eq!(nested(&mw, &ctx, &inner).await, Ok(()));
            assert_eq!(model(&mw, &mut ctx, &inner).await, ToolVerdict::Allow);
        }
        // The nested calls did not break the model's streak either.
        assert!(matches!(
            model(&mw, &mut ctx, &a).await,
            ToolVerdict::Deny { .. }
        ));
    }

    #[tokio::test]
    async fn runs_are_counted_apart_and_bounded() {
        let mw = RepeatProgressMiddleware::new(2).with_max_runs(1);
        let mut one = ctx_with([]);
        let mut two = RunContext::new(RunId::from("other"), RunLimits::default());
        let a = call("p1", "search", json!({}));
        assert_eq!(model(&mw, &mut one, &a).await, ToolVerdict::Allow);
        // Run two evicts run one's streak (max one run kept).
        assert_eq!(model(&mw, &mut two, &a).await, ToolVerdict::Allow);
        assert_eq!(model(&mw, &mut one, &a).await, ToolVerdict::Allow);
        assert!(matches!(
            model(&mw, &mut one, &a).await,
            ToolVerdict::Deny { .. }
        ));
        mw.forget(&one.run_id);
        assert_eq!(model(&mw, &mut one, &a).await, ToolVerdict::Allow);
    }

    #[tokio::test]
    async fn an_approved_call_admitted_again_is_not_counted_twice() {
        let mw = RepeatProgressMiddleware::new(2);
        let mut ctx = ctx_with([]);
        let deploy = call("p1", "deploy", json!({"env": "prod"}));
        assert_eq!(model(&mw, &mut ctx, &deploy).await, ToolVerdict::Allow);
        // The run resumes with the call approved and admits it again.
        ctx.approve_call(&deploy);
        assert_eq!(model(&mw, &mut ctx, &deploy).await, ToolVerdict::Allow);
        // The model's next identical call is the second in a row.
        let again = call("p2", "deploy", json!({"env": "prod"}));
        assert!(matches!(
            model(&mw, &mut ctx, &again).await,
            ToolVerdict::Deny { reason } if reason.contains("call 2 in a row")
        ));
    }

    #[test]
    fn the_limit_is_at_least_two() {
        assert_eq!(RepeatProgressMiddleware::new(0).limit(), 2);
        assert_eq!(RepeatProgressMiddleware::new(5).limit(), 5);
    }
}
