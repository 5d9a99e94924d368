//! The providers against the real services. Each test runs only when
//! `TINYAGENTS_LIVE_TESTS=1` is set together with the provider's key, and
//! is skipped (passes without a request) otherwise, so it never runs in CI
//! or by accident on a machine that merely has a key:
//!
//! ```text
//! TINYAGENTS_LIVE_TESTS=1 OPENAI_API_KEY=… cargo test -p tinyagents-models --test live -- --nocapture
//! TINYAGENTS_LIVE_TESTS=1 ANTHROPIC_API_KEY=… cargo test -p tinyagents-models --test live
//! TINYAGENTS_LIVE_TESTS=1 TINYAGENTS_LIVE_MODEL=ollama:llama3.2 cargo test -p tinyagents-models --test live
//! ```
//!
//! `TINYAGENTS_LIVE_OPENAI_MODEL` and `TINYAGENTS_LIVE_ANTHROPIC_MODEL`
//! choose other models than the small defaults.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // tests

use std::sync::Mutex;

use serde_json::json;
use tinyagents_core::{CallId, ChatRequest, Message, ModelDelta, ModelOptions, ToolDefinition};
use tinyagents_models::from_spec;

/// The spec to test, when live tests are enabled and `key_var` is set.
fn enabled(key_var: Option<&str>, spec: impl FnOnce() -> Option<String>) -> Option<String> {
    if std::env::var("TINYAGENTS_LIVE_TESTS").ok().as_deref() != Some("1") {
        eprintln!("skipped: set TINYAGENTS_LIVE_TESTS=1 to run live tests");
        return None;
    }
    if let Some(var) = key_var
        && std::env::var(var).map_or(true, |v| v.trim().is_empty())
    {
        eprintln!("skipped: {var} is not set");
        return None;
    }
    spec()
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Asks for a tool call, answers it, and expects the sum in the final text,
/// streaming both turns.
async fn round_trip(spec: &str) {
    let model = from_spec(spec).unwrap();
    let tools = vec![ToolDefinition {
        name: "add".into(),
        description: "Adds two integers and returns the sum.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        }),
    }];
    let options = ModelOptions {
        max_output_tokens: Some(512),
        ..ModelOptions::default()
    };
    let mut messages = vec![
        Message::system("You are a calculator. Always use the add tool for sums."),
        Message::user("What is 40 + 2? Use the tool."),
    ];
    let deltas = Mutex::new(Vec::new());
    let sink = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let first = model
        .chat(ChatRequest {
            messages: &messages,
            tools: &tools,
            options: &options,
            deltas: Some(&sink),
        })
        .await
        .unwrap();
    assert!(
        !first.tool_calls.is_empty(),
        "{spec}: expected a tool call, got {first:?}"
    );
    assert!(
        deltas
            .lock()
            .unwrap()
            .iter()
            .any(|d| matches!(d, ModelDelta::ToolCallStarted { .. }))
    );
    let calls: Vec<_> = first
        .tool_calls
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, call)| call.into_call(CallId::model(i as u64 + 1)))
        .collect();
    messages.push(Message::Assistant {
        content: first.content.clone(),
        tool_calls: calls.clone(),
        reasoning: None,
    });
    for call in calls {
        messages.push(Message::Tool {
            call_id: call.id,
            provider_id: call.provider_id,
            name: call.name,
            content: "42".into(),
            is_error: false,
        });
    }
    let second = model
        .chat(ChatRequest {
            messages: &messages,
            tools: &tools,
            options: &options,
            deltas: Some(&sink),
        })
        .await
        .unwrap();
    assert!(second.content.contains("42"), "{spec}: {second:?}");
    assert!(
        second.usage.total() > 0 || spec.starts_with("ollama"),
        "{spec}: no usage"
    );
}

#[tokio::test]
async fn openai_round_trip() {
    if let Some(spec) = enabled(Some("OPENAI_API_KEY"), || {
        Some(format!(
            "openai:{}",
            env_or("TINYAGENTS_LIVE_OPENAI_MODEL", "gpt-4o-mini")
        ))
    }) {
        round_trip(&spec).await;
    }
}

#[tokio::test]
async fn anthropic_round_trip() {
    if let Some(spec) = enabled(Some("ANTHROPIC_API_KEY"), || {
        Some(format!(
            "anthropic:{}",
            env_or("TINYAGENTS_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5")
        ))
    }) {
        round_trip(&spec).await;
    }
}

#[tokio::test]
async fn any_model_round_trip() {
    if let Some(spec) = enabled(None, || {
        std::env::var("TINYAGENTS_LIVE_MODEL")
            .ok()
            .filter(|s| !s.is_empty())
    }) {
        round_trip(&spec).await;
    }
}
