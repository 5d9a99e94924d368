//! The decision a policy makes about one call, made in one place and mapped
//! onto both admission paths: a [`ToolVerdict`] for a model-issued call
//! (`before_tool`) and admit-or-refuse for a nested call
//! (`check_nested_tool`), which cannot be deferred.

use async_trait::async_trait;
use tinyagents_core::{RunContext, State, TinyAgentsError, ToolCall};

use crate::hooks::{Middleware, ToolVerdict};

/// A policy that decides each tool call in one place. Every `CallPolicy` is
/// a [`Middleware`] whose `before_tool` and `check_nested_tool` both apply
/// that one decision, so an enforcement can never reach model-issued calls
/// and miss nested ones.
pub trait CallPolicy: Send + Sync {
    /// The name refusals cite.
    fn policy_name(&self) -> &str;

    /// Decides about one call, model-issued or nested (`call.id.is_nested()`).
    fn decide(&self, ctx: &RunContext, call: &ToolCall) -> PolicyDecision;
}

#[async_trait]
impl<P: CallPolicy> Middleware for P {
    fn name(&self) -> &str {
        self.policy_name()
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(self.decide(ctx, call).into_verdict())
    }

    async fn check_nested_tool(
        &self,
        ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.decide(ctx, call).into_nested(self.policy_name(), call)
    }
}

/// What a policy decides about one call, before it is mapped onto the path
/// the call came by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Let it run.
    Allow,
    /// Refuse it; the model reads `reason`.
    Deny {
        /// Why, for the model.
        reason: String,
    },
    /// A person must approve it. A model-issued call defers the run; a
    /// nested call is refused with [`nested_approval_reason`].
    Defer {
        /// Why, for the person.
        reason: String,
    },
}

impl PolicyDecision {
    /// A refusal.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::Deny {
            reason: reason.into(),
        }
    }

    /// A request for approval.
    pub fn defer(reason: impl Into<String>) -> Self {
        Self::Defer {
            reason: reason.into(),
        }
    }

    /// Whether the call may run.
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow)
    }

    /// The verdict for a model-issued call (`before_tool`).
    pub fn into_verdict(self) -> ToolVerdict {
        match self {
            Self::Allow => ToolVerdict::Allow,
            Self::Deny { reason } => ToolVerdict::Deny { reason },
            Self::Defer { reason } => ToolVerdict::Defer { reason },
        }
    }

    /// The admission of a nested call (`check_nested_tool`): a denial is
    /// `Denied { by, reason }`, and a deferral, which a nested call cannot
    /// wait for, is `Denied` with [`nested_approval_reason`].
    pub fn into_nested(self, by: &str, call: &ToolCall) -> Result<(), TinyAgentsError> {
        match self {
            Self::Allow => Ok(()),
            Self::Deny { reason } => Err(TinyAgentsError::Denied {
                by: by.to_owned(),
                reason,
            }),
            Self::Defer { .. } => Err(TinyAgentsError::Denied {
                by: by.to_owned(),
                reason: nested_approval_reason(&call.name),
            }),
        }
    }
}

/// The refusal of a nested call that would need a person's approval:
/// `nested call '<name>' requires approval; nested calls cannot be deferred`.
pub fn nested_approval_reason(name: &str) -> String {
    format!("nested call '{name}' requires approval; nested calls cannot be deferred")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tinyagents_core::CallId;

    #[test]
    fn decisions_map_onto_both_paths() {
        let call = ToolCall::new(CallId::new("p1/1"), "pay", json!({}));
        assert_eq!(PolicyDecision::Allow.into_verdict(), ToolVerdict::Allow);
        assert_eq!(PolicyDecision::Allow.into_nested("m", &call), Ok(()));
        assert_eq!(
            PolicyDecision::deny("no").into_verdict(),
            ToolVerdict::Deny {
                reason: "no".into()
            }
        );
        assert_eq!(
            PolicyDecision::deny("no").into_nested("m", &call),
            Err(TinyAgentsError::Denied {
                by: "m".into(),
                reason: "no".into()
            })
        );
        assert_eq!(
            PolicyDecision::defer("ask").into_verdict(),
            ToolVerdict::Defer {
                reason: "ask".into()
            }
        );
        assert_eq!(
            PolicyDecision::defer("ask").into_nested("m", &call),
            Err(TinyAgentsError::Denied {
                by: "m".into(),
                reason: "nested call 'pay' requires approval; nested calls cannot be deferred"
                    .into()
            })
        );
    }
}
