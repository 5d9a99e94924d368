//! The one emitter of tool events. Every `ToolStarted`, `ToolCompleted` and
//! `ToolFailed` of a run, whatever the call's origin, is built here, so an
//! event and its redaction cannot differ by path: arguments and results ride
//! only under `PayloadCapture::tool_io`, and every payload (arguments, raw
//! argument text, results, metadata, error texts) is scrubbed first.

use serde_json::Value;
use tinyagents_core::{AgentEvent, CallId, ToolCall, ToolResult};

use super::redact::Redaction;
use crate::events::EventSink;
use crate::mutation::{Mutation, planted};

/// Emits a run's tool events.
#[derive(Clone)]
pub(crate) struct ToolEvents {
    sink: EventSink,
    capture: bool,
    redaction: Redaction,
}

impl ToolEvents {
    pub(crate) fn new(sink: EventSink, capture: bool, redaction: Redaction) -> Self {
        Self {
            sink,
            capture,
            redaction,
        }
    }

    /// Whether anyone listens.
    pub(crate) fn is_active(&self) -> bool {
        self.sink.is_active()
    }

    /// Whether arguments and results ride on events.
    pub(crate) fn captures(&self) -> bool {
        self.capture
    }

    /// The run's redaction.
    pub(crate) fn redaction(&self) -> &Redaction {
        &self.redaction
    }

    /// The sink, for events that are not tool events.
    pub(crate) fn sink(&self) -> &EventSink {
        &self.sink
    }

    /// `ToolStarted` for `call`.
    pub(crate) async fn started(&self, call: &ToolCall) {
        if !self.is_active() {
            return;
        }
        let arguments = self.capture.then(|| {
            if planted(Mutation::UnredactedEvents) {
                call.arguments.clone()
            } else {
                self.redaction.arguments(call)
            }
        });
        self.sink
            .emit(|| AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                parent_call_id: call.id.parent(),
                name: call.name.clone(),
                arguments,
            })
            .await;
    }

    /// `ToolStarted` for a nested call known by its parts (its request has
    /// not been made a `ToolCall` yet).
    pub(crate) async fn started_nested(
        &self,
        id: &CallId,
        parent: &CallId,
        name: &str,
        arguments: &Value,
    ) {
        if !self.is_active() {
            return;
        }
        let arguments = self.capture.then(|| self.redaction.copy(arguments));
        self.sink
            .emit(|| AgentEvent::ToolStarted {
                call_id: id.clone(),
                parent_call_id: Some(parent.clone()),
                name: name.to_owned(),
                arguments,
            })
            .await;
    }

    /// `ToolCompleted` for a call that produced `result`.
    pub(crate) async fn completed(
        &self,
        id: &CallId,
        name: &str,
        duration_ms: u64,
        result: &ToolResult,
    ) {
        if !self.is_active() {
            return;
        }
        let content = self.capture.then(|| {
            if planted(Mutation::UnredactedEvents) {
                result.content.clone()
            } else {
                self.redaction.text(result.content.clone())
            }
        });
        let metadata = result.metadata.as_ref().map(|m| self.redaction.copy(m));
        let event = || AgentEvent::ToolCompleted {
            call_id: id.clone(),
            parent_call_id: id.parent(),
            name: name.to_owned(),
            duration_ms,
            is_error: result.is_error,
            result: content.clone(),
            metadata: metadata.clone(),
        };
        self.sink.emit(event).await;
        if planted(Mutation::SecondTerminal) && id.is_nested() {
            self.sink.emit(event).await;
        }
    }

    /// `ToolFailed` for a call that was refused, raised or was abandoned.
    pub(crate) async fn failed(&self, id: &CallId, name: &str, duration_ms: u64, error: &str) {
        if !self.is_active() {
            return;
        }
        let error = self.redaction.text(error.to_owned());
        self.sink
            .emit(|| AgentEvent::ToolFailed {
                call_id: id.clone(),
                parent_call_id: id.parent(),
                name: name.to_owned(),
                duration_ms,
                error,
            })
            .await;
    }

    /// The terminal event of a call that ran: `ToolFailed` when it failed
    /// (with the text the model reads, or, when that withholds the error's
    /// own text, `withheld`: the host reads what the model may not), else
    /// `ToolCompleted`.
    pub(crate) async fn ended(
        &self,
        id: &CallId,
        name: &str,
        duration_ms: u64,
        result: &ToolResult,
        failed: Option<Option<String>>,
    ) {
        if let Some(withheld) = failed {
            let text = withheld.as_deref().unwrap_or(&result.content);
            self.failed(id, name, duration_ms, text).await;
        } else {
            self.completed(id, name, duration_ms, result).await;
        }
    }

    /// `ApprovalRequested` for a call that waits for a person.
    pub(crate) async fn approval_requested(&self, call: &ToolCall, reason: &str) {
        if !self.is_active() {
            return;
        }
        let arguments = self.capture.then(|| {
            if planted(Mutation::UnredactedEvents) {
                call.arguments.clone()
            } else {
                self.redaction.arguments(call)
            }
        });
        self.sink
            .emit(|| AgentEvent::ApprovalRequested {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                reason: self.redaction.text(reason.to_owned()),
                arguments,
            })
            .await;
    }

    /// `ToolStarted` then `ToolFailed` for a call refused before it ran.
    pub(crate) async fn refused(&self, call: &ToolCall, error: &str) {
        self.started(call).await;
        self.failed(&call.id, &call.name, 0, error).await;
    }
}
