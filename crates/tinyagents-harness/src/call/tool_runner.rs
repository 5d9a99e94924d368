//! The seam between a tool and the loop that drives it: the runner of the
//! loop, installed in a task-local while the loop polls the calling tool's
//! future.

use std::sync::Weak;

use serde_json::Value;
use tinyagents_core::{CallId, TinyAgentsError, ToolResult};

use super::nested::{NestedRunner, parent_settled};

/// Where a tool's nested calls go: the runner of the loop that polls it, or
/// nowhere when nesting is off (every call refused). An enum, not a trait
/// object, so a nested call boxes no future.
///
/// The runner is held weakly: its batch owns it, so a tool that keeps its
/// context past the batch keeps no runner (nor the run's events it holds),
/// and a nested call made through that context is refused.
#[derive(Clone)]
pub(crate) enum NestedToolRunner {
    /// The loop's runner, while its batch runs.
    Loop(Weak<NestedRunner>),
    /// Nesting is off (`max_nested_depth` is 0).
    Disabled,
}

impl NestedToolRunner {
    /// Runs `name(arguments)` as a nested call of `parent`, whose span is
    /// `span`.
    pub(crate) async fn call(
        &self,
        parent: &CallId,
        name: &str,
        arguments: Value,
        span: &tracing::Span,
    ) -> Result<ToolResult, TinyAgentsError> {
        match self {
            Self::Loop(runner) => match runner.upgrade() {
                Some(runner) => runner.call(parent, name, arguments, span).await,
                None => Err(parent_settled(name, parent, "has settled")),
            },
            Self::Disabled => Err(TinyAgentsError::NestedDisabled {
                tool: name.to_owned(),
            }),
        }
    }
}

/// The runner and the call it was installed for.
#[derive(Clone)]
pub(crate) struct NestedScope {
    pub(crate) runner: NestedToolRunner,
    pub(crate) call_id: CallId,
}

tokio::task_local! {
    /// Set while the loop polls a call's future: the runner for that call.
    pub(crate) static NESTED_SCOPE: NestedScope;
}
