//! A small team whose spans go to an OpenTelemetry receiver: run it with
//! `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:6006/v1/traces cargo run
//! -p tinyagents --example otel --features otel` (OTLP over HTTP/protobuf;
//! `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` with a gRPC endpoint for gRPC). With
//! no endpoint it says so and runs without export. Offline, on scripts.
//!
//! The `coordinator` asks its `research` tool, which nests a call to
//! `lookup`, then the `specialist` agent exposed as a tool, whose model
//! calls `lookup` too. The tree it exports, one trace:
//!
//! ```text
//! invoke_agent coordinator
//! ├── chat coordinator-model
//! ├── execute_tool research          gen_ai.tool.call.id = p1
//! │   └── execute_tool lookup        p1/1 (nested)
//! ├── chat coordinator-model
//! ├── execute_tool specialist        p2
//! │   └── invoke_agent specialist    (the delegated run)
//! │       ├── chat specialist-model
//! │       ├── execute_tool lookup    p1 (of the specialist's run)
//! │       └── chat specialist-model
//! └── chat coordinator-model
//! ```
#![allow(clippy::print_stdout)] // an example prints what it shows

use serde_json::json;
use tinyagents::otel::Export;
use tinyagents::prelude::*;

type Error = Box<dyn std::error::Error>;

#[json_schema]
struct Topic {
    /// What to look up.
    topic: String,
}

fn lookup() -> impl Tool {
    FnTool::new("lookup", "Looks a topic up.", |t: Topic| async move {
        anyhow::Ok(format!("{}: three sources agree", t.topic))
    })
    .map_spec(ToolSpec::read_only)
}

fn team() -> Result<Agent, Error> {
    let research = FnTool::with_context(
        "research",
        "Researches a topic, looking it up.",
        |t: Topic, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let found = exec
                .call_tool("lookup", json!({ "topic": t.topic }))
                .await?;
            anyhow::Ok(format!("research notes: {}", found.content))
        },
    );
    let usage = Usage::new;
    let specialist = Agent::builder("specialist")
        .model(
            ScriptedModel::new([
                ScriptedModel::tool_call("lookup", json!({ "topic": "tides" }))
                    .with_usage(usage(40, 8)),
                ChatResponse::text("Tides follow the moon.").with_usage(usage(60, 6)),
            ])
            .named("specialist-model"),
        )
        .instructions("You answer one question about the sea, in one sentence.")
        .tool(lookup())
        .build()?;
    Ok(Agent::builder("coordinator")
        .model(
            ScriptedModel::new([
                ScriptedModel::tool_call("research", json!({ "topic": "tides" }))
                    .with_usage(usage(30, 9)),
                ScriptedModel::tool_call("specialist", json!({ "query": "Why are there tides?" }))
                    .with_usage(usage(50, 12)),
                ChatResponse::text("Tides follow the moon, and three sources agree.")
                    .with_usage(usage(80, 11)),
            ])
            .named("coordinator-model"),
        )
        .instructions("You coordinate: research first, then ask the specialist.")
        .tool(research)
        .tool(lookup())
        .tool(specialist.as_tool("specialist", "Answers questions about the sea."))
        .max_nested_depth(1)
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let guard = match Export::from_env() {
        Some(export) => {
            println!("exporting spans to {}", export.endpoint());
            Some(export.service_name("tinyagents-example").install()?)
        }
        None => {
            println!("OTEL_EXPORTER_OTLP_ENDPOINT is not set: running without export");
            None
        }
    };
    let run = team()?.run("Why are there tides?").await?;
    println!("{}", run.final_text);
    println!("run id: {}", run.run_id);
    if let Some(guard) = guard {
        // Flushes the batch before the process ends.
        guard.shutdown()?;
    }
    Ok(())
}
