//! Redaction before anything leaves the call path: every middleware's
//! `redact` over payloads bound for events, the transcript, ledger rows,
//! checkpoints and suspended runs, on every origin. A `redact` that panics
//! fails closed: the payload is replaced, never passed on unscrubbed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;
use tinyagents_core::{TinyAgentsError, ToolCall, ToolResult};
use tinyagents_middleware::Hook;

use super::hooks::Hooks;

/// The run's redaction: every middleware's `redact`, in order.
#[derive(Clone)]
pub(crate) struct Redaction {
    middlewares: Arc<Hooks>,
}

impl Redaction {
    pub(crate) fn new(middlewares: Arc<Hooks>) -> Self {
        Self { middlewares }
    }

    /// Whether any middleware could change a payload: one whose `redact`
    /// is not known to be the provided one, which does nothing.
    pub(crate) fn is_active(&self) -> bool {
        self.middlewares.any(Hook::Redact)
    }

    /// Scrubs `payload` in place.
    pub(crate) fn value(&self, payload: &mut Value) {
        let _ = self.scrub(payload);
    }

    /// Scrubs `payload` in place; `Err` names the middleware whose `redact`
    /// panicked (the payload was replaced by a placeholder).
    fn scrub(&self, payload: &mut Value) -> Result<(), &str> {
        for site in self.middlewares.with(Hook::Redact) {
            let scrubbed = catch_unwind(AssertUnwindSafe(|| {
                site.build(|m| m.redact(payload));
            }));
            if scrubbed.is_err() {
                *payload =
                    Value::String(format!("[withheld: redaction by {} failed]", site.name()));
                return Err(site.name());
            }
        }
        Ok(())
    }

    /// A scrubbed copy of `payload`.
    pub(crate) fn copy(&self, payload: &Value) -> Value {
        let mut copy = payload.clone();
        if self.is_active() {
            self.value(&mut copy);
        }
        copy
    }

    /// `text` scrubbed (it may quote arguments, results or secrets).
    pub(crate) fn text(&self, text: String) -> String {
        if !self.is_active() {
            return text;
        }
        let mut value = Value::String(text);
        self.value(&mut value);
        match value {
            Value::String(text) => text,
            other => other.to_string(),
        }
    }

    /// A result's content and metadata scrubbed in place.
    pub(crate) fn result(&self, result: &mut ToolResult) {
        if !self.is_active() {
            return;
        }
        result.content = self.text(std::mem::take(&mut result.content));
        if let Some(metadata) = &mut result.metadata {
            self.value(metadata);
        }
    }

    /// The call as it may be persisted or shown: arguments and any raw
    /// (non-JSON) argument text scrubbed. `changed` tells whether redaction
    /// removed anything (such a call cannot be replayed from its copy);
    /// `failed` is the refusal of a call whose redaction panicked (nothing
    /// of it could be vouched for, so it must not run).
    pub(crate) fn call(&self, call: &ToolCall) -> RedactedCall {
        if !self.is_active() {
            return RedactedCall {
                copy: call.clone(),
                changed: false,
                failed: None,
            };
        }
        let mut arguments = call.arguments.clone();
        let mut failed = self.scrub(&mut arguments).err().map(str::to_owned);
        let raw_arguments = call.raw_arguments.clone().map(|raw| {
            let mut value = Value::String(raw);
            if let Err(who) = self.scrub(&mut value) {
                failed.get_or_insert_with(|| who.to_owned());
            }
            match value {
                Value::String(text) => text,
                other => other.to_string(),
            }
        });
        let changed = arguments != call.arguments || raw_arguments != call.raw_arguments;
        let copy = ToolCall {
            id: call.id.clone(),
            provider_id: call.provider_id.clone(),
            name: call.name.clone(),
            arguments,
            raw_arguments,
        };
        RedactedCall {
            copy,
            changed,
            failed: failed.map(|by| TinyAgentsError::Denied {
                by,
                reason: "redacting the call's arguments panicked, so the call is refused"
                    .to_owned(),
            }),
        }
    }

    /// The arguments of `call` as an event may show them (under capture).
    pub(crate) fn arguments(&self, call: &ToolCall) -> Value {
        match &call.raw_arguments {
            Some(raw) => Value::String(self.text(raw.clone())),
            None => self.copy(&call.arguments),
        }
    }
}

/// A call as the transcript keeps it.
pub(crate) struct RedactedCall {
    pub(crate) copy: ToolCall,
    pub(crate) changed: bool,
    pub(crate) failed: Option<TinyAgentsError>,
}
