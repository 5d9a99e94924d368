//! Messages answers: a whole `message` object, or the event stream
//! (`message_start`, `content_block_start`/`_delta`/`_stop`,
//! `message_delta`, `message_stop`, `ping`, `error`).
//!
//! Text blocks are joined; `thinking` blocks become the reasoning; each
//! `tool_use` block becomes a tool call whose streamed `partial_json` is
//! assembled and parsed at the end. Unknown event and block types are
//! skipped, so new API features do not break old clients.

use serde_json::Value;
use tinyagents_core::{ChatResponse, DeltaSink, ModelDelta, ModelError, ModelToolCall};

use super::usage::Counts;
use crate::sse::SseEvent;
use crate::wire::{StreamDecoder, classify_error_value, malformed, parse_object, str_field};

/// The most content blocks one response may carry.
const MAX_BLOCKS: usize = 4096;

/// Parses a whole Messages response body.
pub(crate) fn parse_body(body: &[u8]) -> Result<ChatResponse, ModelError> {
    let value = parse_object(body, "response")?;
    if str_field(&value, "type") == Some("error")
        || value.get("error").is_some_and(|e| !e.is_null())
    {
        return Err(classify_error_value(&value));
    }
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("response has no content"))?;
    if blocks.len() > MAX_BLOCKS {
        return Err(malformed(format!(
            "response has more than {MAX_BLOCKS} content blocks"
        )));
    }
    let mut response = ChatResponse::default();
    let mut reasoning = String::new();
    for block in blocks {
        match str_field(block, "type") {
            Some("text") => response
                .content
                .push_str(str_field(block, "text").unwrap_or_default()),
            Some("thinking") => {
                reasoning.push_str(str_field(block, "thinking").unwrap_or_default())
            }
            Some("tool_use") => {
                let name = str_field(block, "name")
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| malformed("tool_use block has no name"))?;
                let id = str_field(block, "id").map(str::to_owned);
                let input = match block.get("input") {
                    None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
                    Some(input) => input.clone(),
                };
                response
                    .tool_calls
                    .push(ModelToolCall::new(id, name, input));
            }
            _ => {}
        }
    }
    response.reasoning = (!reasoning.is_empty()).then_some(reasoning);
    response.finish_reason = str_field(&value, "stop_reason").map(str::to_owned);
    if let Some(usage) = value.get("usage") {
        response.usage = Counts::of(usage).usage();
    }
    Ok(response)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Thinking,
    /// A tool call, by its position among the response's calls.
    Tool(usize),
    Other,
}

#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    name: String,
    json: String,
    /// The `input` of `content_block_start`, used if no `partial_json` came.
    initial: Option<Value>,
}

/// Assembles a streamed Messages response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    blocks: Vec<(u64, BlockKind)>,
    calls: Vec<Call>,
    content: String,
    reasoning: String,
    usage: Counts,
    stop_reason: Option<String>,
    done: bool,
}

impl StreamDecoder for Decoder {
    fn event(&mut self, event: &SseEvent, sink: Option<DeltaSink<'_>>) -> Result<bool, ModelError> {
        let emit = |d: ModelDelta| {
            if let Some(sink) = sink {
                sink(d);
            }
        };
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let value = parse_object(event.data.as_bytes(), "stream event")?;
        let kind = str_field(&value, "type")
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(usage) = value.get("message").and_then(|m| m.get("usage")) {
                    self.usage.read(usage);
                }
            }
            "content_block_start" => {
                let index = block_index(&value)?;
                if self.blocks.len() >= MAX_BLOCKS {
                    return Err(malformed(format!(
                        "stream has more than {MAX_BLOCKS} content blocks"
                    )));
                }
                let block = value.get("content_block").unwrap_or(&Value::Null);
                let kind = match str_field(block, "type") {
                    Some("text") => {
                        self.text(str_field(block, "text").unwrap_or_default(), &emit);
                        BlockKind::Text
                    }
                    Some("thinking") => {
                        self.thinking(str_field(block, "thinking").unwrap_or_default(), &emit);
                        BlockKind::Thinking
                    }
                    Some("tool_use") => {
                        let name = str_field(block, "name")
                            .filter(|n| !n.is_empty())
                            .ok_or_else(|| malformed("tool_use block has no name"))?;
                        let position = self.calls.len();
                        self.calls.push(Call {
                            id: str_field(block, "id").map(str::to_owned),
                            name: name.to_owned(),
                            json: String::new(),
                            initial: block
                                .get("input")
                                .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                                .cloned(),
                        });
                        emit(ModelDelta::ToolCallStarted {
                            index: position,
                            name: name.to_owned(),
                        });
                        BlockKind::Tool(position)
                    }
                    _ => BlockKind::Other,
                };
                self.blocks.push((index, kind));
            }
            "content_block_delta" => {
                let index = block_index(&value)?;
                let kind = self
                    .blocks
                    .iter()
                    .rev()
                    .find(|(i, _)| *i == index)
                    .map(|(_, kind)| *kind)
                    .ok_or_else(|| malformed(format!("delta for unknown content block {index}")))?;
                let delta = value.get("delta").unwrap_or(&Value::Null);
                match (kind, str_field(delta, "type")) {
                    (BlockKind::Text, Some("text_delta")) => {
                        self.text(str_field(delta, "text").unwrap_or_default(), &emit)
                    }
                    (BlockKind::Thinking, Some("thinking_delta")) => {
                        self.thinking(str_field(delta, "thinking").unwrap_or_default(), &emit);
                    }
                    (BlockKind::Tool(position), Some("input_json_delta")) => {
                        let fragment = str_field(delta, "partial_json").unwrap_or_default();
                        if !fragment.is_empty() {
                            if let Some(call) = self.calls.get_mut(position) {
                                call.json.push_str(fragment);
                            }
                            emit(ModelDelta::ToolCallArguments {
                                index: position,
                                fragment: fragment.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = value.get("delta").and_then(|d| str_field(d, "stop_reason")) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.usage.read(usage);
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => return Err(classify_error_value(&value)),
            _ => {}
        }
        Ok(false)
    }

    fn finish(self) -> Result<ChatResponse, ModelError> {
        if !self.done {
            return Err(ModelError::Transport {
                message: "the stream ended before message_stop".to_owned(),
            });
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|call| match call.initial {
                Some(input) if call.json.trim().is_empty() => {
                    ModelToolCall::new(call.id, call.name, input)
                }
                _ => ModelToolCall::from_text(call.id, call.name, &call.json),
            })
            .collect();
        Ok(ChatResponse {
            content: self.content,
            tool_calls,
            usage: self.usage.usage(),
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            finish_reason: self.stop_reason,
        })
    }
}

impl Decoder {
    fn text(&mut self, text: &str, emit: &impl Fn(ModelDelta)) {
        if !text.is_empty() {
            self.content.push_str(text);
            emit(ModelDelta::Text {
                text: text.to_owned(),
            });
        }
    }

    fn thinking(&mut self, text: &str, emit: &impl Fn(ModelDelta)) {
        if !text.is_empty() {
            self.reasoning.push_str(text);
            emit(ModelDelta::Reasoning {
                text: text.to_owned(),
            });
        }
    }
}

fn block_index(value: &Value) -> Result<u64, ModelError> {
    value
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("content block event has no index"))
}
