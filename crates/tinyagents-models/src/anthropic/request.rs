//! The Messages request body, serialised from the borrowed transcript.
//!
//! System messages become the top-level `system` text. Tool results travel
//! as `tool_result` blocks of a user turn; consecutive messages of one role
//! are merged into one turn, so parallel results sit together right after
//! the assistant turn that called them. Empty text blocks, which the API
//! refuses, are left out.
//!
//! A request with an output schema also offers the output tool and forces
//! a tool choice (see [`super::output`]).

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tinyagents_core::{ChatRequest, Message, ModelError, ToolDefinition};

use super::output::OutputTool;
use crate::wire::WireIds;

/// Encodes `request` for `model`; `max_tokens` is used when the request
/// sets no cap (the API requires one). `output` is the output tool of a
/// request that asks for structured output.
pub(crate) fn encode(
    model: &str,
    max_tokens: u32,
    request: &ChatRequest<'_>,
    stream: bool,
    output: Option<&OutputTool>,
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
        output,
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
    output: Option<&'a OutputTool>,
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
        let offers_tools = !self.request.tools.is_empty();
        if offers_tools || self.output.is_some() {
            let mut tools: Vec<WireTool<'_>> =
                self.request.tools.iter().map(WireTool::new).collect();
            tools.extend(self.output.map(WireTool::output));
            entry!("tools", &tools);
        }
        if let Some(output) = self.output {
            // Alone, the output tool is forced; beside real tools, some
            // tool is: a real one, or the answer. The API refuses a forced
            // choice with extended thinking: then the model is only offered
            // the tool (and may answer in text, which the harness checks).
            let choice = if thinks(extra) {
                ToolChoice::Auto
            } else if offers_tools {
                ToolChoice::Any
            } else {
                ToolChoice::Tool { name: &output.name }
            };
            entry!("tool_choice", &choice);
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

    fn output(tool: &'a OutputTool) -> Self {
        Self {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
        }
    }
}

/// Whether `extra` turns extended thinking on (`"thinking": {"type":
/// "enabled", …}`, or any other type than `disabled`).
fn thinks(extra: &serde_json::Map<String, Value>) -> bool {
    extra
        .get("thinking")
        .is_some_and(|t| t.is_object() && t.get("type").and_then(Value::as_str) != Some("disabled"))
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolChoice<'a> {
    Auto,
    Any,
    Tool { name: &'a str },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tinyagents_core::{CallId, ModelOptions, ModelToolCall, OutputSchema};

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
            serde_json::from_slice(&encode("claude", 1024, &request, false, None).unwrap())
                .unwrap();
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

    /// The body of a request asking for `schema`, with `tools`.
    fn typed_body(schema: Value, tools: &[ToolDefinition]) -> Value {
        typed_body_with(schema, tools, serde_json::Map::new())
    }

    fn typed_body_with(
        schema: Value,
        tools: &[ToolDefinition],
        extra: serde_json::Map<String, Value>,
    ) -> Value {
        let messages = vec![Message::user("hi")];
        let options = ModelOptions {
            extra,
            output_schema: Some(OutputSchema {
                name: "Answer".into(),
                schema,
                description: Some("The sum.".into()),
            }),
            ..ModelOptions::default()
        };
        let request = ChatRequest {
            messages: &messages,
            tools,
            options: &options,
            deltas: None,
        };
        let output = options
            .output_schema
            .as_ref()
            .map(|schema| OutputTool::new(schema, tools));
        serde_json::from_slice(&encode("claude", 1024, &request, false, output.as_ref()).unwrap())
            .unwrap()
    }

    #[test]
    fn an_output_schema_alone_is_a_forced_tool() {
        let schema = json!({"type": "object", "properties": {"sum": {"type": "integer"}}});
        let body = typed_body(schema.clone(), &[]);
        assert_eq!(
            body["tools"],
            json!([{
                "name": "respond_Answer",
                "description": "Give your final answer by calling this tool: its input is the answer. The answer: The sum.",
                "input_schema": schema
            }])
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "respond_Answer"})
        );
    }

    #[test]
    fn beside_real_tools_the_output_tool_makes_any_tool_required() {
        let tools = vec![ToolDefinition {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = typed_body(json!({"type": "object"}), &tools);
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["add", "respond_Answer"]);
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
    }

    #[test]
    fn a_non_object_output_schema_is_wrapped_in_value() {
        let body = typed_body(json!({"type": "integer"}), &[]);
        assert_eq!(
            body["tools"][0]["input_schema"],
            json!({
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "required": ["value"]
            })
        );
    }

    #[test]
    fn with_extended_thinking_the_output_tool_is_offered_not_forced() {
        let mut extra = serde_json::Map::new();
        extra.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 2000}),
        );
        let body = typed_body_with(json!({"type": "object"}), &[], extra.clone());
        assert_eq!(body["tool_choice"], json!({"type": "auto"}));
        assert_eq!(body["tools"][0]["name"], "respond_Answer");
        extra.insert("thinking".into(), json!({"type": "disabled"}));
        let body = typed_body_with(json!({"type": "object"}), &[], extra);
        assert_eq!(body["tool_choice"]["type"], "tool");
    }

    #[test]
    fn without_an_output_schema_no_tool_is_forced() {
        let messages = vec![Message::user("hi")];
        let options = ModelOptions::default();
        let request = ChatRequest {
            messages: &messages,
            tools: &[],
            options: &options,
            deltas: None,
        };
        let body: Value =
            serde_json::from_slice(&encode("claude", 1024, &request, false, None).unwrap())
                .unwrap();
        assert!(body.get("tools").is_none(), "{body}");
        assert!(body.get("tool_choice").is_none(), "{body}");
    }
}
