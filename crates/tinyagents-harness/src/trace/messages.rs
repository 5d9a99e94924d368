//! A chat's messages as the GenAI conventions' `gen_ai.input.messages` and
//! `gen_ai.output.messages` hold them: JSON arrays of `{role, parts}`, each
//! part `text`, `reasoning`, `tool_call` or `tool_call_response`. Built
//! only under `model_io` capture on an enabled span, and scrubbed whole by
//! the run's redaction before it is recorded.

use serde_json::{Map, Value, json};
use tinyagents_core::{ChatResponse, Message, ToolCall};

use crate::call::Redaction;

/// The request's messages, redacted, as a JSON array.
pub(super) fn input(messages: &[Message], redaction: &Redaction) -> String {
    let messages = messages.iter().map(message).collect();
    scrubbed(Value::Array(messages), redaction)
}

/// The model's answer, redacted, as a JSON array of one message.
pub(super) fn output(response: &ChatResponse, redaction: &Redaction) -> String {
    let mut parts = Vec::new();
    if let Some(reasoning) = &response.reasoning {
        parts.push(json!({"type": "reasoning", "content": reasoning}));
    }
    if !response.content.is_empty() {
        parts.push(json!({"type": "text", "content": response.content}));
    }
    for call in &response.tool_calls {
        let arguments = call
            .raw_arguments
            .as_ref()
            .map_or_else(|| call.arguments.clone(), |raw| json!(raw));
        parts.push(json!({
            "type": "tool_call",
            "id": call.provider_id,
            "name": call.name,
            "arguments": arguments,
        }));
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("parts".into(), Value::Array(parts));
    if let Some(reason) = &response.finish_reason {
        message.insert("finish_reason".into(), json!(reason));
    }
    scrubbed(Value::Array(vec![Value::Object(message)]), redaction)
}

fn scrubbed(mut value: Value, redaction: &Redaction) -> String {
    redaction.value(&mut value);
    value.to_string()
}

fn message(message: &Message) -> Value {
    match message {
        Message::System { content } => text("system", content),
        Message::User { content } => text("user", content),
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => {
            let mut parts = Vec::new();
            if let Some(reasoning) = reasoning {
                parts.push(json!({"type": "reasoning", "content": reasoning}));
            }
            if !content.is_empty() {
                parts.push(json!({"type": "text", "content": content}));
            }
            parts.extend(tool_calls.iter().map(tool_call));
            json!({"role": "assistant", "parts": parts})
        }
        Message::Tool {
            call_id, content, ..
        } => json!({
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": call_id, "response": content}],
        }),
    }
}

fn text(role: &str, content: &str) -> Value {
    json!({"role": role, "parts": [{"type": "text", "content": content}]})
}

fn tool_call(call: &ToolCall) -> Value {
    let arguments = call
        .raw_arguments
        .as_ref()
        .map_or_else(|| call.arguments.clone(), |raw| json!(raw));
    json!({"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments})
}
