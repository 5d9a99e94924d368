//! Redaction before anything leaves the call path: every middleware's
//! `redact` over payloads bound for events, the transcript, ledger rows,
//! checkpoints and suspended runs, on every origin. A `redact` that panics
//! fails closed: the payload is replaced, never passed on unscrubbed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;
use tinyagents_core::{ToolCall, ToolResult};
use tinyagents_middleware::Middleware;

/// The run's redaction: every middleware's `redact`, in order.
#[derive(Clone)]
pub(crate) struct Redaction {
    middlewares: Arc<[Arc<dyn Middleware>]>,
}

impl Redaction {
    pub(crate) fn new(middlewares: Arc<[Arc<dyn Middleware>]>) -> Self {
        Self { middlewares }
    }

    /// Whether any middleware could change a payload.
    pub(crate) fn is_active(&self) -> bool {
        !self.middlewares.is_empty()
    }

    /// Scrubs `payload` in place.
    pub(crate) fn value(&self, payload: &mut Value) {
        for middleware in self.middlewares.iter() {
            let scrubbed = catch_unwind(AssertUnwindSafe(|| middleware.redact(payload)));
            if scrubbed.is_err() {
                *payload = Value::String(format!(
                    "[withheld: redaction by {} failed]",
                    middleware.name()
                ));
                return;
            }
        }
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
    /// removed anything (such a call cannot be replayed from its copy).
    pub(crate) fn call(&self, call: &ToolCall) -> (ToolCall, bool) {
        if !self.is_active() {
            return (call.clone(), false);
        }
        let arguments = self.copy(&call.arguments);
        let raw_arguments = call.raw_arguments.clone().map(|raw| self.text(raw));
        let changed = arguments != call.arguments || raw_arguments != call.raw_arguments;
        let copy = ToolCall {
            id: call.id.clone(),
            provider_id: call.provider_id.clone(),
            name: call.name.clone(),
            arguments,
            raw_arguments,
        };
        (copy, changed)
    }

    /// The arguments of `call` as an event may show them (under capture).
    pub(crate) fn arguments(&self, call: &ToolCall) -> Value {
        match &call.raw_arguments {
            Some(raw) => Value::String(self.text(raw.clone())),
            None => self.copy(&call.arguments),
        }
    }
}
