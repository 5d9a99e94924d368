//! `ToolPolicyMiddleware`: a deny mask over side-effect classes, a sandbox
//! requirement, the host's classification of tools, and approval grants.
//! A tool without a spec in the run's registry cannot be classified and is
//! refused (fail closed).

use std::collections::{HashMap, HashSet};

use tinyagents_core::{RunContext, ToolCall};
use tinytools::{SideEffects, ToolSpec};

use crate::decision::{CallPolicy, ToolVerdict};
use crate::hooks::tool_spec;

/// How the host classified one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Classification {
    /// These classes on top of the spec's.
    Add(SideEffects),
    /// These classes instead of the spec's.
    Replace(SideEffects),
}

/// Refuses tools by side-effect class, refuses sandboxed tools when no
/// sandbox is available, and holds tools or classes that need approval.
///
/// Checks run in this order: unknown tool (refused), deny mask (refused),
/// sandbox (refused), approval (a model-issued call defers unless its id and
/// arguments were approved; a nested call is refused, since it cannot be
/// deferred and never inherits an approval).
#[derive(Debug, Clone, Default)]
pub struct ToolPolicyMiddleware {
    denied: SideEffects,
    sandbox_available: bool,
    classified: HashMap<String, Classification>,
    approval_tools: HashSet<String>,
    approval_classes: SideEffects,
}

impl ToolPolicyMiddleware {
    /// A policy that allows every known tool without a sandbox requirement
    /// (sandboxed tools are refused until [`Self::sandbox_available`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Refuses every tool with any of `classes`.
    #[must_use]
    pub fn deny_side_effects(mut self, classes: SideEffects) -> Self {
        self.denied = self.denied.union(classes);
        self
    }

    /// Declares whether the host runs tools in a sandbox; tools whose spec
    /// says `sandboxed` are refused unless it does.
    #[must_use]
    pub fn sandbox_available(mut self, available: bool) -> Self {
        self.sandbox_available = available;
        self
    }

    /// Adds `classes` to the spec's classes of the tool `name`.
    #[must_use]
    pub fn classify(mut self, name: impl Into<String>, classes: SideEffects) -> Self {
        let name = name.into();
        let entry = match self.classified.get(&name) {
            Some(Classification::Add(prior)) => Classification::Add(prior.union(classes)),
            Some(Classification::Replace(prior)) => Classification::Replace(prior.union(classes)),
            None => Classification::Add(classes),
        };
        self.classified.insert(name, entry);
        self
    }

    /// Uses `classes` instead of the spec's classes for the tool `name`.
    #[must_use]
    pub fn reclassify(mut self, name: impl Into<String>, classes: SideEffects) -> Self {
        self.classified
            .insert(name.into(), Classification::Replace(classes));
        self
    }

    /// Requires a person's approval for each call of the tool `name`.
    #[must_use]
    pub fn require_approval(mut self, name: impl Into<String>) -> Self {
        self.approval_tools.insert(name.into());
        self
    }

    /// Requires a person's approval for each call of a tool with any of
    /// `classes`.
    #[must_use]
    pub fn require_approval_for(mut self, classes: SideEffects) -> Self {
        self.approval_classes = self.approval_classes.union(classes);
        self
    }

    /// The side-effect classes the policy sees for `spec`: the spec's, as
    /// the host's classification changed them.
    pub fn classes_of(&self, spec: &ToolSpec) -> SideEffects {
        match self.classified.get(&spec.name) {
            Some(Classification::Add(extra)) => spec.side_effects.union(*extra),
            Some(Classification::Replace(classes)) => *classes,
            None => spec.side_effects,
        }
    }
}

impl CallPolicy for ToolPolicyMiddleware {
    fn policy_name(&self) -> &str {
        "tool_policy"
    }

    /// The decision about `call`, shared by `before_tool` and
    /// `check_nested_tool`.
    fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        let name = &call.name;
        let Some(spec) = tool_spec(ctx, name) else {
            return ToolVerdict::deny(format!(
                "tool '{name}' has no spec in this run's registry, so the tool policy cannot classify it and refuses it"
            ));
        };
        let classes = self.classes_of(spec);
        let denied = classes.intersection(self.denied);
        if !denied.is_empty() {
            return ToolVerdict::deny(format!(
                "tool '{name}' is refused by the tool policy: side effects not allowed here: {}",
                denied.names().join(", ")
            ));
        }
        if spec.sandboxed && !self.sandbox_available {
            return ToolVerdict::deny(format!(
                "tool '{name}' must run in a sandbox and no sandbox is available here"
            ));
        }
        let gated = classes.intersection(self.approval_classes);
        if self.approval_tools.contains(name.as_str()) || !gated.is_empty() {
            // A nested id never inherits an approval granted for a call of
            // the same id: only model-issued calls are approved by id.
            if !call.id.is_nested() && ctx.is_call_approved(call) {
                return ToolVerdict::Allow;
            }
            return ToolVerdict::defer(if gated.is_empty() {
                format!("tool '{name}' requires approval")
            } else {
                format!(
                    "tool '{name}' requires approval for its side effects: {}",
                    gated.names().join(", ")
                )
            });
        }
        ToolVerdict::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, ctx_with, denied_reason, model, nested, spec};
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        vec![
            spec("read").read_only(),
            spec("fetch").side_effects(SideEffects::NETWORK_EGRESS),
            spec("pay").side_effects(SideEffects::PAYMENT),
            spec("shell")
                .side_effects(SideEffects::CODE_EXECUTION)
                .sandboxed(),
            spec("write"),
        ]
    }

    #[tokio::test]
    async fn known_tools_without_restrictions_pass() {
        let mw = ToolPolicyMiddleware::new().deny_side_effects(SideEffects::PAYMENT);
        let mut ctx = ctx_with(tools());
        assert_eq!(
            model(&mw, &mut ctx, &call("p1", "read", json!({}))).await,
            ToolVerdict::Allow
        );
        assert_eq!(
            nested(&mw, &ctx, &call("p1/1", "fetch", json!({}))).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn unknown_tools_are_refused() {
        let mw = ToolPolicyMiddleware::new();
        let mut ctx = ctx_with(tools());
        let verdict = model(&mw, &mut ctx, &call("p1", "ghost", json!({}))).await;
        assert!(
            matches!(&verdict, ToolVerdict::Deny { reason } if reason.contains("'ghost' has no spec"))
        );
        denied_reason(
            nested(&mw, &ctx, &call("p1/1", "ghost", json!({}))).await,
            "tool_policy",
        );
        // No registry attached at all: still refused.
        let mut bare = RunContext::new("r".into(), Default::default());
        let verdict = model(&mw, &mut bare, &call("p1", "read", json!({}))).await;
        assert!(matches!(verdict, ToolVerdict::Deny { .. }));
    }

    #[tokio::test]
    async fn the_deny_mask_refuses_by_class_on_both_paths() {
        let mw = ToolPolicyMiddleware::new()
            .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT);
        let mut ctx = ctx_with(tools());
        let verdict = model(&mw, &mut ctx, &call("p1", "pay", json!({}))).await;
        assert_eq!(
            verdict,
            ToolVerdict::Deny {
                reason: "tool 'pay' is refused by the tool policy: side effects not allowed here: payment".into()
            }
        );
        let reason = denied_reason(
            nested(&mw, &ctx, &call("p1/1", "fetch", json!({}))).await,
            "tool_policy",
        );
        assert!(reason.contains("network_egress"), "{reason}");
    }

    #[tokio::test]
    async fn classification_adds_to_or_replaces_the_specs_classes() {
        let mw = ToolPolicyMiddleware::new()
            .deny_side_effects(SideEffects::FILE_WRITE | SideEffects::NETWORK_EGRESS)
            .classify("write", SideEffects::FILE_WRITE)
            .reclassify("fetch", SideEffects::NONE);
        let mut ctx = ctx_with(tools());
        let verdict = model(&mw, &mut ctx, &call("p1", "write", json!({}))).await;
        assert!(matches!(&verdict, ToolVerdict::Deny { reason } if reason.ends_with("file_write")));
        assert_eq!(
            model(&mw, &mut ctx, &call("p2", "fetch", json!({}))).await,
            ToolVerdict::Allow
        );
        assert_eq!(
            nested(&mw, &ctx, &call("p2/1", "fetch", json!({}))).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn sandboxed_tools_need_a_sandbox() {
        let mut ctx = ctx_with(tools());
        let shell = call("p1", "shell", json!({}));
        let without = ToolPolicyMiddleware::new();
        let verdict = model(&without, &mut ctx, &shell).await;
        assert_eq!(
            verdict,
            ToolVerdict::Deny {
                reason: "tool 'shell' must run in a sandbox and no sandbox is available here"
                    .into()
            }
        );
        denied_reason(
            nested(&without, &ctx, &call("p1/1", "shell", json!({}))).await,
            "tool_policy",
        );
        let with = ToolPolicyMiddleware::new().sandbox_available(true);
        assert_eq!(model(&with, &mut ctx, &shell).await, ToolVerdict::Allow);
    }

    #[tokio::test]
    async fn approval_defers_model_calls_until_granted_by_id_and_arguments() {
        let mw = ToolPolicyMiddleware::new()
            .require_approval("write")
            .require_approval_for(SideEffects::PAYMENT);
        let mut ctx = ctx_with(tools());
        let pay = call("p1", "pay", json!({"amount": 5}));
        let verdict = model(&mw, &mut ctx, &pay).await;
        assert_eq!(
            verdict,
            ToolVerdict::Defer {
                reason: "tool 'pay' requires approval for its side effects: payment".into()
            }
        );
        let write = call("p2", "write", json!({}));
        assert!(matches!(
            model(&mw, &mut ctx, &write).await,
            ToolVerdict::Defer { .. }
        ));

        ctx.approve_call(&pay);
        assert_eq!(model(&mw, &mut ctx, &pay).await, ToolVerdict::Allow);
        // Changed arguments are not approved by the grant.
        let changed = call("p1", "pay", json!({"amount": 500}));
        assert!(matches!(
            model(&mw, &mut ctx, &changed).await,
            ToolVerdict::Defer { .. }
        ));
    }

    #[tokio::test]
    async fn approval_refuses_nested_calls_even_with_a_grant_of_the_same_id() {
        let mw = ToolPolicyMiddleware::new().require_approval_for(SideEffects::PAYMENT);
        let mut ctx = ctx_with(tools());
        let nested_pay = call("p1/1", "pay", json!({}));
        ctx.approve_call(&nested_pay);
        let reason = denied_reason(nested(&mw, &ctx, &nested_pay).await, "tool_policy");
        assert_eq!(
            reason,
            "nested call 'pay' requires approval; nested calls cannot be deferred"
        );
    }
}
