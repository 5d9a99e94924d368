//! `PlanModeMiddleware`: plan mode enforced, not prompted. While it is on,
//! only tools whose spec says `read_only` run; every other call (and any
//! tool without a spec) is refused with a message telling the model that it
//! is in plan mode. It can be switched at run time.

use std::sync::atomic::{AtomicBool, Ordering};

use tinyagents_core::{RunContext, ToolCall};

use crate::decision::{CallPolicy, ToolVerdict};
use crate::hooks::tool_spec;

/// Lets only read-only tools run while plan mode is on.
#[derive(Debug, Default)]
pub struct PlanModeMiddleware {
    enabled: AtomicBool,
}

impl PlanModeMiddleware {
    /// Plan mode, on or off from the start. Share it (`Arc`) to switch it
    /// while runs go on.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled: AtomicBool::new(enabled),
        }
    }

    /// Switches plan mode; calls admitted from now on see the new mode.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Release);
    }

    /// Whether plan mode is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }
}

impl CallPolicy for PlanModeMiddleware {
    fn policy_name(&self) -> &str {
        "plan_mode"
    }

    /// The decision about `call`, shared by `before_tool` and
    /// `check_nested_tool`.
    fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        if !self.is_enabled() || tool_spec(ctx, &call.name).is_some_and(|spec| spec.read_only) {
            return ToolVerdict::Allow;
        }
        ToolVerdict::deny(format!(
            "You are in plan mode: only read-only tools are available, and '{}' is not read-only, so it was not run. \
             Use read-only tools to investigate, then present your plan; the change can be made once plan mode is off.",
            call.name
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, ctx_with, denied_reason, model, nested, spec};
    use serde_json::json;

    #[tokio::test]
    async fn read_only_tools_run_in_plan_mode() {
        let mw = PlanModeMiddleware::new(true);
        let mut ctx = ctx_with([spec("read").read_only(), spec("write")]);
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
    async fn other_tools_are_refused_with_a_plan_mode_message() {
        let mw = PlanModeMiddleware::new(true);
        let mut ctx = ctx_with([spec("read").read_only(), spec("write")]);
        let verdict = model(&mw, &mut ctx, &call("p1", "write", json!({}))).await;
        let ToolVerdict::Deny { reason } = verdict else {
            panic!("expected a denial, got {verdict:?}");
        };
        assert!(
            reason.starts_with("You are in plan mode: only read-only tools are available"),
            "{reason}"
        );
        assert!(reason.contains("'write'"), "{reason}");
        let nested_reason = denied_reason(
            nested(&mw, &ctx, &call("p1/1", "write", json!({}))).await,
            "plan_mode",
        );
        assert_eq!(nested_reason, reason);
        // A tool without a spec is not known to be read-only.
        let verdict = model(&mw, &mut ctx, &call("p2", "ghost", json!({}))).await;
        assert!(matches!(verdict, ToolVerdict::Deny { .. }));
    }

    #[tokio::test]
    async fn plan_mode_switches_at_run_time() {
        let mw = PlanModeMiddleware::new(false);
        let mut ctx = ctx_with([spec("write")]);
        let write = call("p1", "write", json!({}));
        assert_eq!(model(&mw, &mut ctx, &write).await, ToolVerdict::Allow);
        mw.set_enabled(true);
        assert!(mw.is_enabled());
        assert!(matches!(
            model(&mw, &mut ctx, &write).await,
            ToolVerdict::Deny { .. }
        ));
        mw.set_enabled(false);
        assert_eq!(
            nested(&mw, &ctx, &call("p1/1", "write", json!({}))).await,
            Ok(())
        );
    }
}
