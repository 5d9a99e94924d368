//! Issue 11: a run's persisted state as a trust boundary, through the
//! facade only.
//!
//! - `sealing`: a suspended run sealed with HMAC-SHA256 opens only as it
//!   was sealed, with the key it was sealed with;
//! - `depth`: item 5, arguments a model nests deep never make a run's
//!   suspended state, checkpoint or session unreadable (tests at the edge:
//!   the max, the max + 1, and 127, 128 and 129 levels of argument text);
//! - `wrapping`: how deep each persisted form wraps a call's arguments,
//!   measured, against [`MAX_ARGUMENT_DEPTH`](tinyagents::core::MAX_ARGUMENT_DEPTH);
//! - `provider`: the same edge through the OpenAI-compatible client
//!   against a loopback server;
//! - `sources`: issue 32, an error caused by another (the ledger's, the
//!   decoder's, SQLite's, the registry's) keeps it as its `source()`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod depth;
mod provider;
mod sealing;
mod sources;
mod wrapping;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    FnTool, Tool, ToolSpec, core::ModelToolCall, harness::AgentHarnessBuilder,
    harness::SuspendedRun,
};

pub(crate) use tinyagents_tests::{call_answer as answer, call_failure as failed_error};

/// A tool accepting any object, recording its arguments and answering
/// `ran <name>`.
pub(crate) struct Recorder {
    tool: Arc<dyn Tool>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Recorder {
    /// A recorder that runs without approval.
    pub(crate) fn new(name: &str) -> Self {
        Self::with_spec(name, |spec| spec)
    }

    /// A recorder that needs a person's approval.
    pub(crate) fn gated(name: &str) -> Self {
        Self::with_spec(name, ToolSpec::approval_required)
    }

    fn with_spec(name: &str, spec: fn(ToolSpec) -> ToolSpec) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let label = format!("ran {name}");
        let tool = FnTool::new(name, "Records its arguments.", move |args: Value| {
            log.lock().unwrap().push(args);
            let label = label.clone();
            async move { anyhow::Ok(label) }
        })
        .map_spec(|derived| {
            spec(ToolSpec {
                parameters: json!({"type": "object"}),
                ..derived
            })
        });
        Self {
            tool: Arc::new(tool),
            seen,
        }
    }

    /// The tool, for registration.
    pub(crate) fn tool(&self) -> Arc<dyn Tool> {
        Arc::clone(&self.tool)
    }

    /// The arguments of each run, in order.
    pub(crate) fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}

/// A harness answering with `responses`, with `tools`, configured by
/// `configure`.
pub(crate) fn harness(
    responses: Vec<ChatResponse>,
    tools: &[Arc<dyn Tool>],
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(responses)));
    for tool in tools {
        builder.register(Arc::clone(tool)).unwrap();
    }
    configure(builder).build().unwrap()
}

/// The value the leaf of every deep argument holds: no refusal may quote it.
pub(crate) const LEAF: &str = "SECRET-LEAF";

/// Compact argument text nesting `levels` objects (`{"a":{"a":…"SECRET-LEAF"…}}`).
pub(crate) fn nested_text(levels: usize) -> String {
    format!(
        "{}\"{LEAF}\"{}",
        "{\"a\":".repeat(levels),
        "}".repeat(levels)
    )
}

/// The value of [`nested_text`], built without a parser (so deeper than
/// serde_json reads).
pub(crate) fn nested_value(levels: usize) -> Value {
    (0..levels).fold(json!(LEAF), |inner, _| json!({ "a": inner }))
}

/// A model call of `tool` as the provider reports it, from its argument
/// text (what every provider client does with the text it receives).
pub(crate) fn call_from_text(provider_id: &str, tool: &str, text: &str) -> ModelToolCall {
    ModelToolCall::from_text(Some(provider_id.to_owned()), tool, text)
}

/// The refusal a call of `tool` gets for arguments nesting `depth` levels.
pub(crate) fn too_deep(tool: &str, depth: usize) -> String {
    format!(
        "arguments for tool '{tool}' nest {depth} levels; at most {} are accepted",
        tinyagents::core::MAX_ARGUMENT_DEPTH
    )
}

/// The transcript's copy of the model-issued call `id`.
pub(crate) fn recorded_call(messages: &[Message], id: &str) -> Option<ToolCall> {
    messages.iter().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => {
            tool_calls.iter().find(|c| c.id.as_str() == id).cloned()
        }
        _ => None,
    })
}

/// A run suspended for approval: one call of an `approval_required`
/// `deploy` with `{"env": "prod"}`, and the harness to resume it on.
pub(crate) async fn suspended_deploy() -> (AgentHarness, Recorder, SuspendedRun) {
    let deploy = Recorder::gated("deploy");
    let harness = harness(
        vec![
            ChatResponse::tool_calls(vec![call_from_text("c1", "deploy", r#"{"env":"prod"}"#)]),
            ChatResponse::text("done"),
        ],
        &[deploy.tool()],
        |b| b,
    );
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let suspended = run.suspended.expect("the run waits for approval");
    (harness, deploy, suspended)
}
