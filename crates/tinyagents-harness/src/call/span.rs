//! A tool call's `execute_tool` span (see `crate::trace` for the run's
//! spans and their conventions): opened as the call runs or is refused,
//! closed with how it ended; payloads only under capture, redacted.

use serde_json::Value;
use tinyagents_core::{CallId, TinyAgentsError, ToolResult};
use tinytools::cut;
use tracing::Span;
use tracing::field::Empty;

use super::ToolEvents;
use super::context::RunShared;

/// OpenTelemetry's `error.type`.
const ERROR_TYPE: &str = "error.type";

/// Marks `span` failed: `error.type` and the OpenTelemetry error status
/// (the `otel.status_*` fields `tracing-opentelemetry` reads).
pub(crate) fn fail(span: &Span, error_type: &str, description: &str) {
    span.record(ERROR_TYPE, error_type);
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", description);
}

/// One tool call's `execute_tool` span, before it opens.
pub(crate) struct ToolSpan<'a> {
    /// The harness's id (`p1`, `p1/1`): `gen_ai.tool.call.id`.
    pub(crate) id: &'a CallId,
    pub(crate) name: &'a str,
    /// The provider's id, beside the harness's.
    pub(crate) provider_id: Option<&'a str>,
    /// The calling tool's span, for a nested call.
    pub(crate) parent: Option<&'a Span>,
    pub(crate) run: &'a RunShared,
}

/// The fields of an `execute_tool` span, with or without an explicit
/// parent.
macro_rules! tool_span {
    ($tool:expr $(, parent: $parent:expr)?) => {
        tracing::info_span!(
            $(parent: $parent,)?
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", $tool.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = $tool.name,
            gen_ai.tool.call.id = %$tool.id,
            tinyagents.tool.provider_call_id = $tool.provider_id,
            tinyagents.call.parent_id = $tool.id.parent().as_ref().map(tracing::field::display),
            tinyagents.run.id = %$tool.run.run_id,
            tinyagents.depth = $crate::call::count($tool.run.depth),
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            "error.type" = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        )
    };
}

impl ToolSpan<'_> {
    /// Opens the span; under `tool_io` capture it records the call's
    /// arguments, redacted as its `ToolStarted` shows them.
    pub(crate) fn open(&self, events: &ToolEvents, arguments: impl FnOnce() -> Value) -> Span {
        let span = match self.parent {
            Some(parent) => tool_span!(self, parent: parent),
            None => tool_span!(self),
        };
        if events.captures() && !span.is_disabled() {
            let arguments = arguments().to_string();
            span.record("gen_ai.tool.call.arguments", arguments.as_str());
        }
        span
    }

    /// The span of a call refused before it ran: opened and closed at once,
    /// failed with `error_type` and `text` (redacted).
    pub(crate) fn refused(
        &self,
        events: &ToolEvents,
        arguments: impl FnOnce() -> Value,
        error_type: &str,
        text: &str,
    ) {
        let span = self.open(events, arguments);
        if !span.is_disabled() {
            fail(&span, error_type, &events.redaction().text(text.to_owned()));
        }
    }
}

/// Records how a call that ran ended on its span: under `tool_io` capture
/// its result (redacted, cut to `max_bytes`), and for a failure the
/// error's `error.type` (a panic, a timeout, a refusal by a wrap layer: a
/// panicking tool is `tool_failed`, its text says it panicked) with the
/// error status, described by its redacted host text as `ToolFailed` is. A
/// result that reports its own failure (`is_error`) is `tool_error`,
/// described by its text only under capture.
pub(crate) fn tool_ended(
    span: &Span,
    result: &Result<ToolResult, TinyAgentsError>,
    events: &ToolEvents,
    max_bytes: usize,
) {
    if span.is_disabled() {
        return;
    }
    let redaction = events.redaction();
    match result {
        Ok(result) => {
            let content = events
                .captures()
                .then(|| cut(&redaction.text(result.content.clone()), max_bytes));
            if let Some(content) = &content {
                span.record("gen_ai.tool.call.result", content.as_str());
            }
            if result.is_error {
                let text = content.as_deref().unwrap_or("the tool reported an error");
                fail(span, "tool_error", text);
            }
        }
        // It asked for a person and did not act: not a failure.
        Err(TinyAgentsError::ApprovalRequired { .. }) => {}
        Err(error) => {
            let text = cut(&redaction.text(error.host_text()), max_bytes);
            fail(span, error.error_type(), &text);
        }
    }
}

/// A count as the integer OpenTelemetry exports: tracing-opentelemetry
/// turns a `u64` field into a string, the GenAI conventions want an int.
pub(crate) fn count(n: impl Into<u64>) -> i64 {
    i64::try_from(n.into()).unwrap_or(i64::MAX)
}
