//! The run's spans, named and attributed after OpenTelemetry's GenAI
//! semantic conventions: `invoke_agent {agent}` for each run segment (a
//! run, a resume, a recovery), `chat {model}` for each model call and
//! `execute_tool {tool}` for each tool call, one that ran and one refused
//! before it ran. They are `tracing` spans: exporting them is the host's
//! business (`tinyagents-otel`), and docs/observability.md lists every
//! attribute.
//!
//! Parentage: a segment's span opens under whatever span is current where
//! it is awaited (a delegated agent's run is awaited inside its caller's
//! `execute_tool` span, so it nests there); a chat and a model-issued call
//! open under their segment's span; a nested call opens under its calling
//! tool's span, carried to the loop with the request (the loop that serves
//! it polls it outside that span).
//!
//! Cost: with no subscriber a span is a callsite check and its fields are
//! never evaluated. Payloads (`gen_ai.input.messages`,
//! `gen_ai.tool.call.arguments`, …) are formatted only under
//! `PayloadCapture` and on an enabled span, from the redacted values the
//! events carry.

mod messages;

use serde_json::{Map, Value};
use tinyagents_core::{CallId, ChatResponse, Message, RunStatus, TinyAgentsError, ToolResult};
use tinytools::cut;
use tracing::Span;
use tracing::field::Empty;

use crate::call::{Redaction, ToolEvents};
use crate::harness::AgentHarness;
use crate::run::{AgentRun, SESSION_PROPERTY};
use crate::tool::RunShared;

/// OpenTelemetry's `error.type`.
const ERROR_TYPE: &str = "error.type";

/// The session a run belongs to, its `gen_ai.conversation.id`.
fn session(properties: &Map<String, Value>) -> Option<&str> {
    properties.get(SESSION_PROPERTY).and_then(Value::as_str)
}

/// Marks `span` failed: `error.type` and the OpenTelemetry error status
/// (the `otel.status_*` fields `tracing-opentelemetry` reads).
fn fail(span: &Span, error_type: &str, description: &str) {
    span.record(ERROR_TYPE, error_type);
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", description);
}

/// What kind of segment an `invoke_agent` span covers.
#[derive(Clone, Copy)]
pub(crate) enum Segment {
    Run,
    Resume,
    Recover,
}

impl Segment {
    fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Resume => "resume",
            Self::Recover => "recover",
        }
    }
}

/// The `invoke_agent` span of one run segment.
pub(crate) fn invoke_agent(
    harness: &AgentHarness,
    run_id: &tinyagents_core::RunId,
    properties: &Map<String, Value>,
    depth: u32,
    segment: Segment,
) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", harness.agent_name()),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %harness.agent_name(),
        gen_ai.provider.name = %harness.model.provider(),
        gen_ai.request.model = %harness.model.name(),
        gen_ai.conversation.id = session(properties),
        tinyagents.run.id = %run_id,
        tinyagents.run.segment = segment.as_str(),
        tinyagents.depth = count(depth),
        tinyagents.run.status = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        "error.type" = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Records what a recovery learns from the checkpoint once it has read
/// it: the run's session and depth.
pub(crate) fn restored(span: &Span, properties: &Map<String, Value>, depth: u32) {
    if span.is_disabled() {
        return;
    }
    if let Some(session) = session(properties) {
        span.record("gen_ai.conversation.id", session);
    }
    span.record("tinyagents.depth", count(depth));
}

/// Records how a segment ended: its status and the run's token totals, or
/// its error (redacted).
pub(crate) fn run_ended(
    span: &Span,
    result: &Result<AgentRun, TinyAgentsError>,
    harness: &AgentHarness,
) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(run) => {
            span.record("tinyagents.run.status", status(run.status));
            span.record("gen_ai.usage.input_tokens", count(run.usage.input_tokens));
            span.record("gen_ai.usage.output_tokens", count(run.usage.output_tokens));
        }
        Err(error) => {
            let redaction = Redaction::new(std::sync::Arc::clone(&harness.middlewares));
            fail(span, error.error_type(), &redaction.text(error.to_string()));
        }
    }
}

fn status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Completed => "completed",
        RunStatus::Terminated => "terminated",
        RunStatus::LimitReached(_) => "limit_reached",
        RunStatus::Cancelled => "cancelled",
        RunStatus::AwaitingApproval => "awaiting_approval",
    }
}

/// The `chat` span of one model call. Under `model_io` capture its input
/// messages (redacted) are recorded at once.
pub(crate) fn chat(
    harness: &AgentHarness,
    ctx: &tinyagents_core::RunContext,
    turn: u32,
    messages: &[Message],
    redaction: &Redaction,
) -> Span {
    let model = &harness.model;
    let span = tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {}", model.name()),
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %model.provider(),
        gen_ai.request.model = %model.name(),
        gen_ai.conversation.id = session(&ctx.properties),
        tinyagents.run.id = %ctx.run_id,
        tinyagents.turn = count(turn),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        "error.type" = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    if ctx.capture.model_io && !span.is_disabled() {
        let input = messages::input(messages, redaction);
        span.record("gen_ai.input.messages", input.as_str());
    }
    span
}

/// Records a model's answer on its `chat` span: usage, finish reason and,
/// under `model_io` capture, the output message (redacted).
pub(crate) fn chat_answered(
    span: &Span,
    response: &ChatResponse,
    capture: bool,
    redaction: &Redaction,
) {
    if span.is_disabled() {
        return;
    }
    span.record(
        "gen_ai.usage.input_tokens",
        count(response.usage.input_tokens),
    );
    span.record(
        "gen_ai.usage.output_tokens",
        count(response.usage.output_tokens),
    );
    if let Some(reason) = &response.finish_reason {
        // An array in the conventions; `tracing` records strings.
        let reasons = Value::Array(vec![Value::String(reason.clone())]).to_string();
        span.record("gen_ai.response.finish_reasons", reasons.as_str());
    }
    if capture {
        let output = messages::output(response, redaction);
        span.record("gen_ai.output.messages", output.as_str());
    }
}

/// Marks a model call failed.
pub(crate) fn chat_failed(span: &Span, error_type: &str, description: &str, redaction: &Redaction) {
    if !span.is_disabled() {
        fail(span, error_type, &redaction.text(description.to_owned()));
    }
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
            tinyagents.depth = $crate::trace::count($tool.run.depth),
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
