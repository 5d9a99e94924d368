//! How a nested call's end is reported when the loop does not run it to
//! its settlement: refused without the loop, failed, abandoned, or swept
//! when its parent settled. Whoever claims a call's end delivers its one
//! terminal event.

use serde_json::Value;
use tinyagents_core::CallId;

use super::{Abandoned, NestedRequest, NestedRunner, NestedStatus, parent_settled};
use crate::call::ToolSpan;

impl NestedRunner {
    /// Refuses a request the loop never serviced (its batch ended first).
    pub(crate) async fn refuse_unserviced(&self, request: NestedRequest) {
        let Some(request) = self.drop_orphan(request) else {
            return;
        };
        let error = parent_settled(&request.name, &request.parent, "settled");
        let message = error.to_string();
        self.refuse_here(
            &request.id,
            &request.parent,
            &request.name,
            &request.arguments,
            &message,
            &request.span,
        )
        .await;
        let _ = request.reply.send(Err(error));
    }

    /// Refuses a call without the loop: its `ToolStarted`, its summary entry,
    /// its `ToolFailed` and its span (under `span`, its parent's).
    pub(super) async fn refuse_here(
        &self,
        id: &CallId,
        parent: &CallId,
        name: &str,
        arguments: &Value,
        message: &str,
        span: &tracing::Span,
    ) {
        let tool = ToolSpan {
            id,
            name,
            provider_id: None,
            parent: Some(span),
            run: &self.run,
        };
        let redaction = self.events.redaction();
        tool.refused(
            &self.events,
            || redaction.copy(arguments),
            "refused",
            message,
        );
        self.events
            .started_nested(id, parent, name, arguments)
            .await;
        let _charged = self.started(id, parent, name, self.summary_args(arguments));
        self.end_failed(id, 0, NestedStatus::Failed, message).await;
    }

    /// Claims a call's end and delivers its `ToolFailed`, unless its end was
    /// already claimed. `error` is redacted first (a refusal may quote what
    /// a hook or the gate said).
    pub(crate) async fn end_failed(
        &self,
        id: &CallId,
        duration_ms: u64,
        status: NestedStatus,
        error: &str,
    ) {
        let error = self.events.redaction().text(error.to_owned());
        self.end_with(id, duration_ms, status, |_| error).await;
    }

    /// Ends a call whose caller stopped waiting for it.
    pub(crate) async fn end_abandoned(&self, id: &CallId, parent: &CallId) {
        let text = |name: &str| {
            format!("parent settled: {parent} stopped waiting for nested call '{name}'")
        };
        self.end_with(id, 0, NestedStatus::Abandoned, text).await;
    }

    /// Claims a call's end in one lock, its error text made from its name,
    /// and delivers its `ToolFailed`; nothing when its end was claimed
    /// already.
    async fn end_with(
        &self,
        id: &CallId,
        duration_ms: u64,
        status: NestedStatus,
        error: impl FnOnce(&str) -> String,
    ) {
        let claimed = {
            let mut state = self.state.lock();
            state.in_flight.remove(id).map(|flight| {
                let name = flight.name.clone();
                let error = error(&name);
                self.close(&mut state, id, flight, status, &error);
                (name, error)
            })
        };
        if let Some((name, error)) = claimed {
            self.events.failed(id, &name, duration_ms, &error).await;
            self.ended(id);
        }
    }

    /// Delivers the `ToolFailed` of nested calls whose end a sweep claimed.
    pub(crate) async fn report_abandoned(&self, abandoned: Vec<Abandoned>) {
        for call in abandoned {
            self.events
                .failed(&call.id, &call.name, call.duration_ms, &call.error)
                .await;
            self.ended(&call.id);
        }
    }
}
