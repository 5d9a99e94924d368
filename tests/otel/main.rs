//! OpenTelemetry export through the facade (`tinyagents::otel`, feature
//! `otel`): the spans of real harness runs, read back from the SDK's
//! in-memory exporter under `tinyagents::otel::layer`, checked against the
//! GenAI semantic conventions (docs/observability.md): the tree on every
//! origin, the attributes, no payload without capture and none unredacted
//! with it, a resumed run's own root; and the OTLP exporter itself, against
//! a loopback receiver.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod attributes;
mod export;
mod payloads;
mod resume;
mod tree;

use std::sync::Arc;

use opentelemetry::trace::{SpanId, Status, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use tinyagents::prelude::*;
use tracing_subscriber::layer::SubscriberExt;

/// Spans of what runs while it is alive, exported synchronously to memory.
/// The subscriber is this thread's default: tests run on current-thread
/// runtimes.
struct Spans {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _default: tracing::subscriber::DefaultGuard,
}

impl Spans {
    fn capture() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(tinyagents::otel::layer(&provider));
        let default = tracing::subscriber::set_default(subscriber);
        Self {
            exporter,
            provider,
            _default: default,
        }
    }

    /// Every span that ended so far.
    fn finished(&self) -> Vec<SpanData> {
        self.provider.force_flush().unwrap();
        self.exporter.get_finished_spans().unwrap()
    }
}

/// A span's attribute, as text.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The one span named `name`.
fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span '{name}' in {:?}", names(spans));
    found[0]
}

/// The one `execute_tool` span of `tool`'s call with harness id `id`.
fn tool_call<'a>(spans: &'a [SpanData], tool: &str, id: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            attr(s, "gen_ai.operation.name").as_deref() == Some("execute_tool")
                && attr(s, "gen_ai.tool.name").as_deref() == Some(tool)
                && attr(s, "gen_ai.tool.call.id").as_deref() == Some(id)
        })
        .collect();
    assert_eq!(found.len(), 1, "one {tool} {id} in {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn id(span: &SpanData) -> SpanId {
    span.span_context.span_id()
}

fn trace(span: &SpanData) -> TraceId {
    span.span_context.trace_id()
}

fn is_child_of(child: &SpanData, parent: &SpanData) -> bool {
    child.parent_span_id == id(parent) && trace(child) == trace(parent)
}

fn is_root(span: &SpanData) -> bool {
    span.parent_span_id == SpanId::INVALID
}

fn is_error(span: &SpanData) -> bool {
    matches!(span.status, Status::Error { .. })
}

/// Every attribute value of every span, for searching.
fn every_attribute(spans: &[SpanData]) -> String {
    spans
        .iter()
        .flat_map(|s| {
            s.attributes
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value.as_str()))
                .chain(std::iter::once(format!("status={:?}", s.status)))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const PAYLOAD_KEYS: [&str; 4] = [
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
];

/// A secret the built-in redaction knows (an OpenAI-style key).
const SECRET: &str = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z";

#[json_schema]
struct Record {
    /// The record's id.
    id: String,
}

/// A tool whose result holds the secret.
fn fetch() -> impl Tool {
    FnTool::new("fetch", "Fetches a record.", |r: Record| async move {
        anyhow::Ok(format!("record {} with key {SECRET}", r.id))
    })
}

/// The team every tree test runs: a coordinator whose model calls `lookup`
/// (p1, which nests `fetch`, p1/1) and then the `specialist` agent as a
/// tool (p2), whose own model calls `fetch` (its p1) once.
fn team(capture: PayloadCapture) -> Agent {
    let lookup = FnTool::with_context(
        "lookup",
        "Looks a record up, fetching it.",
        |r: Record, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let found = exec.call_tool("fetch", json!({ "id": r.id })).await?;
            anyhow::Ok(format!("looked up: {}", found.content))
        },
    );
    let redaction = || Arc::new(tinyagents::middleware::RedactionMiddleware::new());
    let specialist = Agent::builder("specialist")
        .model(
            ScriptedModel::new([
                ScriptedModel::tool_call("fetch", json!({ "id": "r-2" })),
                ChatResponse::text("the specialist's answer").with_usage(usage(7, 3)),
            ])
            .named("specialist-model"),
        )
        .tool(fetch())
        .middleware(redaction())
        .payload_capture(capture)
        .build()
        .unwrap();
    Agent::builder("coordinator")
        .model(
            ScriptedModel::new([
                ScriptedModel::tool_call("lookup", json!({ "id": "r-1" })).with_usage(usage(11, 5)),
                ScriptedModel::tool_call("specialist", json!({ "query": "what of r-2?" })),
                ChatResponse::text("done").with_usage(usage(13, 2)),
            ])
            .named("coordinator-model"),
        )
        .tool(lookup)
        .tool(fetch())
        .tool(specialist.as_tool("specialist", "Answers about records."))
        .max_nested_depth(1)
        .middleware(redaction())
        .payload_capture(capture)
        .build()
        .unwrap()
}

fn usage(input_tokens: u64, output_tokens: u64) -> Usage {
    Usage::new(input_tokens, output_tokens)
}
