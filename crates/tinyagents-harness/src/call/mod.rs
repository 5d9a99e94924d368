//! The one call path. Every tool call — issued by the model, nested by a
//! running tool through `ToolExecutionContext::call_tool`, or made inside an
//! agent delegated to as a tool (which is an ordinary tool of its
//! coordinator) — is admitted by one table of stages ([`admit`]), runs
//! through one execution ([`execute`]) and is settled by one function
//! ([`settle`]); one emitter builds its events ([`emit`]) and one redaction
//! scrubs what leaves ([`redact`]). Host code it calls is contained
//! ([`contain`]).

mod admit;
mod contain;
mod context;
mod emit;
mod execute;
mod hooks;
mod identity;
mod ledger;
pub(crate) mod nested;
mod path;
mod reconcile;
mod redact;
mod serve;
mod settle;
mod span;
mod timing;
mod tool_runner;

pub(crate) use admit::{Admission, Admitted, Scope, refusal_text};
pub(crate) use contain::{contain, panic_text, panicked};
pub use context::ToolExecutionContext;
pub(crate) use context::{RunShared, SpareContext};
pub(crate) use emit::ToolEvents;
pub(crate) use execute::CallSite;
pub(crate) use hooks::Hooks;
pub(crate) use identity::call_hash;
pub(crate) use ledger::{Start, StartOf, guarded, state_error};
pub(crate) use path::CallPath;
pub use reconcile::Reconciliation;
pub(crate) use reconcile::{Doubt, Sweep};
pub(crate) use redact::Redaction;
pub(crate) use settle::{CallOutcome, SettleScope, Settlement};
pub(crate) use span::{ToolSpan, count, fail, tool_ended};
pub(crate) use timing::{millis, until};
pub(crate) use tool_runner::{NESTED_SCOPE, NestedScope, NestedToolRunner};

use std::sync::Arc;

use tinyagents_core::{RunContext, State};

/// What one call is made in: the call path's configuration and what its
/// run lends every call (its context, its state for the policies, its
/// events, what tools may know of the run). Every stage borrows it.
#[derive(Clone, Copy)]
pub(crate) struct CallEnv<'a> {
    pub(crate) path: &'a CallPath,
    pub(crate) ctx: &'a RunContext,
    pub(crate) state: &'a State,
    pub(crate) events: &'a ToolEvents,
    pub(crate) shared: &'a Arc<RunShared>,
    /// The run's spare execution context, which its calls share.
    pub(crate) contexts: &'a SpareContext,
}
