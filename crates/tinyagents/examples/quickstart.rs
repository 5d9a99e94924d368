//! Quickstart: an agent with two typed tools, one of them called twice in
//! the same turn (it is read-only, so both calls run together), on a
//! scripted model (offline, deterministic).
//!
//! `cargo run -p tinyagents --example quickstart`; set `TINYAGENTS_MODEL`
//! (e.g. `openai:gpt-4o-mini`, see docs/models.md) to run it on a real model.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

#[json_schema]
struct City {
    /// The city to look up.
    city: String,
}

#[json_schema]
struct Difference {
    /// First temperature in °C.
    a: f64,
    /// Second temperature in °C.
    b: f64,
}

/// What the weather tool answers: any `Serialize` type is a tool result.
#[json_schema]
struct Weather {
    city: String,
    celsius: f64,
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
    let weather = FnTool::new(
        "get_weather",
        "Current temperature of a city in °C.",
        |args: City| async move {
            let celsius = temperature_of(&args.city);
            anyhow::Ok(Weather {
                city: args.city,
                celsius,
            })
        },
    )
    .map_spec(ToolSpec::read_only);
    let difference = FnTool::new(
        "difference",
        "a - b, rounded to one decimal.",
        |args: Difference| async move { anyhow::Ok(format!("{:.1}", args.a - args.b)) },
    );

    // The script plays the model: two weather calls in one turn, one
    // difference call, then the answer.
    let script = ScriptedModel::new([
        ScriptedModel::tool_calls([
            ("get_weather", json!({ "city": "Paris" })),
            ("get_weather", json!({ "city": "Oslo" })),
        ]),
        ScriptedModel::tool_call("difference", json!({ "a": 14.0, "b": 3.5 })),
        ChatResponse::text("Paris is 10.5 °C warmer than Oslo."),
    ]);
    let model: Arc<dyn ChatModel> = match tinyagents::models::from_env() {
        Some(model) => model?,
        None => Arc::new(script),
    };

    let agent = Agent::builder("weather")
        .model(model)
        .instructions("You answer questions about the weather. Use the tools.")
        .tool(weather)
        .tool(difference)
        .build()?;
    let run = agent.run("How much warmer is Paris than Oslo?").await?;

    println!("status: {:?}", run.status);
    println!("tool calls: {}", run.budget.tool_calls);
    println!("answer: {}", run.final_text);
    Ok(())
}
