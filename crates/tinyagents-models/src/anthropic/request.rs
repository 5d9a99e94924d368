//! The Messages request body, serialised from the borrowed transcript.
//!
//! System messages become the top-level `system` text. Tool results travel
//! as `tool_result` blocks of a user turn; consecutive messages of one role
//! are merged into one turn, so parallel results sit together right after
//! the assistant turn that called them. Empty text blocks, which the API
//! refuses, are left out.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tinyagents_core::{ChatRequest, Message, ModelError, ToolDefinition};

use crate::wire::WireIds;

/// Encodes `request` for `model`; `max_tokens` is used when the request
/// sets no cap (the API requires one).
pub(crate) fn encode(
    model: &str,
    max_tokens: u32,
    request: &ChatRequest<'_>,
    stream: bool,
) -> Result<Vec<u8>, ModelError> {
    let mut ids = WireIds::default();
    let mut system = String::new();
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for message in request.messages {
        let (role, blocks) = match message {
            Message::System { content } => {
                if !content.is_empty() {
                    if !system.is_empty() {
                        system.push_str("\n\n");
                    }
                    system.push_str(content);
                }
                continue;
            }
            Message::User { content } => ("user", text_block(content)),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut blocks = text_block(content);
                blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                    id: ids.call(call.id.as_str(), call.provider_id.as_deref()),
                    name: &call.name,
                    // The API wants an object; arguments that were not one
                    // (or not JSON) are sent as `{}`, and the tool's error
                    // result tells the model what was wrong.
                    input: if call.arguments.is_object() {
                        Cow::Borrowed(&call.arguments)
                    } else {
                        Cow::Owned(Value::Object(serde_json::Map::new()))
                    },
                }));
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                provider_id,
                content,
                is_error,
                ..
            } => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: ids.result(call_id.as_str(), provider_id.as_deref()),
                    content,
                    is_error: *is_error,
                }],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    let body = Body {
        model: request.options.model.as_deref().unwrap_or(model),
        max_tokens: request.options.max_output_tokens.unwrap_or(max_tokens),
        system: &system,
        turns: &turns,
        request,
        stream,
    };
    serde_json::to_vec(&body).map_err(|e| ModelError::InvalidRequest {
        message: format!("cannot encode the request: {e}"),
    })
}

fn text_block(text: &str) -> Vec<Block<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Block::Text { text }]
    }
}

struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: &'a str,
    turns: &'a [Turn<'a>],
    request: &'a ChatRequest<'a>,
    stream: bool,
}

impl Serialize for Body<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let options = self.request.options;
        let extra = &options.extra;
        let mut map = serializer.serialize_map(None)?;
        // A key in `extra` replaces the one we would write.
        macro_rules! entry {
            ($key:expr, $value:expr) => {
                if !extra.contains_key($key) {
                    map.serialize_entry($key, $value)?;
                }
            };
        }
        entry!("model", self.model);
        entry!("max_tokens", &self.max_tokens);
        if !self.system.is_empty() {
            entry!("system", self.system);
        }
        entry!("messages", self.turns);
        if !self.request.tools.is_empty() {
            let tools: Vec<WireTool<'_>> = self.request.tools.iter().map(WireTool::new).collect();
            entry!("tools", &tools);
        }
        if let Some(temperature) = options.temperature {
            entry!("temperature", &temperature);
        }
        if self.stream {
            entry!("stream", &true);
        }
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: String,
        name: &'a str,
        input: Cow<'a, Value>,
    },
    ToolResult {
        tool_use_id: String,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

impl<'a> WireTool<'a> {
    fn new(tool: &'a ToolDefinition) -> Self {
        Self {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tinyagents_core::{CallId, ModelOptions, ModelToolCall};

    #[test]
    fn encodes_system_turns_tool_blocks_and_merges_results() {
        let calls = vec![
            ModelToolCall::from_text(Some("toolu_1".into()), "add", r#"{"a":1}"#)
                .into_call(CallId::new("p1")),
            ModelToolCall::from_text(None, "now", "{oops").into_call(CallId::new("p2")),
        ];
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant {
                content: "calling".into(),
                tool_calls: calls,
                reasoning: Some("hmm".into()),
            },
            Message::Tool {
                call_id: CallId::new("p1"),
                provider_id: Some("toolu_1".into()),
                name: "add".into(),
                content: "2".into(),
                is_error: false,
            },
            Message::Tool {
                call_id: CallId::new("p2"),
                provider_id: None,
                name: "now".into(),
                content: "bad".into(),
                is_error: true,
            },
            Message::system("and kind"),
            Message::assistant(""),
        ];
        let tools = vec![ToolDefinition {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type":"object"}),
        }];
        let options = ModelOptions::default();
        let request = ChatRequest {
            messages: &messages,
            tools: &tools,
            options: &options,
            deltas: None,
        };
        let body: Value =
            serde_json::from_slice(&encode("claude", 1024, &request, false).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude",
                "max_tokens": 1024,
                "system": "be brief\n\nand kind",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
                        {"type": "tool_use", "id": "p2", "name": "now", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"},
                        {"type": "tool_result", "tool_use_id": "p2", "content": "bad", "is_error": true}
                    ]}
                ],
                "tools": [{"name": "add", "description": "adds", "input_schema": {"type": "object"}}]
            })
        );
    }
}
