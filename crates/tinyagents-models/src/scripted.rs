//! A deterministic, offline model for tests, examples and benchmarks.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use tinyagents_core::{
    ChatModel, ChatRequest, ChatResponse, Message, ModelError, ModelToolCall, OutputSchema,
    ToolDefinition,
};

type Responder = dyn Fn(&ChatRequest<'_>) -> Result<ChatResponse, ModelError> + Send + Sync;

enum Script {
    Queue(VecDeque<Result<ChatResponse, ModelError>>),
    Function(Arc<Responder>),
}

/// What a [`ScriptedModel`] saw in one request (kept only when recording).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The transcript it was sent.
    pub messages: Vec<Message>,
    /// The tools it was offered.
    pub tools: Vec<ToolDefinition>,
    /// The structured output it was asked for
    /// ([`ModelOptions::output_schema`](tinyagents_core::ModelOptions)).
    pub output_schema: Option<OutputSchema>,
}

/// The `gen_ai.provider.name` of a [`ScriptedModel`]: no provider serves it.
pub const SCRIPTED_PROVIDER: &str = "tinyagents.scripted";

/// A model that answers from a script: a queue of responses, or a function
/// of the request. Deterministic and offline. Its provider (the spans'
/// `gen_ai.provider.name`) is [`SCRIPTED_PROVIDER`].
pub struct ScriptedModel {
    name: String,
    script: Mutex<Script>,
    calls: Mutex<usize>,
    recorded: Option<Mutex<Vec<RecordedRequest>>>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.name)
            .field("calls", &*self.calls.lock())
            .finish_non_exhaustive()
    }
}

impl ScriptedModel {
    /// Answers each request with the next response; an exhausted script is
    /// a [`ModelError::ScriptExhausted`].
    pub fn new(responses: impl IntoIterator<Item = ChatResponse>) -> Self {
        Self::with_results(responses.into_iter().map(Ok))
    }

    /// Like [`Self::new`], with failures in the script.
    pub fn with_results(
        results: impl IntoIterator<Item = Result<ChatResponse, ModelError>>,
    ) -> Self {
        Self::from_script(Script::Queue(results.into_iter().collect()))
    }

    /// Answers each request with `f(request)`.
    pub fn from_fn(
        f: impl Fn(&ChatRequest<'_>) -> Result<ChatResponse, ModelError> + Send + Sync + 'static,
    ) -> Self {
        Self::from_script(Script::Function(Arc::new(f)))
    }

    fn from_script(script: Script) -> Self {
        Self {
            name: "scripted".to_owned(),
            script: Mutex::new(script),
            calls: Mutex::new(0),
            recorded: None,
        }
    }

    /// Names the model (for events and spans).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Keeps a copy of every request, for tests that inspect what was sent.
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.recorded = Some(Mutex::new(Vec::new()));
        self
    }

    /// The requests seen so far (empty unless [`Self::recording`]).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.recorded
            .as_ref()
            .map(|r| r.lock().clone())
            .unwrap_or_default()
    }

    /// How many requests were answered or refused.
    pub fn calls(&self) -> usize {
        *self.calls.lock()
    }

    /// A final answer whose text is `value` as compact JSON (what a
    /// provider returns for a request with an output schema).
    pub fn json(value: Value) -> ChatResponse {
        ChatResponse::text(value.to_string())
    }

    /// A response that calls one tool.
    pub fn tool_call(name: &str, arguments: Value) -> ChatResponse {
        ChatResponse::tool_calls(vec![ModelToolCall::new(None, name, arguments)])
    }

    /// A response that calls several tools in one turn.
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, Value)>) -> ChatResponse {
        ChatResponse::tool_calls(
            calls
                .into_iter()
                .map(|(name, args)| ModelToolCall::new(None, name, args))
                .collect(),
        )
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn provider(&self) -> &str {
        SCRIPTED_PROVIDER
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let call = {
            let mut calls = self.calls.lock();
            *calls += 1;
            *calls
        };
        if let Some(recorded) = &self.recorded {
            recorded.lock().push(RecordedRequest {
                messages: request.messages.to_vec(),
                tools: request.tools.to_vec(),
                output_schema: request.options.output_schema.clone(),
            });
        }
        let responder = match &mut *self.script.lock() {
            Script::Queue(queue) => {
                return queue
                    .pop_front()
                    .unwrap_or(Err(ModelError::ScriptExhausted { call }));
            }
            Script::Function(f) => Arc::clone(f),
        };
        responder(&request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinyagents_core::ModelOptions;

    #[tokio::test]
    async fn answers_in_order_then_reports_exhaustion() {
        let model = ScriptedModel::new([ChatResponse::text("one")]).recording();
        let options = ModelOptions::default();
        let request = ChatRequest {
            messages: &[],
            tools: &[],
            options: &options,
            deltas: None,
        };
        assert_eq!(model.chat(request).await.unwrap().content, "one");
        assert_eq!(
            model.chat(request).await.unwrap_err(),
            ModelError::ScriptExhausted { call: 2 }
        );
        assert_eq!(model.calls(), 2);
        assert_eq!(model.requests().len(), 2);
    }

    #[tokio::test]
    async fn records_the_output_schema_and_answers_json() {
        let model =
            ScriptedModel::new([ScriptedModel::json(serde_json::json!({"sum": 3}))]).recording();
        let schema = OutputSchema {
            name: "Sum".into(),
            schema: serde_json::json!({"type": "object"}),
            description: None,
        };
        let options = ModelOptions {
            output_schema: Some(schema.clone()),
            ..ModelOptions::default()
        };
        let request = ChatRequest {
            messages: &[],
            tools: &[],
            options: &options,
            deltas: None,
        };
        let answer = model.chat(request).await.unwrap();
        assert_eq!(answer.content, r#"{"sum":3}"#);
        assert!(answer.tool_calls.is_empty());
        assert_eq!(model.requests()[0].output_schema, Some(schema));
    }
}
