//! OpenAI-compatible Chat Completions: OpenAI itself and, by base URL,
//! Ollama, vLLM, llama.cpp's server, OpenRouter and the like.
//!
//! A request streams (`"stream": true`, with usage) when the caller listens
//! for deltas, and is sent whole otherwise; either way the answer is one
//! [`ChatResponse`]. Tool calls keep the provider's ids; tool results go
//! back under the id of the call they answer.
//!
//! A request with an [`OutputSchema`](tinyagents_core::OutputSchema) asks
//! for structured output with `response_format` (`json_schema`, not
//! strict); the answer is the response's text, checked by the harness.

mod request;
mod response;
mod usage;

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use tinyagents_core::{ChatModel, ChatRequest, ChatResponse, DeltaSink, ModelError};

use crate::http::{Http, HttpOptions, header_value, insert_headers};
use crate::secret::{Secrets, redact_url};
use crate::wire::WireFormat;

/// OpenAI's API root.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Ollama's OpenAI-compatible API root on its default port.
pub const OLLAMA_BASE_URL: &str = "http://localhost:11434/v1";

/// How to reach an OpenAI-compatible server.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The model name sent in each request (a request's
    /// [`ModelOptions::model`](tinyagents_core::ModelOptions) overrides it).
    pub model: String,
    /// The API root; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// Name the output cap `max_completion_tokens` (OpenAI) rather than
    /// `max_tokens` (what most compatible servers read).
    pub use_max_completion_tokens: bool,
    /// More headers for every request (`OpenAI-Organization`, OpenRouter's
    /// `HTTP-Referer`, …).
    pub headers: Vec<(String, String)>,
    /// How an assistant turn that only calls tools sends its empty text
    /// (`null` by default; see [`ToolOnlyContent`]).
    pub tool_only_content: ToolOnlyContent,
    /// Whether a request that offers tools may stream (the default). A
    /// server that cannot stream tool calls (llama-cpp-python's
    /// function-calling handler refuses `stream` with `tool_choice: auto`)
    /// gets such requests whole, and its answer arrives without deltas.
    pub stream_with_tools: bool,
    /// Timeouts, retries and size caps.
    pub http: HttpOptions,
}

/// How the text of an assistant turn that only calls tools is sent back to
/// an OpenAI-compatible server. No one shape works everywhere: OpenAI
/// documents `null`; llama-cpp-python's server declares the field a string
/// and answers `null` with a 500 (`""` passes there and on OpenAI, but a
/// proxy translating to Anthropic then injects an empty text block), and
/// leaving the field out breaks its chat template. See `docs/models.md`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolOnlyContent {
    /// `"content": null` (OpenAI's documented shape; the default).
    #[default]
    Null,
    /// `"content": ""` (llama.cpp servers: the `llama-cpp:` spec prefix).
    EmptyString,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("model", &self.model)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("use_max_completion_tokens", &self.use_max_completion_tokens)
            .field("tool_only_content", &self.tool_only_content)
            .field("stream_with_tools", &self.stream_with_tools)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("http", &self.http)
            .finish()
    }
}

impl OpenAiConfig {
    /// OpenAI's API with `model` (set the key with [`Self::with_api_key`]).
    pub fn openai(model: impl Into<String>) -> Self {
        Self {
            use_max_completion_tokens: true,
            ..Self::compatible(OPENAI_BASE_URL, model)
        }
    }

    /// A local Ollama server's OpenAI-compatible API.
    pub fn ollama(model: impl Into<String>) -> Self {
        Self::compatible(OLLAMA_BASE_URL, model)
    }

    /// Any OpenAI-compatible server at `base_url` (e.g. `http://host:8000/v1`).
    pub fn compatible(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            use_max_completion_tokens: false,
            headers: Vec::new(),
            tool_only_content: ToolOnlyContent::Null,
            stream_with_tools: true,
            http: HttpOptions::default(),
        }
    }

    /// Sets the API key.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Adds a header to every request.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets how a turn that only calls tools sends its empty text.
    #[must_use]
    pub fn with_tool_only_content(mut self, shape: ToolOnlyContent) -> Self {
        self.tool_only_content = shape;
        self
    }

    /// Sets whether requests that offer tools may stream.
    #[must_use]
    pub fn with_stream_with_tools(mut self, stream: bool) -> Self {
        self.stream_with_tools = stream;
        self
    }

    /// Sets timeouts, retries and caps.
    #[must_use]
    pub fn with_http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }
}

/// A [`ChatModel`] speaking OpenAI's Chat Completions.
#[derive(Clone)]
pub struct OpenAiModel {
    model: String,
    max_tokens_key: &'static str,
    tool_only_content: ToolOnlyContent,
    stream_with_tools: bool,
    url: String,
    headers: HeaderMap,
    http: Http,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("model", &self.model)
            .field("url", &redact_url(&self.url))
            .field("headers", &self.headers)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A client for `config`. Fails on a header that is not valid HTTP or
    /// when the TLS client cannot be set up.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let mut value = header_value(&format!("Bearer {key}"), "the API key")?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        insert_headers(&mut headers, &config.headers)?;
        let secrets = Secrets::of(config.api_key.as_deref(), &config.base_url, &config.headers);
        Ok(Self {
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            max_tokens_key: if config.use_max_completion_tokens {
                "max_completion_tokens"
            } else {
                "max_tokens"
            },
            model: config.model,
            tool_only_content: config.tool_only_content,
            stream_with_tools: config.stream_with_tools,
            headers,
            http: Http::new(config.http, secrets)?,
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The transport settings.
    pub fn http_options(&self) -> &HttpOptions {
        self.http.options()
    }
}

#[async_trait]
impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.model
    }

    /// OpenAI-compatible servers all speak OpenAI's API: `openai`.
    fn provider(&self) -> &str {
        "openai"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let stream =
            request.deltas.is_some() && (self.stream_with_tools || request.tools.is_empty());
        let deltas = if stream { request.deltas } else { None };
        let shape = request::Shape {
            max_tokens_key: self.max_tokens_key,
            tool_only_content: self.tool_only_content,
        };
        let body = request::encode(&self.model, shape, &request, stream)?;
        self.http
            .send::<Wire>(&self.url, &self.headers, Bytes::from(body), deltas)
            .await
    }
}

struct Wire;

impl WireFormat for Wire {
    type Decoder = response::Decoder;

    fn parse_body(body: &[u8]) -> Result<ChatResponse, ModelError> {
        response::parse_body(body)
    }
}

/// Parses a whole Chat Completions response body (public for fuzzing).
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, ModelError> {
    response::parse_body(body)
}

/// Parses a streamed Chat Completions response, given as the chunks it
/// arrived in, reporting deltas to `deltas` (public for fuzzing). Events are
/// capped at 1 MiB, as [`HttpOptions`] does by default.
pub fn parse_stream<'b>(
    chunks: impl IntoIterator<Item = &'b [u8]>,
    deltas: Option<DeltaSink<'_>>,
) -> Result<ChatResponse, ModelError> {
    crate::wire::decode_stream::<response::Decoder>(chunks, deltas)
}
