//! Quickstart: a coordinator agent that calls two tools, one of them twice
//! in the same turn, then delegates to a specialist agent exposed to it as
//! a tool, on scripted models (offline, deterministic). Prints each event as
//! it happens (the specialist's arrive wrapped as `delegated`), then the
//! final answer. Set `TINYAGENTS_MODEL` to run it on a real model.
//!
//! Run it with `cargo run -p tinyagents --example quickstart`.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    AgentBuildRequest, AgentDefinition, AgentOrchestrator, HostTools, InMemorySessionStore,
    ModelOptions, ModelRegistry,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// The city to look up.
    city: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DifferenceArgs {
    /// First temperature in °C.
    a: f64,
    /// Second temperature in °C.
    b: f64,
}

fn temperature_of(city: &str) -> f64 {
    match city {
        "Paris" => 14.0,
        "Oslo" => 3.5,
        _ => 20.0,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // With TINYAGENTS_TRACE set, the run's spans (named after OpenTelemetry's
    // GenAI conventions: invoke_agent, chat, execute_tool) print to stderr
    // as they close, with their timings.
    if std::env::var_os("TINYAGENTS_TRACE").is_some() {
        tracing_subscriber::fmt()
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    // A read-only tool: concurrency-safe, so both calls of a turn run together.
    let weather = FnTool::new(
        "get_weather",
        "Current temperature of a city in °C.",
        |args: WeatherArgs| async move {
            anyhow::Ok(json!({ "city": args.city, "celsius": temperature_of(&args.city) }))
        },
    )
    .map_spec(ToolSpec::read_only);
    let difference = FnTool::new(
        "difference",
        "a - b, rounded to one decimal.",
        |args: DifferenceArgs| async move { anyhow::Ok(format!("{:.1}", args.a - args.b)) },
    );

    // The scripts play the models. The coordinator: two weather calls in one
    // turn, one difference call, a question for the packing specialist (its
    // function is named after its display name), then the answer.
    let coordinator_model = ScriptedModel::new([
        ScriptedModel::tool_calls([
            ("get_weather", json!({ "city": "Paris" })),
            ("get_weather", json!({ "city": "Oslo" })),
        ]),
        ScriptedModel::tool_call("difference", json!({ "a": 14.0, "b": 3.5 })),
        ScriptedModel::tool_call(
            "Packing_Advisor",
            json!({ "query": "What should I pack for Oslo at 3.5 °C?" }),
        ),
        ChatResponse::text(
            "Paris is 10.5 °C warmer than Oslo right now; for Oslo, pack a warm coat, a hat and gloves.",
        ),
    ]);
    let specialist_model =
        ScriptedModel::new([ChatResponse::text("A warm coat, a hat and gloves.")]);

    // The agents, as a host would store them: the coordinator may use the
    // two tools and call the specialist, which is exposed as a tool.
    let coordinator = AgentDefinition::new("coordinator", "Coordinator")
        .instruction("You answer questions about the weather.")
        .tools(["get_weather", "difference"])
        .agent_tools(["packing"]);
    let packing = AgentDefinition::new("packing", "Packing Advisor")
        .description("Suggests what to pack for a temperature.")
        .instruction("You advise travellers on what to pack.")
        .model("specialist", ModelOptions::default())
        .exposed();

    // With `TINYAGENTS_MODEL` set (see docs/models.md), both agents run on
    // that real model instead of the scripts.
    let models = match tinyagents::from_env() {
        Some(model) => {
            let model = model?;
            ModelRegistry::new(Arc::clone(&model)).with("specialist", model)
        }
        None => ModelRegistry::new(Arc::new(coordinator_model))
            .with("specialist", Arc::new(specialist_model)),
    };
    let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()));
    let agent = orchestrator
        .get_or_create_agent(
            AgentBuildRequest::new(
                "coordinator",
                [Arc::new(coordinator), Arc::new(packing)],
                Arc::new(models),
            )
            .tools(HostTools::new().with(weather).with(difference))
            .customize_agents(|_, builder| builder.payload_capture(PayloadCapture::all())),
        )
        .await?;

    let (events, mut receiver) = event_channel(64);
    let printer = tokio::spawn(async move {
        while let Some(event) = receiver.recv().await {
            println!(
                "event: {}",
                serde_json::to_string(&event).unwrap_or_default()
            );
        }
    });
    let run = agent
        .run(
            RunRequest::new("How much warmer is Paris than Oslo, and what should I pack?"),
            &events,
        )
        .await?;
    drop(events);
    printer.await?;

    println!();
    println!("status: {:?}", run.status);
    println!("tool calls: {}", run.budget.tool_calls);
    println!("answer: {}", run.final_text);
    Ok(())
}
