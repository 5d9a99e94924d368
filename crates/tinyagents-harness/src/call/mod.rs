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
mod emit;
mod execute;
mod hooks;
mod identity;
mod redact;
mod settle;

pub(crate) use admit::{Admission, Admitted, Scope, refusal_text};
pub(crate) use contain::{contain, panic_text, panicked};
pub(crate) use emit::ToolEvents;
pub(crate) use execute::CallSite;
pub(crate) use hooks::Hooks;
pub(crate) use identity::call_hash;
pub(crate) use redact::Redaction;
pub(crate) use settle::{CallOutcome, SettleScope, Settlement};
