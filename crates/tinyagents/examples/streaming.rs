//! Streaming: read a run's events while it runs, then take its result,
//! from one handle (`Agent::stream`). Events of a delegated agent arrive
//! wrapped as `Delegated` under the call that started it.
//!
//! `cargo run -p tinyagents --example streaming`; set `TINYAGENTS_MODEL` to
//! run it on a real model.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

fn model(script: Vec<ChatResponse>) -> Result<Arc<dyn ChatModel>, Box<dyn std::error::Error>> {
    Ok(match tinyagents::models::from_env() {
        Some(model) => model?,
        None => Arc::new(ScriptedModel::new(script)),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let packing = Agent::builder("packing")
        .model(model(vec![ChatResponse::text(
            "A warm coat, a hat and gloves.",
        )])?)
        .instructions("You advise travellers on what to pack. One sentence.")
        .build()?;
    let agent = Agent::builder("travel")
        .model(model(vec![
            ScriptedModel::tool_call("packing", json!({ "query": "Oslo at 3 °C?" })),
            ChatResponse::text("Pack a warm coat, a hat and gloves."),
        ])?)
        .instructions("You help people travel. Ask packing what to pack.")
        .tool(packing.as_tool(
            "packing",
            "Says what to pack for a place and a temperature.",
        ))
        .payload_capture(PayloadCapture::all())
        .build()?;

    let mut handle = agent.stream("I am going to Oslo. What should I pack?");
    while let Some(event) = handle.next_event().await {
        println!("{}", serde_json::to_string(&event)?);
    }
    let run = handle.wait().await?;
    println!("{:?}: {}", run.status, run.final_text);
    Ok(())
}
