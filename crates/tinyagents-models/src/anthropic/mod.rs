//! Anthropic's Messages API.
//!
//! A request streams when the caller listens for deltas and is sent whole
//! otherwise. The API requires an output cap: a request without
//! [`ModelOptions::max_output_tokens`](tinyagents_core::ModelOptions) gets
//! [`AnthropicConfig::max_tokens`].
//!
//! The API has no `response_format`: a request with an
//! [`OutputSchema`](tinyagents_core::OutputSchema) offers an output tool
//! (`respond_<schema name>`) and forces a tool choice, and a call of that
//! tool comes back as the response's text (see `docs/models.md`,
//! "Structured output").

mod output;
mod request;
mod response;
mod usage;

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use tinyagents_core::{ChatModel, ChatRequest, ChatResponse, DeltaSink, ModelDelta, ModelError};

use crate::http::{Http, HttpOptions};
use crate::http::{header_value, insert_headers};
use crate::secret::{Secrets, redact_url};
use crate::wire::WireFormat;

/// Anthropic's API root.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// How to reach the Messages API.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// The model name sent in each request (a request's
    /// [`ModelOptions::model`](tinyagents_core::ModelOptions) overrides it).
    pub model: String,
    /// The API root; `/messages` is appended.
    pub base_url: String,
    /// Sent as `x-api-key` when set.
    pub api_key: Option<String>,
    /// Sent as `anthropic-version`.
    pub version: String,
    /// The output cap of requests that set none.
    pub max_tokens: u32,
    /// More headers for every request (`anthropic-beta`, …).
    pub headers: Vec<(String, String)>,
    /// Timeouts, retries and size caps.
    pub http: HttpOptions,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("model", &self.model)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("version", &self.version)
            .field("max_tokens", &self.max_tokens)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("http", &self.http)
            .finish()
    }
}

impl AnthropicConfig {
    /// Anthropic's API with `model` (set the key with [`Self::with_api_key`]).
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: ANTHROPIC_BASE_URL.to_owned(),
            api_key: None,
            version: ANTHROPIC_VERSION.to_owned(),
            max_tokens: 4096,
            headers: Vec::new(),
            http: HttpOptions::default(),
        }
    }

    /// Sets the API key.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the API root (a proxy or a test server).
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets the default output cap.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Adds a header to every request.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets timeouts, retries and caps.
    #[must_use]
    pub fn with_http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }
}

/// A [`ChatModel`] speaking Anthropic's Messages API.
#[derive(Clone)]
pub struct AnthropicModel {
    model: String,
    max_tokens: u32,
    url: String,
    headers: HeaderMap,
    http: Http,
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("model", &self.model)
            .field("url", &redact_url(&self.url))
            .field("headers", &self.headers)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// A client for `config`. Fails on a header that is not valid HTTP or
    /// when the TLS client cannot be set up.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            "anthropic-version",
            header_value(&config.version, "the API version")?,
        );
        if let Some(key) = &config.api_key {
            let mut value = header_value(key, "the API key")?;
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
        insert_headers(&mut headers, &config.headers)?;
        let secrets = Secrets::of(config.api_key.as_deref(), &config.base_url, &config.headers);
        Ok(Self {
            url: format!("{}/messages", config.base_url.trim_end_matches('/')),
            model: config.model,
            max_tokens: config.max_tokens,
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
impl ChatModel for AnthropicModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> &str {
        "anthropic"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let stream = request.deltas.is_some();
        let output = request
            .options
            .output_schema
            .as_ref()
            .map(|schema| output::OutputTool::new(schema, request.tools));
        let body = request::encode(
            &self.model,
            self.max_tokens,
            &request,
            stream,
            output.as_ref(),
        )?;
        let Some(output) = output else {
            return self
                .http
                .send::<Wire>(&self.url, &self.headers, Bytes::from(body), request.deltas)
                .await;
        };
        // The output tool's deltas are not reported (see `output`).
        let filter = request.deltas.map(|sink| output.filter(sink));
        let filtered = |delta: ModelDelta| {
            if let Some(filter) = &filter {
                filter.pass(delta);
            }
        };
        let deltas: Option<DeltaSink<'_>> = filter.as_ref().map(|_| &filtered as DeltaSink<'_>);
        let response = self
            .http
            .send::<Wire>(&self.url, &self.headers, Bytes::from(body), deltas)
            .await?;
        Ok(output.answer(response))
    }
}

struct Wire;

impl WireFormat for Wire {
    type Decoder = response::Decoder;

    fn parse_body(body: &[u8]) -> Result<ChatResponse, ModelError> {
        response::parse_body(body)
    }
}

/// Parses a whole Messages response body (public for fuzzing).
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, ModelError> {
    response::parse_body(body)
}

/// Parses a streamed Messages response, given as the chunks it arrived in,
/// reporting deltas to `deltas` (public for fuzzing). Events are capped at
/// 1 MiB, as [`HttpOptions`] does by default.
pub fn parse_stream<'b>(
    chunks: impl IntoIterator<Item = &'b [u8]>,
    deltas: Option<DeltaSink<'_>>,
) -> Result<ChatResponse, ModelError> {
    crate::wire::decode_stream::<response::Decoder>(chunks, deltas)
}
