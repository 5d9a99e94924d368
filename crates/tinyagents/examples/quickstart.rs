//! Quickstart: an agent that calls two tools, one of them twice in the same
//! turn, on a scripted model (offline, deterministic). Prints each event as
//! it happens, then the final answer.
//!
//! Run it with `cargo run -p tinyagents --example quickstart`.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

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
    // A read-only tool: concurrency-safe, so both calls of a turn run together.
    let weather = FnTool::new("get_weather", "Current temperature of a city in °C.", |args: WeatherArgs| async move {
        anyhow::Ok(json!({ "city": args.city, "celsius": temperature_of(&args.city) }))
    })
    .map_spec(ToolSpec::read_only);
    let difference = FnTool::new("difference", "a - b, rounded to one decimal.", |args: DifferenceArgs| async move {
        anyhow::Ok(format!("{:.1}", args.a - args.b))
    });

    // The script plays the model: two weather calls in one turn, then one
    // difference call, then the answer.
    let model = ScriptedModel::new([
        ScriptedModel::tool_calls([
            ("get_weather", json!({ "city": "Paris" })),
            ("get_weather", json!({ "city": "Oslo" })),
        ]),
        ScriptedModel::tool_call("difference", json!({ "a": 14.0, "b": 3.5 })),
        ChatResponse::text("Paris is 10.5 °C warmer than Oslo right now."),
    ]);

    let harness = AgentHarness::builder(Arc::new(model))
        .system_prompt("You answer questions about the weather.")
        .tool(weather)?
        .tool(difference)?
        .payload_capture(PayloadCapture::all())
        .build()?;

    let (events, mut receiver) = event_channel(64);
    let printer = tokio::spawn(async move {
        while let Some(event) = receiver.recv().await {
            println!("event: {}", serde_json::to_string(&event).unwrap_or_default());
        }
    });
    let run = harness
        .run_with(RunRequest::new("How much warmer is Paris than Oslo?"), &events)
        .await?;
    drop(events);
    printer.await?;

    println!();
    println!("status: {:?}", run.status);
    println!("tool calls: {}", run.budget.tool_calls);
    println!("answer: {}", run.final_text);
    Ok(())
}
