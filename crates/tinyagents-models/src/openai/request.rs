//! The Chat Completions request body, serialised straight from the borrowed
//! transcript (nothing of the history is copied into an intermediate tree).
//!
//! A request with [`ModelOptions::output_schema`](tinyagents_core::ModelOptions)
//! carries `"response_format": {"type": "json_schema", "json_schema": {…}}`
//! with `"strict": false`: schemas generated from Rust types rarely fit
//! OpenAI's strict subset, and the harness validates the answer itself.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tinyagents_core::{ChatRequest, Message, ModelError, OutputSchema, ToolDefinition};

use super::ToolOnlyContent;
use crate::schema_name::{MAX_SCHEMA_NAME, schema_name};
use crate::wire::WireIds;

/// What differs between OpenAI-compatible servers in a request's shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// `max_completion_tokens` for OpenAI, `max_tokens` for servers that
    /// only know the older name.
    pub(crate) max_tokens_key: &'static str,
    /// The text of a turn that only calls tools.
    pub(crate) tool_only_content: ToolOnlyContent,
}

/// Encodes `request` for `model`, shaped for its server.
pub(crate) fn encode(
    model: &str,
    shape: Shape,
    request: &ChatRequest<'_>,
    stream: bool,
) -> Result<Vec<u8>, ModelError> {
    let mut ids = WireIds::default();
    let messages: Vec<WireMessage<'_>> = request
        .messages
        .iter()
        .map(|message| WireMessage::from_message(message, &mut ids, shape.tool_only_content))
        .collect();
    let body = Body {
        model: request.options.model.as_deref().unwrap_or(model),
        messages,
        request,
        stream,
        max_tokens_key: shape.max_tokens_key,
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
            // OpenAI's default when tools are offered, sent explicitly:
            // some servers (llama-cpp-python's) read a missing one as
            // "none" and leave the tools out of the prompt.
            entry!("tool_choice", "auto");
        }
        if let Some(output) = &options.output_schema {
            entry!("response_format", &ResponseFormat::new(output));
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

/// `response_format` of a request that asks for structured output.
#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    schema: &'a Value,
    strict: bool,
}

impl<'a> ResponseFormat<'a> {
    fn new(output: &'a OutputSchema) -> Self {
        Self {
            kind: "json_schema",
            json_schema: JsonSchemaFormat {
                name: schema_name(&output.name, MAX_SCHEMA_NAME),
                description: output.description.as_deref(),
                schema: &output.schema,
                // Schemas from `schemars` rarely fit the strict subset
                // (every property required, no `additionalProperties`,
                // …); the harness checks the answer itself.
                strict: false,
            },
        }
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
    fn from_message(
        message: &'a Message,
        ids: &mut WireIds<'a>,
        tool_only_content: ToolOnlyContent,
    ) -> Self {
        match message {
            Message::System { content } => Self::System { content },
            Message::User { content } => Self::User { content },
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => Self::Assistant {
                // Beside tool calls, an empty text is `null` for OpenAI and
                // `""` for the servers that need a string.
                content: match tool_only_content {
                    _ if !content.is_empty() || tool_calls.is_empty() => Some(content.as_str()),
                    ToolOnlyContent::Null => None,
                    ToolOnlyContent::EmptyString => Some(""),
                },
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
    use tinyagents_core::{CallId, ModelOptions, ModelToolCall, OutputSchema};

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
        let shape = |tool_only_content| Shape {
            max_tokens_key: "max_completion_tokens",
            tool_only_content,
        };
        let body: Value = serde_json::from_slice(
            &encode("gpt", shape(ToolOnlyContent::Null), &request, true).unwrap(),
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
                "tool_choice": "auto",
                "temperature": 0.5,
                "max_completion_tokens": 99,
                "stream": true,
                "stream_options": {"include_usage": true},
                "seed": 7
            })
        );
        // Issue 12, item 4: for servers that need a string, the text of a
        // turn that only calls tools is "" (a turn with text keeps it).
        let body: Value = serde_json::from_slice(
            &encode("gpt", shape(ToolOnlyContent::EmptyString), &request, false).unwrap(),
        )
        .unwrap();
        assert_eq!(body["messages"][2]["content"], json!(""));
        assert_eq!(body["messages"][0]["content"], json!("be brief"));
        // Issue 12, item 5: `tool_choice` only when tools are offered, and a
        // caller's own value wins.
        let no_tools = ChatRequest {
            tools: &[],
            ..request
        };
        let body: Value = serde_json::from_slice(
            &encode("gpt", shape(ToolOnlyContent::Null), &no_tools, false).unwrap(),
        )
        .unwrap();
        assert!(body.get("tool_choice").is_none());
        let mut required = options.clone();
        required
            .extra
            .insert("tool_choice".into(), json!("required"));
        let forced = ChatRequest {
            options: &required,
            ..request
        };
        let body: Value = serde_json::from_slice(
            &encode("gpt", shape(ToolOnlyContent::Null), &forced, false).unwrap(),
        )
        .unwrap();
        assert_eq!(body["tool_choice"], json!("required"));
    }

    fn body_of(options: &ModelOptions) -> Value {
        let messages = vec![Message::user("hi")];
        let request = ChatRequest {
            messages: &messages,
            tools: &[],
            options,
            deltas: None,
        };
        let shape = Shape {
            max_tokens_key: "max_tokens",
            tool_only_content: ToolOnlyContent::Null,
        };
        serde_json::from_slice(&encode("gpt", shape, &request, false).unwrap()).unwrap()
    }

    #[test]
    fn an_output_schema_is_sent_as_a_json_schema_response_format() {
        let schema = json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        });
        let options = ModelOptions {
            output_schema: Some(OutputSchema {
                name: "Weather<Report> v2".into(),
                schema: schema.clone(),
                description: Some("Today's weather.".into()),
            }),
            ..ModelOptions::default()
        };
        let body = body_of(&options);
        assert_eq!(
            body["response_format"],
            json!({
                "type": "json_schema",
                "json_schema": {
                    "name": "Weather_Report__v2",
                    "description": "Today's weather.",
                    "schema": schema,
                    "strict": false
                }
            })
        );
        // Without a description the field is left out.
        let mut bare = options.clone();
        if let Some(output) = &mut bare.output_schema {
            output.description = None;
        }
        let format = &body_of(&bare)["response_format"]["json_schema"];
        assert!(format.get("description").is_none());
        assert_eq!(format["strict"], json!(false));
        // A caller's own `response_format` wins.
        let mut own = options.clone();
        own.extra
            .insert("response_format".into(), json!({"type": "json_object"}));
        assert_eq!(
            body_of(&own)["response_format"],
            json!({"type": "json_object"})
        );
    }

    #[test]
    fn without_an_output_schema_there_is_no_response_format() {
        let body = body_of(&ModelOptions::default());
        assert!(body.get("response_format").is_none(), "{body}");
    }
}
