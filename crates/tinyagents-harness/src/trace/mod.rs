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
use tinyagents_core::{ChatResponse, Cost, Message, RunStatus, TinyAgentsError, Usage};
use tracing::Span;
use tracing::field::Empty;

use crate::call::{Redaction, count, fail};
use crate::harness::AgentHarness;
use crate::run::{AgentRun, SESSION_PROPERTY};

/// The session a run belongs to, its `gen_ai.conversation.id`.
fn session(properties: &Map<String, Value>) -> Option<&str> {
    properties.get(SESSION_PROPERTY).and_then(Value::as_str)
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
        gen_ai.usage.cache_read.input_tokens = Empty,
        tinyagents.usage.reasoning_tokens = Empty,
        tinyagents.cost = Empty,
        tinyagents.cost.unpriced_calls = Empty,
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

/// Records how a segment ended: its status and the tokens and money of the
/// run and every run it delegated to, or its error (redacted).
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
            let spent = &run.budget.spent;
            record_usage(
                span,
                &spent.usage,
                (spent.model_calls > spent.unpriced_calls).then_some(spent.cost),
            );
            span.record(
                "tinyagents.cost.unpriced_calls",
                u64::from(spent.unpriced_calls),
            );
        }
        Err(error) => {
            let redaction = Redaction::new(std::sync::Arc::clone(&harness.calls.middlewares));
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
        gen_ai.usage.cache_read.input_tokens = Empty,
        tinyagents.usage.reasoning_tokens = Empty,
        tinyagents.cost = Empty,
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
    cost: Option<Cost>,
    capture: bool,
    redaction: &Redaction,
) {
    if span.is_disabled() {
        return;
    }
    record_usage(span, &response.usage, cost);
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

/// Records tokens (the cache and reasoning counts when the provider gave
/// them) and, when known, money in the price table's smallest unit.
fn record_usage(span: &Span, usage: &Usage, cost: Option<Cost>) {
    span.record("gen_ai.usage.input_tokens", count(usage.input_tokens));
    span.record("gen_ai.usage.output_tokens", count(usage.output_tokens));
    if usage.cached_input_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            count(usage.cached_input_tokens),
        );
    }
    if usage.reasoning_tokens > 0 {
        span.record(
            "tinyagents.usage.reasoning_tokens",
            count(usage.reasoning_tokens),
        );
    }
    if let Some(cost) = cost {
        span.record("tinyagents.cost", tracing::field::display(cost));
    }
}

/// Marks a model call failed.
pub(crate) fn chat_failed(span: &Span, error_type: &str, description: &str, redaction: &Redaction) {
    if !span.is_disabled() {
        fail(span, error_type, &redaction.text(description.to_owned()));
    }
}
