//! Issue 32, one execution context shared by a run's calls: a call takes
//! the run's spare `ToolExecutionContext` instead of allocating one and
//! gives it back when no tool kept a handle on it. Each call still sees its
//! own call id, and a context a tool kept is never rewritten by a later
//! call.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tinyagents::harness::ToolExecutionContext;
use tinyagents::prelude::*;

use crate::{harness, spec, t};

/// The call id the harness's context gives the call `context` describes.
fn context_call_id(context: Option<&ToolRunContext>) -> String {
    context
        .and_then(ToolRunContext::host_extension)
        .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
        .map(|installed| installed.call_id().to_string())
        .unwrap_or_default()
}

/// A tool answering with the call id of its execution context, keeping a
/// handle on every context it is given when `keep` is set.
struct Whoami {
    spec: ToolSpec,
    kept: Option<Mutex<Vec<ToolRunContext>>>,
}

#[async_trait]
impl Tool for Whoami {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        if let (Some(kept), Some(context)) = (&self.kept, context) {
            kept.lock().push(context.clone());
        }
        Ok(ToolResult::text(context_call_id(context)))
    }
}

/// Three turns of one `whoami` call each, then an answer.
fn three_turns() -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_call("whoami", json!({})),
        ScriptedModel::tool_call("whoami", json!({})),
        ScriptedModel::tool_call("whoami", json!({})),
        ChatResponse::text("done"),
    ]
}

#[tokio::test]
async fn i32_calls_sharing_the_spare_context_each_see_their_own_call_id() {
    for keep in [false, true] {
        let whoami = Arc::new(Whoami {
            spec: spec("whoami"),
            kept: keep.then(Mutex::default),
        });
        let harness = harness(three_turns(), vec![t(&whoami)], |b| b);
        // With an event stream, which closes when the run ends whatever
        // the tool kept (`kept_context.rs`).
        let (run, _events) =
            tokio::time::timeout(std::time::Duration::from_secs(30), crate::run(&harness))
                .await
                .expect("the event stream closed when the run ended");
        let run = run.unwrap();
        let answers: Vec<String> = run
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(answers, ["p1", "p2", "p3"], "keep: {keep}");
        if let Some(kept) = &whoami.kept {
            // Each kept context still names its own call: none was
            // rewritten for a later one.
            let ids: Vec<String> = kept
                .lock()
                .iter()
                .map(|context| context_call_id(Some(context)))
                .collect();
            assert_eq!(ids, ["p1", "p2", "p3"]);
        }
    }
}
