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
//! This crate does not run agents; the harness does.

// Tests may unwrap: a panic there is a failed test.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod anthropic;
mod http;
pub mod openai;
mod retry;
mod scripted;
mod secret;
mod spec;
pub mod sse;
mod wire;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use http::HttpOptions;
pub use openai::{OpenAiConfig, OpenAiModel, ToolOnlyContent};
pub use retry::RetryPolicy;
pub use scripted::{RecordedRequest, ScriptedModel};
pub use spec::{MODEL_ENV_VAR, ModelSpec, SpecError, from_env, from_spec};
