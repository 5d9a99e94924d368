//! A tool call as the harness sees it, and the result a tool gives back.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::depth::{MAX_ARGUMENT_DEPTH, nests_deeper_than};
use crate::ids::CallId;

/// One call of a tool, issued by the model or nested inside another tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The harness's id for the call (`p1`, `p1/1`, …), unique in the run.
    pub id: CallId,
    /// The id the provider gave the call, kept for the transcript. Providers
    /// may repeat or omit it, so the harness never keys anything on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments. `Value::Null` when the model's text was not JSON or
    /// nested too deep (see [`ToolCall::raw_arguments`]).
    pub arguments: Value,
    /// The model's argument text, kept only when it was not valid JSON, so
    /// nothing is lost (the error sent back counts its bytes and does not
    /// quote it), or when it nested deeper than
    /// [`MAX_ARGUMENT_DEPTH`](crate::MAX_ARGUMENT_DEPTH) (see
    /// [`ToolCall::confine_deep_arguments`]; admission refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl ToolCall {
    /// A call with JSON arguments.
    pub fn new(id: CallId, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id,
            provider_id: None,
            name: name.into(),
            arguments,
            raw_arguments: None,
        }
    }

    /// The call with arguments that nest deeper than
    /// [`MAX_ARGUMENT_DEPTH`] moved into [`raw_arguments`] as compact JSON
    /// text (`arguments` become `Null`): a form that adds no nesting to the
    /// transcript, checkpoint, suspended run or session that keeps the
    /// call, so they always read back, and that admission refuses with an
    /// error naming the depth. Other calls are returned as they are, after
    /// a check that stops at the bound.
    ///
    /// [`raw_arguments`]: ToolCall::raw_arguments
    #[must_use]
    pub fn confine_deep_arguments(mut self) -> Self {
        if self.raw_arguments.is_none() && nests_deeper_than(&self.arguments, MAX_ARGUMENT_DEPTH) {
            self.raw_arguments = Some(self.arguments.take().to_string());
        }
        self
    }
}

/// A tool call as a model provider reports it, before the harness gives it
/// an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolCall {
    /// The provider's id for the call, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The tool name.
    pub name: String,
    /// Parsed arguments, or `Null` when the text was not JSON.
    pub arguments: Value,
    /// The original text when it did not parse as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl ModelToolCall {
    /// A call whose arguments are already parsed.
    pub fn new(provider_id: Option<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            provider_id,
            name: name.into(),
            arguments,
            raw_arguments: None,
        }
    }

    /// A call from the provider's argument text. Text that is not JSON is kept
    /// verbatim in `raw_arguments` so the harness can answer it with an error
    /// the model can repair. Empty text means `{}`, as several providers send
    /// it for tools without parameters.
    pub fn from_text(provider_id: Option<String>, name: impl Into<String>, text: &str) -> Self {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Self::new(provider_id, name, Value::Object(serde_json::Map::new()));
        }
        match serde_json::from_str(trimmed) {
            Ok(arguments) => Self::new(provider_id, name, arguments),
            Err(_) => Self {
                provider_id,
                name: name.into(),
                arguments: Value::Null,
                raw_arguments: Some(text.to_owned()),
            },
        }
    }

    /// Gives the call its harness id.
    pub fn into_call(self, id: CallId) -> ToolCall {
        ToolCall {
            id,
            provider_id: self.provider_id,
            name: self.name,
            arguments: self.arguments,
            raw_arguments: self.raw_arguments,
        }
    }
}

/// Whether a call may run again after a crash left its outcome unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolReplay {
    /// Running it twice is harmless (reads, idempotent writes).
    Safe,
    /// Its effect must not repeat (payments, messages, deletions). The
    /// default: a tool must opt in to being replayed.
    #[default]
    Never,
}

/// A request from a tool's result to change the course of the run. Honoured
/// for model-issued calls only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolControl {
    /// End the run after this turn's calls settle; the final text is the
    /// model's text of this turn.
    Terminate,
    /// End the run after this turn and use this result's content as the
    /// final answer, without asking the model again.
    ReturnDirect,
}

/// What a tool returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text the model reads.
    pub content: String,
    /// The tool reports that it failed; the model still gets the content.
    #[serde(default)]
    pub is_error: bool,
    /// Host-only data about the call; never sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// A request to end the run, honoured for model-issued calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ToolControl>,
}

impl ToolResult {
    /// A successful text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            metadata: None,
            control: None,
        }
    }

    /// A successful result whose content is the JSON text of `value`.
    pub fn json(value: &Value) -> Self {
        Self::text(value.to_string())
    }

    /// A result in which the tool reports its own failure.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(content)
        }
    }

    /// Adds host-only metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Adds a control request.
    #[must_use]
    pub fn with_control(mut self, control: ToolControl) -> Self {
        self.control = Some(control);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_json_arguments_keep_their_text() {
        let call = ModelToolCall::from_text(Some("x".into()), "add", "{a: 1");
        assert_eq!(call.arguments, Value::Null);
        assert_eq!(call.raw_arguments.as_deref(), Some("{a: 1"));
        let empty = ModelToolCall::from_text(None, "now", "  ");
        assert_eq!(empty.arguments, serde_json::json!({}));
    }
}
