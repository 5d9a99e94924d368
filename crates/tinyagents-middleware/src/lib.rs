//! Middleware for tinyagents.
//!
//! Three seams, each with its own trait:
//! - [`Middleware`]: lifecycle hooks around model and tool calls
//!   (`before_tool` may rewrite, deny or defer a call), plus
//!   `check_nested_tool` and `observe_nested_result` for calls a tool makes
//!   through the harness;
//! - [`ToolMiddleware`]: the `wrap_tool` onion around tool execution;
//! - [`SecurityGate`]: the host's authorisation of each call and screening
//!   of the final output.
//!
//! And the built-ins on those seams. Each policy makes its decision (a
//! [`ToolVerdict`]) in one function that both `before_tool` and
//! `check_nested_tool` use:
//! - [`ToolAllowlistMiddleware`]: only named tools run;
//! - [`ToolPolicyMiddleware`]: a deny mask over side-effect classes, a
//!   sandbox requirement, the host's classification, approval grants;
//! - [`HumanApprovalMiddleware`]: flagged calls wait for a person
//!   ([`ApprovalFn`], [`ApprovalOutcomeFn`]);
//! - [`PlanModeMiddleware`]: only read-only tools, switchable at run time;
//! - [`RepeatProgressMiddleware`]: refuses the K-th identical consecutive
//!   model-issued call;
//! - [`RedactionMiddleware`] (with its [`Redactor`]): scrubs secrets from
//!   results and from payloads bound for events and persistence;
//! - the wraps [`TimeoutWrap`] and [`RetryWrap`].
//!
//! The order rules, the decision types and a custom middleware are in
//! the guide, `docs/middleware.md`.
//!
//! It does not drive a run: the harness calls these hooks in the order and
//! with the fail-closed rules documented on each trait, and attaches the
//! run's `ToolRegistry` to `RunContext::extensions` so that policies can
//! read a tool's spec ([`tool_spec`]).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod allowlist;
mod approval;
mod decision;
mod gate;
mod hooks;
mod plan_mode;
mod policy;
mod redact;
mod redaction;
mod repeat;
mod retry;
mod timeout;
mod wrap;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod wrap_testing;

pub use allowlist::ToolAllowlistMiddleware;
pub use approval::{ApprovalFn, ApprovalOutcome, ApprovalOutcomeFn, HumanApprovalMiddleware};
pub use decision::{CallPolicy, ToolVerdict, nested_approval_reason};
pub use gate::{OutputVerdict, SecurityGate, ToolCallRequest};
pub use hooks::{
    DefaultHook, Hook, HookFuture, Middleware, is_default_hook, take_default_hook, tool_spec,
};
pub use plan_mode::PlanModeMiddleware;
pub use policy::ToolPolicyMiddleware;
pub use redact::{REDACTED, Redactor, SecretMatcher};
pub use redaction::RedactionMiddleware;
pub use repeat::RepeatProgressMiddleware;
pub use retry::RetryWrap;
pub use timeout::TimeoutWrap;
pub use wrap::{Next, ToolCallContext, ToolMiddleware, withheld};
