//! Tools for tinyagents.
//!
//! This crate holds the [`Tool`] trait, what a tool declares ([`ToolSpec`]),
//! what it receives with each call ([`ToolRunContext`]), the
//! [`ToolRegistry`] with schemas compiled once per tool, argument preparation
//! ([`prepare_arguments`], [`InvalidArgsPolicy`]) and typed tools whose
//! schema is derived from their argument type ([`FnTool`]).
//!
//! It does not run tools: admission, budgets, policies, timeouts and events
//! belong to the harness.

mod args;
mod registry;
mod spec;
mod tool;
mod typed;

pub use args::{ArgumentError, InvalidArgsPolicy, cut, prepare_arguments, prepare_owned_arguments};
pub use registry::{ModelDispatch, RegisteredTool, RegistryError, ToolRegistry};
pub use spec::{SideEffects, ToolErrorPolicy, ToolReplay, ToolSpec};
pub use tinyagents_core::IdempotencyKey;
pub use tool::{
    ProgressSink, Reconciled, Tool, ToolCallOptions, ToolFuture, ToolProgress, ToolRunContext,
};
pub use typed::{ArgsOnly, FnTool, IntoToolResult, ToolHandler, WithContext};

#[cfg(test)]
mod tests;
