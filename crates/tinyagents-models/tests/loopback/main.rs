//! The providers against a real HTTP server on loopback, started by each
//! test, answering in each provider's documented wire format. It covers
//! what a third-party server cannot be made to do: exact request bodies,
//! events split at every byte, oversize lines, invalid UTF-8, retry counts,
//! timeouts and cancellation. Both clients against a server no one here
//! wrote (aimock) are in `tests/providers/` at the workspace root.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)] // tests

mod anthropic;
mod openai;
mod server;
mod structured;
mod transport;
mod usage;

use std::sync::Mutex;
use std::time::Duration;

use tinyagents_core::{
    ChatModel, ChatRequest, ChatResponse, Message, ModelDelta, ModelError, ModelOptions,
    ToolDefinition,
};
use tinyagents_models::{
    AnthropicConfig, AnthropicModel, HttpOptions, OpenAiConfig, OpenAiModel, RetryPolicy,
};

use server::Server;

/// Short waits so retry tests stay fast; a generous timeout so no test
/// depends on the machine's speed.
pub fn fast_http() -> HttpOptions {
    HttpOptions::default()
        .with_timeout(Duration::from_secs(20))
        .with_retry(
            RetryPolicy::default()
                .with_max_retries(2)
                .with_backoff(Duration::from_millis(5), Duration::from_millis(20)),
        )
}

pub fn openai_model(server: &Server, http: HttpOptions) -> OpenAiModel {
    let config = OpenAiConfig::compatible(format!("{}/v1", server.url()), "gpt-test")
        .with_api_key("sk-test")
        .with_http(http);
    OpenAiModel::new(config).unwrap()
}

pub fn anthropic_model(server: &Server, http: HttpOptions) -> AnthropicModel {
    let config = AnthropicConfig::new("claude-test")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key("ant-test")
        .with_http(http);
    AnthropicModel::new(config).unwrap()
}

pub fn add_tool() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "add".into(),
        description: "Adds two numbers.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
    }]
}

/// One call without listening for deltas.
pub async fn chat(
    model: &dyn ChatModel,
    messages: &[Message],
    tools: &[ToolDefinition],
) -> Result<ChatResponse, ModelError> {
    let options = ModelOptions::default();
    model
        .chat(ChatRequest {
            messages,
            tools,
            options: &options,
            deltas: None,
        })
        .await
}

/// One streaming call, with the deltas it reported.
pub async fn chat_streaming(
    model: &dyn ChatModel,
    messages: &[Message],
    tools: &[ToolDefinition],
) -> (Result<ChatResponse, ModelError>, Vec<ModelDelta>) {
    let options = ModelOptions::default();
    let deltas = Mutex::new(Vec::new());
    let sink = |delta: ModelDelta| deltas.lock().unwrap().push(delta);
    let result = model
        .chat(ChatRequest {
            messages,
            tools,
            options: &options,
            deltas: Some(&sink),
        })
        .await;
    (result, deltas.into_inner().unwrap())
}

/// `text` cut every `size` bytes, so events and lines straddle chunks.
pub fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

pub fn hello() -> Vec<Message> {
    vec![Message::system("Be brief."), Message::user("Add 1 and 2.")]
}
