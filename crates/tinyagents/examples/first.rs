//! The README's first program, as it shows it (the newcomer test in
//! tests/ergonomics/newcomer.rs compares the two byte for byte): an agent
//! with one tool, on a scripted model, offline.
//!
//! `cargo run -p tinyagents --example first`

#![allow(clippy::print_stdout)] // an example prints what it shows

use tinyagents::prelude::*;

#[json_schema]
struct Add {
    /// The first number.
    a: i64,
    b: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
        anyhow::Ok(args.a + args.b) // any `Serialize` value is a result
    });
    // A scripted model plays the model, offline: it calls `add`, then
    // answers. For a real one, the one line to change:
    // let model = tinyagents::models::from_spec("openai:gpt-4o-mini")?;
    let model = ScriptedModel::new([
        ScriptedModel::tool_call("add", serde_json::json!({ "a": 2, "b": 3 })),
        ChatResponse::text("2 + 3 = 5"),
    ]);
    let agent = Agent::builder("calculator")
        .model(model)
        .instructions("Add what you are asked to add.")
        .tool(add)
        .build()?; // every wiring problem is reported here, at once
    let run = agent.run("What is 2 + 3?").await?;
    println!(
        "{:?} after {} tool call(s): {}",
        run.status, run.budget.tool_calls, run.final_text
    );
    Ok(())
}
