//! The model seam: what the harness asks a chat model and what it gets back.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::ModelToolCall;
use crate::limits::Usage;
use crate::message::Message;

/// A tool as the model is told about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments, without host-injected arguments.
    pub parameters: Value,
}

/// Options of a model call that a host or an agent definition sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelOptions {
    /// Overrides the provider's model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Cap on the completion's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The final answer must be a JSON value matching this schema;
    /// providers use their structured-output mechanism (see
    /// [`OutputSchema`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<OutputSchema>,
    /// Provider-specific fields, passed through as given.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, Value>,
}

/// A JSON Schema the model's final answer must match: OpenAI-compatible
/// providers send it as `response_format`, Anthropic as a forced tool. The
/// harness passes it on; checking the answer is the caller's
/// (`Agent::run_typed` validates it against the compiled schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// A name for the schema (providers want one: letters, digits, `_`
    /// and `-`; they sanitise others).
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
    /// What the answer is, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A piece of a streamed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelDelta {
    /// Visible text.
    Text {
        /// The new text.
        text: String,
    },
    /// Private reasoning text.
    Reasoning {
        /// The new text.
        text: String,
    },
    /// A tool call began.
    ToolCallStarted {
        /// The call's position in the response.
        index: usize,
        /// The tool's name.
        name: String,
    },
    /// More argument text of a tool call.
    ToolCallArguments {
        /// The call's position in the response.
        index: usize,
        /// The new text.
        fragment: String,
    },
}

/// Receives streamed deltas while a model call runs.
pub type DeltaSink<'a> = &'a (dyn Fn(ModelDelta) + Send + Sync);

/// What the harness sends a model. The history is borrowed, never copied.
#[derive(Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The transcript so far, system message first.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolDefinition],
    /// Options for this call.
    pub options: &'a ModelOptions,
    /// Where a streaming provider reports deltas, if anyone listens.
    pub deltas: Option<DeltaSink<'a>>,
}

impl std::fmt::Debug for ChatRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatRequest")
            .field("messages", &self.messages.len())
            .field("tools", &self.tools.len())
            .field("options", self.options)
            .field("streaming", &self.deltas.is_some())
            .finish()
    }
}

/// What a model answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Visible text.
    pub content: String,
    /// Tool calls, in the order the model issued them.
    #[serde(default)]
    pub tool_calls: Vec<ModelToolCall>,
    /// Tokens used.
    #[serde(default)]
    pub usage: Usage,
    /// Private reasoning, if the provider returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The provider's stop reason, as it wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

impl ChatResponse {
    /// A final answer.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }

    /// A turn that calls tools.
    pub fn tool_calls(calls: Vec<ModelToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::default()
        }
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The credentials were refused.
    #[error("authentication failed: {message}")]
    Authentication {
        /// The provider's message.
        message: String,
    },
    /// The provider asked us to slow down.
    #[error("rate limited (retry after {retry_after:?}): {message}")]
    RateLimited {
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The prompt did not fit the model's context.
    #[error("context length exceeded: {message}")]
    ContextLength {
        /// The provider's message.
        message: String,
    },
    /// The provider failed on its side.
    #[error("server error {status}: {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider's answer could not be understood.
    #[error("malformed response: {message}")]
    Malformed {
        /// What was wrong.
        message: String,
    },
    /// The request never got an answer (connection refused, reset, …).
    #[error("transport error: {message}")]
    Transport {
        /// What happened.
        message: String,
    },
    /// The request took longer than its timeout.
    #[error("model request timed out after {after_ms} ms")]
    Timeout {
        /// The timeout.
        after_ms: u64,
    },
    /// A scripted model ran out of responses.
    #[error("scripted model has no response left for call {call}")]
    ScriptExhausted {
        /// The 1-based number of the call that found the script empty.
        call: usize,
    },
    /// The request was refused before it was sent (bad configuration).
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// What was wrong.
        message: String,
    },
}

impl ModelError {
    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Server { .. }
                | Self::Transport { .. }
                | Self::Timeout { .. }
        )
    }

    /// A stable name of the kind of failure, for OpenTelemetry's
    /// `error.type` (`model.rate_limited`, `model.timeout`, …).
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Authentication { .. } => "model.authentication",
            Self::RateLimited { .. } => "model.rate_limited",
            Self::ContextLength { .. } => "model.context_length",
            Self::Server { .. } => "model.server",
            Self::Malformed { .. } => "model.malformed",
            Self::Transport { .. } => "model.transport",
            Self::Timeout { .. } => "model.timeout",
            Self::ScriptExhausted { .. } => "model.script_exhausted",
            Self::InvalidRequest { .. } => "model.invalid_request",
        }
    }
}

/// A chat model. Implementations must be cheap to share (`Arc<dyn ChatModel>`).
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// A name for events and spans (`gen_ai.request.model`).
    fn name(&self) -> &str;

    /// Who serves the model, as OpenTelemetry's `gen_ai.provider.name`
    /// names it (`openai`, `anthropic`, …); `unknown` unless the model
    /// says. A model that wraps another forwards it.
    fn provider(&self) -> &str {
        "unknown"
    }

    /// Whether its calls spend tokens and money (true). A "model" that
    /// stands for something else, such as an MCP client in the model's
    /// seat, says no: its calls are neither reserved, priced nor counted
    /// in its run's spend.
    fn metered(&self) -> bool {
        true
    }

    /// Answers one request. Dropping the future cancels the call.
    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError>;
}

/// `model` as the shared model a harness keeps: an `Arc<dyn ChatModel>`
/// (what a provider factory returns) as it is, anything else in a new
/// `Arc`. Builders take `impl ChatModel` through this, so a model, an
/// `Arc` of one and a shared `Arc<dyn ChatModel>` all go.
pub fn shared_model(model: impl ChatModel + 'static) -> std::sync::Arc<dyn ChatModel> {
    let mut slot = Some(model);
    if let Some(shared) = (&mut slot as &mut dyn std::any::Any)
        .downcast_mut::<Option<std::sync::Arc<dyn ChatModel>>>()
        .and_then(Option::take)
    {
        return shared;
    }
    // Invariant: the downcast failed, so nothing took the model out of the
    // slot.
    #[allow(clippy::expect_used)]
    std::sync::Arc::new(slot.expect("the model is still in its slot"))
}

/// A shared model is a model: `Arc<dyn ChatModel>` (what a provider
/// factory returns) goes wherever an `impl ChatModel` does.
#[async_trait]
impl<T: ChatModel + ?Sized> ChatModel for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn metered(&self) -> bool {
        (**self).metered()
    }

    // The shared model's own future, not one boxed around it: written as
    // `#[async_trait]` writes the method, so the call costs no allocation.
    fn chat<'life0, 'life1, 'async_trait>(
        &'life0 self,
        request: ChatRequest<'life1>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<ChatResponse, ModelError>>
                + Send
                + 'async_trait,
        >,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (**self).chat(request)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl ChatModel for Named {
        fn name(&self) -> &str {
            self.0
        }

        async fn chat(&self, _request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
            Ok(ChatResponse::text(self.0))
        }
    }

    #[test]
    fn a_shared_model_is_kept_as_it_is_and_anything_else_is_shared() {
        let shared: Arc<dyn ChatModel> = Arc::new(Named("a"));
        assert!(Arc::ptr_eq(&shared_model(Arc::clone(&shared)), &shared));
        assert_eq!(shared_model(Named("b")).name(), "b");
        assert_eq!(shared_model(Named("b")).provider(), "unknown");
        // An `Arc` of a concrete model is a model too (one more hop).
        let concrete = Arc::new(Named("c"));
        assert_eq!(shared_model(Arc::clone(&concrete)).name(), "c");
    }
}
