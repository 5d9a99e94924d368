//! The Chat Completions request body, serialised straight from the borrowed
//! transcript (nothing of the history is copied into an intermediate tree).

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::SerializeMap;
use tinyagents_core::{ChatRequest, Message, ModelError, ToolDefinition};

use crate::wire::WireIds;

/// Encodes `request` for `model`. `max_tokens_key` is `max_completion_tokens`
/// for OpenAI and `max_tokens` for servers that only know the older name.
pub(crate) fn encode(
    model: &str,
    max_tokens_key: &'static str,
    request: &ChatRequest<'_>,
    stream: bool,
) -> Result<Vec<u8>, ModelError> {
    let mut ids = WireIds::default();
    let messages: Vec<WireMessage<'_>> = request
        .messages
        .iter()
        .map(|message| WireMessage::from_message(message, &mut ids))
        .collect();
    let body = Body {
        model: request.options.model.as_deref().unwrap_or(model),
        messages,
        request,
        stream,
        max_tokens_key,
    };
    serde_json::to_vec(&body).map_err(|e| ModelError::InvalidRequest {
        message: format!("cannot encode the request: {e}"),
    })
}

struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    request: &'a ChatRequest<'a>,
    stream: bool,
    max_tokens_key: &'static str,
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
        entry!("messages", &self.messages);
        if !self.request.tools.is_empty() {
            let tools: Vec<WireTool<'_>> = self.request.tools.iter().map(WireTool::new).collect();
            entry!("tools", &tools);
        }
        if let Some(temperature) = options.temperature {
            entry!("temperature", &temperature);
        }
        if let Some(max) = options.max_output_tokens {
            entry!(self.max_tokens_key, &max);
        }
        if self.stream {
            entry!("stream", &true);
            entry!(
                "stream_options",
                &serde_json::json!({ "include_usage": true })
            );
        }
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: String,
        content: &'a str,
    },
}

impl<'a> WireMessage<'a> {
    fn from_message(message: &'a Message, ids: &mut WireIds<'a>) -> Self {
        match message {
            Message::System { content } => Self::System { content },
            Message::User { content } => Self::User { content },
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => Self::Assistant {
                // OpenAI wants `null`, not "", beside tool calls.
                content: (!content.is_empty() || tool_calls.is_empty()).then_some(content.as_str()),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireToolCall {
                        id: ids.call(call.id.as_str(), call.provider_id.as_deref()),
                        kind: "function",
                        function: WireFunction {
                            name: &call.name,
                            arguments: match &call.raw_arguments {
                                Some(raw) => Cow::Borrowed(raw.as_str()),
                                None => Cow::Owned(call.arguments.to_string()),
                            },
                        },
                    })
                    .collect(),
            },
            Message::Tool {
                call_id,
                provider_id,
                content,
                ..
            } => Self::Tool {
                tool_call_id: ids.result(call_id.as_str(), provider_id.as_deref()),
                content,
            },
        }
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: &'a ToolDefinition,
}

impl<'a> WireTool<'a> {
    fn new(function: &'a ToolDefinition) -> Self {
        Self {
            kind: "function",
            function,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tinyagents_core::{CallId, ModelOptions, ModelToolCall};

    #[test]
    fn encodes_transcript_tools_and_options() {
        let calls = vec![
            ModelToolCall::from_text(Some("call_a".into()), "add", r#"{"a":1}"#)
                .into_call(CallId::new("p1")),
            ModelToolCall::from_text(None, "now", "{oops").into_call(CallId::new("p2")),
        ];
        let messages = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: calls,
                reasoning: None,
            },
            Message::Tool {
                call_id: CallId::new("p1"),
                provider_id: Some("call_a".into()),
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
        ];
        let tools = vec![ToolDefinition {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type":"object"}),
        }];
        let mut options = ModelOptions {
            temperature: Some(0.5),
            max_output_tokens: Some(99),
            ..ModelOptions::default()
        };
        options.extra.insert("seed".into(), json!(7));
        let request = ChatRequest {
            messages: &messages,
            tools: &tools,
            options: &options,
            deltas: None,
        };
        let body: Value = serde_json::from_slice(
            &encode("gpt", "max_completion_tokens", &request, true).unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}},
                        {"id": "p2", "type": "function", "function": {"name": "now", "arguments": "{oops"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_a", "content": "2"},
                    {"role": "tool", "tool_call_id": "p2", "content": "bad"}
                ],
                "tools": [{"type": "function", "function": {"name": "add", "description": "adds", "parameters": {"type": "object"}}}],
                "temperature": 0.5,
                "max_completion_tokens": 99,
                "stream": true,
                "stream_options": {"include_usage": true},
                "seed": 7
            })
        );
    }
}
