//! Structured output over the Messages API, which has no `response_format`:
//! a forced tool.
//!
//! A request with an [`OutputSchema`] offers one more tool, the *output
//! tool*, named `respond_<schema name>` (sanitised to `[A-Za-z0-9_-]`, cut
//! to 64 characters, and given a `_2`, `_3`, … suffix if a real tool already
//! has that name). Its `input_schema` is the schema; a schema that is not an
//! object schema (`{"type": "integer"}`, an `anyOf`, …) is wrapped as
//! `{"type": "object", "properties": {"value": <schema>}, "required":
//! ["value"]}`, with its `$defs`/`definitions` moved to the wrapper's root
//! so that `#/$defs/…` references still resolve. The request forces a tool:
//! `{"type": "tool", "name": <output tool>}` when there are no real tools,
//! `{"type": "any"}` when there are (the model calls a real tool or
//! answers through the output tool).
//!
//! On the way back, a call of the output tool is the answer, not a tool
//! call: when it is the only kind of call in the response, the response's
//! `content` becomes the JSON text of its input (of `value` when wrapped)
//! and the response has no tool calls; when real calls come with it, the
//! real calls are kept and the output call is dropped (the model answers
//! again after their results). The harness never sees the output tool, so
//! no assistant turn of the history it sends back contains it.
//!
//! Streaming: the output tool's deltas are not reported at all (neither its
//! `ToolCallStarted` nor its argument fragments), and the real calls'
//! deltas are renumbered as if it were not there, so every reported index
//! is the call's position in the final response. The answer's text arrives
//! whole, in the response.

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tinyagents_core::{
    ChatResponse, DeltaSink, ModelDelta, ModelToolCall, OutputSchema, ToolDefinition,
};

use crate::schema_name::{MAX_SCHEMA_NAME, schema_name};

/// The prefix of the output tool's name.
const PREFIX: &str = "respond_";

/// The tool a request with an output schema offers and forces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutputTool {
    /// Its name, unique among the request's tools.
    pub(crate) name: String,
    /// What it is for, for the model.
    pub(crate) description: String,
    /// The schema, wrapped in an object when it was not one.
    pub(crate) input_schema: Value,
    /// Whether the answer is the input's `value`.
    wrapped: bool,
}

impl OutputTool {
    /// The output tool for `schema`, named apart from `tools`.
    pub(crate) fn new(schema: &OutputSchema, tools: &[ToolDefinition]) -> Self {
        let base = format!(
            "{PREFIX}{}",
            schema_name(&schema.name, MAX_SCHEMA_NAME - PREFIX.len())
        );
        let taken = |name: &str| tools.iter().any(|tool| tool.name == name);
        let mut name = base.clone();
        let mut n = 2u32;
        while taken(&name) {
            let suffix = format!("_{n}");
            let keep = base.len().min(MAX_SCHEMA_NAME - suffix.len());
            name = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        let wrapped = !is_object_schema(&schema.schema);
        let input_schema = if wrapped {
            wrap(&schema.schema)
        } else {
            schema.schema.clone()
        };
        let mut description = if wrapped {
            "Give your final answer by calling this tool: put the answer in `value`.".to_owned()
        } else {
            "Give your final answer by calling this tool: its input is the answer.".to_owned()
        };
        if let Some(more) = schema.description.as_deref().filter(|d| !d.is_empty()) {
            description.push_str(" The answer: ");
            description.push_str(more);
        }
        Self {
            name,
            description,
            input_schema,
            wrapped,
        }
    }

    /// Maps a response of a request that offered this tool: a call of it
    /// alone becomes the content; beside real calls it is dropped.
    pub(crate) fn answer(&self, mut response: ChatResponse) -> ChatResponse {
        let (outputs, real): (Vec<_>, Vec<_>) = std::mem::take(&mut response.tool_calls)
            .into_iter()
            .partition(|call| call.name == self.name);
        if !real.is_empty() {
            response.tool_calls = real;
            return response;
        }
        if let Some(call) = outputs.into_iter().next() {
            // Text before the answer (rare when the tool is forced) would
            // make the content not JSON: the answer replaces it.
            response.content = self.text_of(call);
        }
        response
    }

    /// The answer's JSON text; arguments that were not JSON are passed on
    /// as they came, for the harness to refuse.
    fn text_of(&self, call: ModelToolCall) -> String {
        if let Some(raw) = call.raw_arguments {
            return raw;
        }
        match call.arguments {
            Value::Object(mut input) if self.wrapped && input.contains_key("value") => input
                .remove("value")
                .map(|value| value.to_string())
                .unwrap_or_default(),
            other => other.to_string(),
        }
    }

    /// A sink that passes `sink` every delta except the output tool's,
    /// renumbering the real calls.
    pub(crate) fn filter<'a>(&'a self, sink: DeltaSink<'a>) -> DeltaFilter<'a> {
        DeltaFilter {
            name: &self.name,
            sink,
            positions: Mutex::new(Vec::new()),
        }
    }
}

/// Whether `schema` describes objects only (what `input_schema` must be).
fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// `{"type":"object","properties":{"value":schema},"required":["value"]}`,
/// with the schema's root-level keywords that references point into
/// (`$defs`, `definitions`) and its `$schema` moved to the new root.
fn wrap(schema: &Value) -> Value {
    let mut inner = schema.clone();
    let mut root = Map::new();
    if let Value::Object(object) = &mut inner {
        for key in ["$schema", "$defs", "definitions"] {
            if let Some(value) = object.remove(key) {
                root.insert(key.to_owned(), value);
            }
        }
    }
    root.insert("type".to_owned(), Value::from("object"));
    let mut properties = Map::new();
    properties.insert("value".to_owned(), inner);
    root.insert("properties".to_owned(), Value::Object(properties));
    root.insert(
        "required".to_owned(),
        Value::from(vec![Value::from("value")]),
    );
    Value::Object(root)
}

/// Passes deltas on without the output tool's (see the module docs).
pub(crate) struct DeltaFilter<'a> {
    name: &'a str,
    sink: DeltaSink<'a>,
    /// By the decoder's call position: the position reported for it, or
    /// `None` for the output tool.
    positions: Mutex<Vec<Option<usize>>>,
}

impl DeltaFilter<'_> {
    /// Takes one delta from the decoder.
    pub(crate) fn pass(&self, delta: ModelDelta) {
        let delta = {
            let mut positions = self.positions.lock();
            match delta {
                ModelDelta::ToolCallStarted { index, name } => {
                    let reported = positions.iter().flatten().count();
                    if positions.len() <= index {
                        positions.resize(index + 1, None);
                    }
                    if name == self.name {
                        positions[index] = None;
                        return;
                    }
                    positions[index] = Some(reported);
                    ModelDelta::ToolCallStarted {
                        index: reported,
                        name,
                    }
                }
                ModelDelta::ToolCallArguments { index, fragment } => {
                    match positions.get(index).copied().flatten() {
                        Some(reported) => ModelDelta::ToolCallArguments {
                            index: reported,
                            fragment,
                        },
                        None => return,
                    }
                }
                other => other,
            }
        };
        (self.sink)(delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(name: &str, schema: Value) -> OutputSchema {
        OutputSchema {
            name: name.into(),
            schema,
            description: None,
        }
    }

    fn tool(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn the_output_tool_is_named_after_the_schema_and_apart_from_real_tools() {
        let object = json!({"type": "object"});
        let plain = OutputTool::new(&schema("Weather Report", object.clone()), &[]);
        assert_eq!(plain.name, "respond_Weather_Report");
        assert_eq!(plain.input_schema, object);
        let taken = [tool("respond_Answer"), tool("respond_Answer_2")];
        let apart = OutputTool::new(&schema("Answer", object.clone()), &taken);
        assert_eq!(apart.name, "respond_Answer_3");
        let long = OutputTool::new(&schema(&"x".repeat(200), object.clone()), &[]);
        assert_eq!(long.name.len(), 64);
        let long_taken = OutputTool::new(&schema(&"x".repeat(200), object), &[tool(&long.name)]);
        assert_eq!(long_taken.name.len(), 64);
        assert!(long_taken.name.ends_with("_2"));
    }

    #[test]
    fn a_non_object_schema_is_wrapped_with_its_definitions_hoisted() {
        let integer = OutputTool::new(&schema("n", json!({"type": "integer"})), &[]);
        assert_eq!(
            integer.input_schema,
            json!({
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "required": ["value"]
            })
        );
        let choice = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "oneOf": [{"$ref": "#/$defs/A"}, {"type": "null"}],
            "$defs": {"A": {"type": "object"}}
        });
        let wrapped = OutputTool::new(&schema("c", choice), &[]);
        assert_eq!(
            wrapped.input_schema,
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": {"A": {"type": "object"}},
                "type": "object",
                "properties": {"value": {"oneOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}},
                "required": ["value"]
            })
        );
        assert!(wrapped.description.contains("`value`"));
    }

    #[test]
    fn the_output_call_alone_is_the_answer() {
        let output = OutputTool::new(&schema("n", json!({"type": "integer"})), &[]);
        let response = ChatResponse::tool_calls(vec![ModelToolCall::new(
            Some("toolu_1".into()),
            &output.name,
            json!({"value": 42}),
        )]);
        let answer = output.answer(response);
        assert_eq!(answer.content, "42");
        assert!(answer.tool_calls.is_empty());
        // Arguments that were not JSON reach the harness as they came.
        let broken = ChatResponse::tool_calls(vec![ModelToolCall::from_text(
            None,
            &output.name,
            "{\"value\": 4",
        )]);
        assert_eq!(output.answer(broken).content, "{\"value\": 4");
        // A wrapped input without `value` is passed whole, to be refused.
        let missing =
            ChatResponse::tool_calls(vec![ModelToolCall::new(None, &output.name, json!({}))]);
        assert_eq!(output.answer(missing).content, "{}");
    }

    #[test]
    fn a_response_without_the_output_tool_is_unchanged() {
        let output = OutputTool::new(&schema("a", json!({"type": "object"})), &[]);
        let text = ChatResponse::text("plain");
        assert_eq!(output.answer(text.clone()), text);
        let call = ChatResponse::tool_calls(vec![ModelToolCall::new(None, "add", json!({}))]);
        assert_eq!(output.answer(call.clone()), call);
    }

    #[test]
    fn the_filter_hides_the_output_tool_and_renumbers_real_calls() {
        let output = OutputTool::new(&schema("a", json!({"type": "object"})), &[]);
        let seen = Mutex::new(Vec::new());
        let sink = |delta: ModelDelta| seen.lock().push(delta);
        let filter = output.filter(&sink);
        for delta in [
            ModelDelta::Text { text: "hi".into() },
            ModelDelta::ToolCallStarted {
                index: 0,
                name: output.name.clone(),
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: "{\"a\"".into(),
            },
            ModelDelta::ToolCallStarted {
                index: 1,
                name: "add".into(),
            },
            ModelDelta::ToolCallArguments {
                index: 1,
                fragment: "{}".into(),
            },
        ] {
            filter.pass(delta);
        }
        assert_eq!(
            seen.into_inner(),
            vec![
                ModelDelta::Text { text: "hi".into() },
                ModelDelta::ToolCallStarted {
                    index: 0,
                    name: "add".into()
                },
                ModelDelta::ToolCallArguments {
                    index: 0,
                    fragment: "{}".into()
                },
            ]
        );
    }

    /// SSE events of a Messages stream whose blocks are `blocks` (each a
    /// `content_block` and its `input_json_delta` fragments).
    fn stream(blocks: &[(Value, &[&str])]) -> String {
        let mut out = String::new();
        let mut event = |value: Value| {
            let kind = value["type"].as_str().unwrap().to_owned();
            out.push_str(&format!("event: {kind}\ndata: {value}\n\n"));
        };
        event(
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        );
        for (index, (block, fragments)) in blocks.iter().enumerate() {
            event(json!({"type": "content_block_start", "index": index, "content_block": block}));
            for fragment in *fragments {
                event(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": fragment}}));
            }
            event(json!({"type": "content_block_stop", "index": index}));
        }
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        );
        event(json!({"type": "message_stop"}));
        out
    }

    /// What `AnthropicModel::chat` does with a streamed answer.
    fn decode(output: &OutputTool, text: &str) -> (ChatResponse, Vec<ModelDelta>) {
        let seen = Mutex::new(Vec::new());
        let sink = |delta: ModelDelta| seen.lock().push(delta);
        let filter = output.filter(&sink);
        let filtered = |delta: ModelDelta| filter.pass(delta);
        // Cut into small chunks, as a network would.
        let chunks: Vec<&[u8]> = text.as_bytes().chunks(17).collect();
        let response =
            crate::wire::decode_stream::<super::super::response::Decoder>(chunks, Some(&filtered))
                .unwrap();
        (output.answer(response), seen.into_inner())
    }

    #[test]
    fn a_streamed_output_call_is_the_answer_and_reports_no_deltas() {
        let output = OutputTool::new(&schema("n", json!({"type": "integer"})), &[]);
        let text = stream(&[(
            json!({"type": "tool_use", "id": "toolu_1", "name": output.name, "input": {}}),
            &["{\"val", "ue\": 4", "2}"],
        )]);
        let (response, deltas) = decode(&output, &text);
        assert_eq!(response.content, "42");
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.usage.output_tokens, 9);
        assert_eq!(deltas, Vec::<ModelDelta>::new());
    }

    #[test]
    fn a_streamed_output_call_beside_a_real_call_is_dropped() {
        let output = OutputTool::new(&schema("a", json!({"type": "object"})), &[tool("add")]);
        let text = stream(&[
            (
                json!({"type": "tool_use", "id": "toolu_1", "name": output.name, "input": {}}),
                &["{\"sum\": 3}"],
            ),
            (
                json!({"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}}),
                &["{\"a\": 1,", " \"b\": 2}"],
            ),
        ]);
        let (response, deltas) = decode(&output, &text);
        assert_eq!(response.content, "");
        assert_eq!(
            response.tool_calls,
            vec![ModelToolCall::new(
                Some("toolu_2".into()),
                "add",
                json!({"a": 1, "b": 2})
            )]
        );
        assert_eq!(
            deltas,
            vec![
                ModelDelta::ToolCallStarted {
                    index: 0,
                    name: "add".into()
                },
                ModelDelta::ToolCallArguments {
                    index: 0,
                    fragment: "{\"a\": 1,".into()
                },
                ModelDelta::ToolCallArguments {
                    index: 0,
                    fragment: " \"b\": 2}".into()
                },
            ]
        );
    }

    #[test]
    fn a_whole_body_output_call_is_the_answer_or_dropped_beside_real_calls() {
        let output = OutputTool::new(&schema("a", json!({"type": "object"})), &[tool("add")]);
        let alone = json!({
            "type": "message", "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": output.name, "input": {"sum": 3}}],
            "stop_reason": "tool_use"
        });
        let response = output
            .answer(super::super::response::parse_body(alone.to_string().as_bytes()).unwrap());
        assert_eq!(response.content, r#"{"sum":3}"#);
        assert!(response.tool_calls.is_empty());
        let beside = json!({
            "type": "message", "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": output.name, "input": {"sum": 3}}
            ],
            "stop_reason": "tool_use"
        });
        let response = output
            .answer(super::super::response::parse_body(beside.to_string().as_bytes()).unwrap());
        assert_eq!(response.content, "");
        assert_eq!(
            response.tool_calls,
            vec![ModelToolCall::new(
                Some("toolu_1".into()),
                "add",
                json!({"a": 1})
            )]
        );
    }
}
