//! The seam between a tool and the loop that drives it: a type-erased
//! runner, installed in a task-local while the loop polls the calling
//! tool's future.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{CallId, TinyAgentsError, ToolResult};

/// Sends a nested call to the loop that drives its parent, and waits for
/// the answer.
#[async_trait]
pub(crate) trait NestedToolRunner: Send + Sync {
    /// Runs `name(arguments)` as a nested call of `parent`.
    async fn call(
        &self,
        parent: &CallId,
        name: &str,
        arguments: Value,
    ) -> Result<ToolResult, TinyAgentsError>;
}

/// The runner and the call it was installed for.
#[derive(Clone)]
pub(crate) struct NestedScope {
    pub(crate) runner: Arc<dyn NestedToolRunner>,
    pub(crate) call_id: CallId,
}

tokio::task_local! {
    /// Set while the loop polls a call's future: the runner for that call.
    pub(crate) static NESTED_SCOPE: NestedScope;
}
