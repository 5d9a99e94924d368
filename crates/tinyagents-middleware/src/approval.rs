//! `HumanApprovalMiddleware`: calls of flagged tools wait for a person.
//!
//! A flagged model-issued call runs when the host approved its id, tool and
//! arguments (`RunContext::approvals`) or the [`ApprovalFn`] allows it, and
//! defers the run otherwise. A nested call cannot be deferred and never
//! inherits an approval granted by id: the callback alone decides, and a
//! call it does not allow fails with the nested approval error. A callback
//! that panics is a denial.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use async_trait::async_trait;
use tinyagents_core::{RunContext, State, TinyAgentsError, ToolCall};

use crate::decision::ToolVerdict;
use crate::hooks::{Middleware, tool_spec};

/// Asked about each flagged call that was not approved by id; `true`
/// approves it (a host may auto-approve). A nested call is recognisable by
/// its id (`call.id.is_nested()`).
pub type ApprovalFn = Arc<dyn Fn(&ToolCall) -> bool + Send + Sync>;

/// Told the outcome of each flagged call.
pub type ApprovalOutcomeFn = Arc<dyn Fn(&ToolCall, ApprovalOutcome) + Send + Sync>;

/// What became of a flagged call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// A person approved this call's id and arguments.
    Granted,
    /// The approval callback allowed it.
    Approved,
    /// The run is deferred until a person decides (model-issued calls).
    Deferred,
    /// Refused: a nested call the callback did not allow.
    Refused,
    /// The approval callback panicked; the call is refused.
    Failed,
}

/// Holds calls of flagged tools for a person's approval.
#[derive(Clone, Default)]
pub struct HumanApprovalMiddleware {
    tools: HashSet<String>,
    approve: Option<ApprovalFn>,
    on_outcome: Option<ApprovalOutcomeFn>,
}

impl std::fmt::Debug for HumanApprovalMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HumanApprovalMiddleware")
            .field("tools", &self.tools)
            .field("has_approval_fn", &self.approve.is_some())
            .field("has_outcome_fn", &self.on_outcome.is_some())
            .finish()
    }
}

impl HumanApprovalMiddleware {
    /// Flags the tools whose spec says `approval_required`, with no
    /// callback: every flagged model-issued call defers until approved by
    /// id, and every flagged nested call is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also flags the tool `name`.
    #[must_use]
    pub fn require(mut self, name: impl Into<String>) -> Self {
        self.tools.insert(name.into());
        self
    }

    /// Asks `approve` about flagged calls not approved by id.
    #[must_use]
    pub fn with_approval_fn(mut self, approve: ApprovalFn) -> Self {
        self.approve = Some(approve);
        self
    }

    /// Tells `observe` the outcome of each flagged call.
    #[must_use]
    pub fn with_outcome_fn(mut self, observe: ApprovalOutcomeFn) -> Self {
        self.on_outcome = Some(observe);
        self
    }

    /// Whether calls of `name` need approval: named here, or
    /// `approval_required` in the spec of the run's registry.
    pub fn is_flagged(&self, ctx: &RunContext, name: &str) -> bool {
        self.tools.contains(name) || tool_spec(ctx, name).is_some_and(|spec| spec.approval_required)
    }

    /// The callback's answer; `Some(false)` without a callback, `None` when
    /// it panicked.
    fn ask(&self, call: &ToolCall) -> Option<bool> {
        match &self.approve {
            None => Some(false),
            Some(approve) => catch_unwind(AssertUnwindSafe(|| approve(call))).ok(),
        }
    }

    /// Tells the outcome callback; `false` when it panicked.
    fn report(&self, call: &ToolCall, outcome: ApprovalOutcome) -> bool {
        match &self.on_outcome {
            None => true,
            Some(observe) => catch_unwind(AssertUnwindSafe(|| observe(call, outcome))).is_ok(),
        }
    }
}

impl HumanApprovalMiddleware {
    /// The decision about `call`, shared by `before_tool` and
    /// `check_nested_tool` (where a deferral becomes the nested approval
    /// error).
    pub fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        self.assess(ctx, call).0
    }

    fn assess(&self, ctx: &RunContext, call: &ToolCall) -> (ToolVerdict, Option<ApprovalOutcome>) {
        if !self.is_flagged(ctx, &call.name) {
            return (ToolVerdict::Allow, None);
        }
        let nested = call.id.is_nested();
        let outcome = if !nested && ctx.is_call_approved(call) {
            ApprovalOutcome::Granted
        } else {
            match self.ask(call) {
                Some(true) => ApprovalOutcome::Approved,
                Some(false) if nested => ApprovalOutcome::Refused,
                Some(false) => ApprovalOutcome::Deferred,
                None => ApprovalOutcome::Failed,
            }
        };
        if !self.report(call, outcome) {
            let refused = ToolVerdict::deny(format!(
                "the approval outcome callback failed for tool '{}'; the call is refused",
                call.name
            ));
            return (refused, Some(ApprovalOutcome::Failed));
        }
        let decision = match outcome {
            ApprovalOutcome::Granted | ApprovalOutcome::Approved => ToolVerdict::Allow,
            ApprovalOutcome::Deferred | ApprovalOutcome::Refused => {
                ToolVerdict::defer(format!("tool '{}' requires a person's approval", call.name))
            }
            ApprovalOutcome::Failed => ToolVerdict::deny(format!(
                "the approval callback failed for tool '{}'; the call is refused",
                call.name
            )),
        };
        (decision, Some(outcome))
    }
}

/// The harness runs a tool whose spec declares `approval_required` (or
/// `external`) only when the call is approved: when this middleware's
/// callback approves a model-issued call, `before_tool` grants the approval
/// for that call (its id, tool and arguments), so the harness's fail-closed approval
/// stage lets it through.
#[async_trait]
impl Middleware for HumanApprovalMiddleware {
    fn name(&self) -> &str {
        "human_approval"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        let (decision, outcome) = self.assess(ctx, call);
        if outcome == Some(ApprovalOutcome::Approved) && !call.id.is_nested() {
            ctx.approve_call(call);
        }
        Ok(decision)
    }

    async fn check_nested_tool(
        &self,
        ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.decide(ctx, call).into_nested(self.name(), call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, ctx_with, denied_reason, model, nested, spec};
    use parking_lot::Mutex;
    use serde_json::json;

    const NESTED_APPROVAL: &str =
        "nested call 'deploy' requires approval; nested calls cannot be deferred";

    fn ctx() -> RunContext {
        ctx_with([
            spec("deploy").approval_required(),
            spec("read").read_only(),
            spec("mail"),
        ])
    }

    type Seen = Arc<Mutex<Vec<(String, ApprovalOutcome)>>>;

    fn recorder() -> (ApprovalOutcomeFn, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let observe: ApprovalOutcomeFn = Arc::new(move |call: &ToolCall, outcome| {
            sink.lock().push((call.id.to_string(), outcome));
        });
        (observe, seen)
    }

    #[tokio::test]
    async fn unflagged_tools_pass_without_asking() {
        let asked: ApprovalFn = Arc::new(|_: &ToolCall| panic!("not flagged, must not ask"));
        let mw = HumanApprovalMiddleware::new().with_approval_fn(asked);
        let mut ctx = ctx();
        assert_eq!(
            model(&mw, &mut ctx, &call("p1", "read", json!({}))).await,
            ToolVerdict::Allow
        );
        assert_eq!(
            nested(&mw, &ctx, &call("p1/1", "read", json!({}))).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn a_flagged_model_call_defers_until_approved_by_id() {
        let (observe, seen) = recorder();
        let mw = HumanApprovalMiddleware::new().with_outcome_fn(observe);
        let mut ctx = ctx();
        let deploy = call("p1", "deploy", json!({"env": "prod"}));
        assert_eq!(
            model(&mw, &mut ctx, &deploy).await,
            ToolVerdict::Defer {
                reason: "tool 'deploy' requires a person's approval".into()
            }
        );
        ctx.approve_call(&deploy);
        assert_eq!(model(&mw, &mut ctx, &deploy).await, ToolVerdict::Allow);
        let changed = call("p1", "deploy", json!({"env": "dev"}));
        assert!(matches!(
            model(&mw, &mut ctx, &changed).await,
            ToolVerdict::Defer { .. }
        ));
        assert_eq!(
            *seen.lock(),
            vec![
                ("p1".to_owned(), ApprovalOutcome::Deferred),
                ("p1".to_owned(), ApprovalOutcome::Granted),
                ("p1".to_owned(), ApprovalOutcome::Deferred),
            ]
        );
    }

    #[tokio::test]
    async fn tools_flagged_by_name_and_the_callback_can_approve() {
        let approve: ApprovalFn =
            Arc::new(|call: &ToolCall| call.arguments["to"] == "me@example.com");
        let mw = HumanApprovalMiddleware::new()
            .require("mail")
            .with_approval_fn(approve);
        let mut ctx = ctx();
        assert_eq!(
            model(
                &mw,
                &mut ctx,
                &call("p1", "mail", json!({"to": "me@example.com"}))
            )
            .await,
            ToolVerdict::Allow
        );
        assert!(matches!(
            model(
                &mw,
                &mut ctx,
                &call("p2", "mail", json!({"to": "boss@example.com"}))
            )
            .await,
            ToolVerdict::Defer { .. }
        ));
    }

    #[tokio::test]
    async fn a_nested_call_ignores_grants_and_fails_unless_the_callback_allows() {
        let (observe, seen) = recorder();
        let mw = HumanApprovalMiddleware::new().with_outcome_fn(observe);
        let mut ctx = ctx();
        let inner = call("p1/1", "deploy", json!({}));
        // A grant for the same id does not reach a nested call.
        ctx.approve_call(&inner);
        let reason = denied_reason(nested(&mw, &ctx, &inner).await, "human_approval");
        assert_eq!(reason, NESTED_APPROVAL);
        assert_eq!(
            *seen.lock(),
            vec![("p1/1".to_owned(), ApprovalOutcome::Refused)]
        );

        let approve: ApprovalFn = Arc::new(|call: &ToolCall| call.id.is_nested());
        let allowing = HumanApprovalMiddleware::new().with_approval_fn(approve);
        assert_eq!(nested(&allowing, &ctx, &inner).await, Ok(()));
    }

    #[tokio::test]
    async fn a_nested_call_is_never_deferred() {
        let deny: ApprovalFn = Arc::new(|_: &ToolCall| false);
        let mw = HumanApprovalMiddleware::new().with_approval_fn(deny);
        let ctx = ctx();
        let reason = denied_reason(
            nested(&mw, &ctx, &call("p3/2", "deploy", json!({}))).await,
            "human_approval",
        );
        assert_eq!(reason, NESTED_APPROVAL);
    }

    #[tokio::test]
    async fn a_panicking_callback_is_a_denial() {
        let (observe, seen) = recorder();
        let boom: ApprovalFn = Arc::new(|_: &ToolCall| panic!("approval service down"));
        let mw = HumanApprovalMiddleware::new()
            .with_approval_fn(boom)
            .with_outcome_fn(observe);
        let mut ctx = ctx();
        let verdict = model(&mw, &mut ctx, &call("p1", "deploy", json!({}))).await;
        assert!(
            matches!(&verdict, ToolVerdict::Deny { reason } if reason.contains("approval callback failed"))
        );
        let reason = denied_reason(
            nested(&mw, &ctx, &call("p1/1", "deploy", json!({}))).await,
            "human_approval",
        );
        assert!(reason.contains("approval callback failed"), "{reason}");
        assert_eq!(seen.lock().len(), 2);
        assert!(
            seen.lock()
                .iter()
                .all(|(_, outcome)| *outcome == ApprovalOutcome::Failed)
        );
    }

    #[tokio::test]
    async fn a_panicking_outcome_callback_is_a_denial() {
        let yes: ApprovalFn = Arc::new(|_: &ToolCall| true);
        let boom: ApprovalOutcomeFn = Arc::new(|_: &ToolCall, _| panic!("audit log down"));
        let mw = HumanApprovalMiddleware::new()
            .with_approval_fn(yes)
            .with_outcome_fn(boom);
        let mut ctx = ctx();
        let verdict = model(&mw, &mut ctx, &call("p1", "deploy", json!({}))).await;
        assert!(
            matches!(&verdict, ToolVerdict::Deny { reason } if reason.contains("outcome callback failed"))
        );
        denied_reason(
            nested(&mw, &ctx, &call("p1/1", "deploy", json!({}))).await,
            "human_approval",
        );
    }
}
