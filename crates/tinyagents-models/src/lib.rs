//! Chat models for tinyagents.
//!
//! [`ScriptedModel`] answers from a script: deterministic and offline, for
//! tests, examples and benchmarks. The real providers implement the same
//! [`ChatModel`](tinyagents_core::ChatModel) trait:
//!
//! - [`OpenAiModel`]: OpenAI's Chat Completions, and by base URL any
//!   compatible server (Ollama, vLLM, llama.cpp's server, OpenRouter);
//! - [`AnthropicModel`]: Anthropic's Messages API.
//!
//! Both stream over server-sent events when the caller listens for deltas,
//! map tool definitions, calls and results both ways (parallel calls and
//! provider ids included), count usage, type their failures
//! ([`ModelError`](tinyagents_core::ModelError)), retry rate limits, server
//! and connection errors with backoff and jitter honouring `Retry-After`
//! ([`RetryPolicy`]), bound each attempt by a timeout and every body by a
//! size cap ([`HttpOptions`]), and stop when their future is dropped.
//!
//! [`from_spec`] builds a model from a string such as `openai:gpt-4o-mini`,
//! `anthropic:<model>`, `ollama:llama3.2` or
//! `openai-compatible:<base url>#<model>`, with keys from the usual
//! environment variables; [`from_env`] reads the spec from
//! `TINYAGENTS_MODEL`.
//!
//! Features (both on by default): `openai` compiles [`OpenAiModel`] (and
//! the `openai`, `ollama`, `openai-compatible` and `llama-cpp` specs),
//! `anthropic` compiles [`AnthropicModel`]; either brings in the HTTPS
//! stack (reqwest, rustls). Without them this crate is [`ScriptedModel`],
//! [`RetryPolicy`], the SSE parser and the spec parser, and [`from_spec`]
//! answers a spec of a missing provider with
//! [`SpecError::ProviderNotCompiled`].
//!
//! This crate does not run agents; the harness does.

// Tests may unwrap: a panic there is a failed test.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod http;
#[cfg(feature = "openai")]
pub mod openai;
mod retry;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod schema_name;
mod scripted;
// Only the spec parser's URL redaction is used without a provider.
#[cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]
mod secret;
mod spec;
pub mod sse;
#[cfg(feature = "http")]
mod tls;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod wire;

#[cfg(feature = "anthropic")]
pub use anthropic::{AnthropicConfig, AnthropicModel};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use http::HttpOptions;
#[cfg(feature = "openai")]
pub use openai::{OpenAiConfig, OpenAiModel, ToolOnlyContent};
pub use retry::RetryPolicy;
pub use scripted::{RecordedRequest, SCRIPTED_PROVIDER, ScriptedModel};
pub use spec::{MODEL_ENV_VAR, ModelSpec, SpecError, from_env, from_spec};
#[cfg(feature = "http")]
pub use tls::tls_client_config;
