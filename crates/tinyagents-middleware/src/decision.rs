//! The one decision vocabulary ([`ToolVerdict`]) and the policy that makes
//! its decision in one place ([`CallPolicy`]), mapped onto both admission
//! paths: the verdict itself for a model-issued call (`before_tool`) and
//! admit-or-refuse for a nested call (`check_nested_tool`), which cannot be
//! deferred.

use async_trait::async_trait;
use tinyagents_core::{RunContext, State, TinyAgentsError, ToolCall};

use crate::hooks::Middleware;

/// A policy that decides each tool call in one place. Every `CallPolicy` is
/// a [`Middleware`] whose `before_tool` and `check_nested_tool` both apply
/// that one decision, so an enforcement can never reach model-issued calls
/// and miss nested ones.
pub trait CallPolicy: Send + Sync {
    /// The name refusals cite.
    fn policy_name(&self) -> &str;

    /// Decides about one call, model-issued or nested (`call.id.is_nested()`).
    fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict;
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
        Ok(self.decide(ctx, call))
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

/// What is decided about one call — by a `before_tool` hook, a policy's
/// one decision function, or the host's security gate. One vocabulary, so
/// "hold for a person" means the same thing wherever it is said: a
/// model-issued call defers the run; a nested call, which cannot wait, is
/// refused with [`nested_approval_reason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolVerdict {
    /// Let it run.
    Allow,
    /// Refuse it; the model reads `reason`.
    Deny {
        /// Why, for the model.
        reason: String,
    },
    /// A person must decide (a gate's question, an approval). A model-issued
    /// call defers the run; a nested call is refused.
    Defer {
        /// Why, for the person.
        reason: String,
    },
}

impl ToolVerdict {
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

    /// How restrictive the verdict is: deny over defer over allow.
    pub fn severity(&self) -> u8 {
        match self {
            Self::Allow => 0,
            Self::Defer { .. } => 1,
            Self::Deny { .. } => 2,
        }
    }

    /// The more restrictive of two verdicts (the first on a tie).
    #[must_use]
    pub fn most_restrictive(self, other: Self) -> Self {
        if other.severity() > self.severity() {
            other
        } else {
            self
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
        assert_eq!(ToolVerdict::Allow, ToolVerdict::Allow);
        assert_eq!(ToolVerdict::Allow.into_nested("m", &call), Ok(()));
        assert_eq!(
            ToolVerdict::deny("no"),
            ToolVerdict::Deny {
                reason: "no".into()
            }
        );
        assert_eq!(
            ToolVerdict::deny("no").into_nested("m", &call),
            Err(TinyAgentsError::Denied {
                by: "m".into(),
                reason: "no".into()
            })
        );
        assert_eq!(
            ToolVerdict::defer("ask"),
            ToolVerdict::Defer {
                reason: "ask".into()
            }
        );
        assert_eq!(
            ToolVerdict::defer("ask").into_nested("m", &call),
            Err(TinyAgentsError::Denied {
                by: "m".into(),
                reason: "nested call 'pay' requires approval; nested calls cannot be deferred"
                    .into()
            })
        );
    }
}
