//! `ToolAllowlistMiddleware`: only the named tools pass, on both the
//! model-issued and the nested path.

use std::collections::BTreeSet;

use tinyagents_core::{RunContext, ToolCall};

use crate::decision::{CallPolicy, ToolVerdict};

/// Lets only the named tools run; every other call is refused.
#[derive(Debug, Clone, Default)]
pub struct ToolAllowlistMiddleware {
    allowed: BTreeSet<String>,
}

impl ToolAllowlistMiddleware {
    /// An allow-list of `tools`. An empty list refuses every call.
    pub fn new<I, S>(tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            allowed: tools.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `name` is on the list.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed.contains(name)
    }
}

impl CallPolicy for ToolAllowlistMiddleware {
    fn policy_name(&self) -> &str {
        "tool_allowlist"
    }

    /// The decision about `call`, shared by `before_tool` and
    /// `check_nested_tool`.
    fn decide(&self, _ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        if self.allows(&call.name) {
            return ToolVerdict::Allow;
        }
        let listed = self
            .allowed
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        ToolVerdict::deny(if listed.is_empty() {
            format!(
                "tool '{}' is not allowed here; no tools are allowed",
                call.name
            )
        } else {
            format!(
                "tool '{}' is not allowed here; allowed tools: {listed}",
                call.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{call, ctx_with, denied_reason, model, nested};
    use serde_json::json;

    #[tokio::test]
    async fn listed_tools_pass_on_both_paths() {
        let mw = ToolAllowlistMiddleware::new(["search", "read"]);
        let mut ctx = ctx_with([]);
        let search = call("p1", "search", json!({}));
        assert_eq!(model(&mw, &mut ctx, &search).await, ToolVerdict::Allow);
        assert_eq!(
            nested(&mw, &ctx, &call("p1/1", "read", json!({}))).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn other_tools_are_refused_on_both_paths() {
        let mw = ToolAllowlistMiddleware::new(["search", "read"]);
        let mut ctx = ctx_with([]);
        let verdict = model(&mw, &mut ctx, &call("p1", "delete", json!({}))).await;
        assert_eq!(
            verdict,
            ToolVerdict::Deny {
                reason: "tool 'delete' is not allowed here; allowed tools: read, search".into()
            }
        );
        let reason = denied_reason(
            nested(&mw, &ctx, &call("p1/1", "delete", json!({}))).await,
            "tool_allowlist",
        );
        assert!(reason.contains("'delete' is not allowed"), "{reason}");
    }

    #[tokio::test]
    async fn an_empty_list_refuses_everything() {
        let mw = ToolAllowlistMiddleware::new(Vec::<String>::new());
        let mut ctx = ctx_with([]);
        let verdict = model(&mw, &mut ctx, &call("p1", "search", json!({}))).await;
        assert!(
            matches!(verdict, ToolVerdict::Deny { reason } if reason.contains("no tools are allowed"))
        );
    }
}
