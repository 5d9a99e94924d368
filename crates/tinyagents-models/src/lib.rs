//! Chat models for tinyagents.
//!
//! [`ScriptedModel`] answers from a script: deterministic and offline, for
//! tests, examples and benchmarks. Real providers implement the same
//! [`ChatModel`](tinyagents_core::ChatModel) trait.
//!
//! This crate does not run agents; the harness does.

mod scripted;

pub use scripted::{RecordedRequest, ScriptedModel};
