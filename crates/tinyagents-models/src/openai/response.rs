//! Chat Completions answers: a whole response body, or a stream of
//! `chat.completion.chunk` events ending with `data: [DONE]`.
//!
//! Lenient where compatible servers differ (content as parts, arguments as
//! an object, tool-call deltas without an index, `reasoning_content` or
//! `reasoning`), strict where meaning would be lost (no choices, a tool call
//! without a name, a stream that stops before it is complete).

use serde_json::Value;
use tinyagents_core::{ChatResponse, DeltaSink, ModelDelta, ModelError, ModelToolCall, Usage};

use super::usage::usage;
use crate::sse::SseEvent;
use crate::wire::{StreamDecoder, classify_error_value, malformed, parse_object, str_field};

/// The most tool calls one response may carry.
const MAX_TOOL_CALLS: usize = 1024;

/// Parses a whole Chat Completions response body.
pub(crate) fn parse_body(body: &[u8]) -> Result<ChatResponse, ModelError> {
    let value = parse_object(body, "response")?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error_value(&value));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| malformed("response has no choices"))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed("choice has no message"))?;
    let mut content = text_of(message.get("content"));
    if content.is_empty() {
        content = str_field(message, "refusal").unwrap_or_default().to_owned();
    }
    let reasoning = str_field(message, "reasoning_content")
        .or_else(|| str_field(message, "reasoning"))
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        if calls.len() > MAX_TOOL_CALLS {
            return Err(malformed(format!(
                "response has more than {MAX_TOOL_CALLS} tool calls"
            )));
        }
        for call in calls {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = str_field(function, "name")
                .filter(|n| !n.is_empty())
                .ok_or_else(|| malformed("tool call has no name"))?;
            let id = str_field(call, "id").map(str::to_owned);
            tool_calls.push(match function.get("arguments") {
                Some(Value::String(text)) => ModelToolCall::from_text(id, name, text),
                None | Some(Value::Null) => ModelToolCall::from_text(id, name, ""),
                Some(other) => ModelToolCall::new(id, name, other.clone()),
            });
        }
    }
    Ok(ChatResponse {
        content,
        tool_calls,
        usage: value.get("usage").map(usage).unwrap_or_default(),
        reasoning,
        finish_reason: str_field(choice, "finish_reason").map(str::to_owned),
    })
}

/// Text content: a string, or an array of `{"type":"text","text":…}` parts.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_field(p, "text")).collect(),
        _ => String::new(),
    }
}

/// One tool call being assembled from deltas.
#[derive(Debug, Default)]
struct Slot {
    /// The provider's `index`, when it sends one.
    key: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
    announced: bool,
}

/// Assembles a streamed Chat Completions response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    content: String,
    reasoning: String,
    slots: Vec<Slot>,
    usage: Usage,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamDecoder for Decoder {
    fn event(&mut self, event: &SseEvent, sink: Option<DeltaSink<'_>>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk = parse_object(data.as_bytes(), "stream chunk")?;
        if event.event.as_deref() == Some("error")
            || chunk.get("error").is_some_and(|e| !e.is_null())
        {
            return Err(classify_error_value(&chunk));
        }
        if let Some(value) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = usage(value);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(false);
        };
        // Only the first choice is read (`n` is not requested).
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(false);
        };
        if let Some(delta) = choice.get("delta") {
            self.delta(delta, sink)?;
        }
        if let Some(reason) = str_field(choice, "finish_reason") {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(false)
    }

    fn finish(self) -> Result<ChatResponse, ModelError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::Transport {
                message: "the stream ended before the response was complete".to_owned(),
            });
        }
        let mut tool_calls = Vec::with_capacity(self.slots.len());
        for slot in self.slots {
            if slot.name.is_empty() {
                return Err(malformed("streamed tool call has no name"));
            }
            tool_calls.push(ModelToolCall::from_text(
                slot.id,
                slot.name,
                &slot.arguments,
            ));
        }
        Ok(ChatResponse {
            content: self.content,
            tool_calls,
            usage: self.usage,
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            finish_reason: self.finish_reason,
        })
    }
}

impl Decoder {
    fn delta(&mut self, delta: &Value, sink: Option<DeltaSink<'_>>) -> Result<(), ModelError> {
        let emit = |d: ModelDelta| {
            if let Some(sink) = sink {
                sink(d);
            }
        };
        if let Some(text) = str_field(delta, "content").filter(|t| !t.is_empty()) {
            self.content.push_str(text);
            emit(ModelDelta::Text {
                text: text.to_owned(),
            });
        }
        let reasoning =
            str_field(delta, "reasoning_content").or_else(|| str_field(delta, "reasoning"));
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            self.reasoning.push_str(text);
            emit(ModelDelta::Reasoning {
                text: text.to_owned(),
            });
        }
        let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for call in calls {
            let index = self.slot_for(call)?;
            let slot = &mut self.slots[index];
            if let Some(id) = str_field(call, "id").filter(|id| !id.is_empty()) {
                slot.id.get_or_insert_with(|| id.to_owned());
            }
            let function = call.get("function").unwrap_or(&Value::Null);
            let fragment = match function.get("arguments") {
                Some(Value::String(text)) => text.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            slot.arguments.push_str(&fragment);
            if let Some(name) = str_field(function, "name").filter(|n| !n.is_empty())
                && slot.name.is_empty()
            {
                slot.name = name.to_owned();
            }
            if !slot.announced && !slot.name.is_empty() {
                slot.announced = true;
                emit(ModelDelta::ToolCallStarted {
                    index,
                    name: slot.name.clone(),
                });
                if !slot.arguments.is_empty() {
                    emit(ModelDelta::ToolCallArguments {
                        index,
                        fragment: slot.arguments.clone(),
                    });
                }
            } else if slot.announced && !fragment.is_empty() {
                emit(ModelDelta::ToolCallArguments { index, fragment });
            }
        }
        Ok(())
    }

    /// The slot a tool-call delta belongs to: by its `index`; without one, a
    /// new id starts a new call and anything else continues the last.
    fn slot_for(&mut self, call: &Value) -> Result<usize, ModelError> {
        let key = call.get("index").and_then(Value::as_u64);
        let found = match key {
            Some(key) => self.slots.iter().position(|s| s.key == Some(key)),
            None => {
                let id = str_field(call, "id").filter(|id| !id.is_empty());
                let last = self.slots.len().checked_sub(1);
                match (id, last) {
                    (Some(id), Some(last))
                        if self.slots[last].id.as_deref().is_some_and(|l| l != id) =>
                    {
                        None
                    }
                    (_, last) => last,
                }
            }
        };
        if let Some(index) = found {
            return Ok(index);
        }
        if self.slots.len() >= MAX_TOOL_CALLS {
            return Err(malformed(format!(
                "stream has more than {MAX_TOOL_CALLS} tool calls"
            )));
        }
        self.slots.push(Slot {
            key,
            ..Slot::default()
        });
        Ok(self.slots.len() - 1)
    }
}
