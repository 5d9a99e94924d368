//! Typed output: the final answer as a Rust value. The model is asked for
//! JSON matching the type's schema (OpenAI-compatible providers get it as
//! `response_format`, Anthropic as a forced tool); the answer is checked
//! against the compiled schema and read into the type. Here the script's
//! first answer does not fit, so the agent sends back what was wrong and
//! reads the second.
//!
//! `cargo run -p tinyagents --example typed_output`; set `TINYAGENTS_MODEL`
//! to run it on a real model.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

/// A support ticket, triaged.
#[json_schema]
#[derive(Debug)]
struct Triage {
    /// One of "billing", "outage", "other".
    category: String,
    /// 1 (lowest) to 4 (highest).
    priority: u8,
    /// One sentence for the on-call engineer.
    summary: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let script = ScriptedModel::new([
        // Not a Triage: the priority is missing.
        ScriptedModel::json(json!({ "category": "outage", "summary": "Checkout is down." })),
        ScriptedModel::json(json!({
            "category": "outage",
            "priority": 4,
            "summary": "Checkout returns 500 for every customer since 09:12."
        })),
    ]);
    let model: Arc<dyn ChatModel> = match tinyagents::models::from_env() {
        Some(model) => model?,
        None => Arc::new(script),
    };
    let agent = Agent::builder("triage")
        .model(model)
        .instructions("You triage support tickets.")
        .build()?;
    let triaged = agent
        .run_typed::<Triage>("Checkout has been failing with a 500 for everyone since 09:12!")
        .await?;
    println!("{:#?}", triaged.output);
    Ok(())
}
