//! The tinyagents MCP server the real-client tests (`tests/mcp/`) run: an
//! agent `assistant` and a tool `slow_steps`, over stdio (`stdio`) or
//! Streamable HTTP (`http`, printing `listening <url>` on stdout).
//!
//! The assistant's model answers `answer N to: <query>`, N counting the
//! user turns it has read, so a client sees a conversation continue.
//! `slow_steps {steps}` reports one progress per step, 50 ms apart, and
//! when cancelled appends `cancelled` to the file `TINYAGENTS_MCP_MARKER`
//! names.
#![allow(clippy::print_stdout)] // it prints its URL

use std::time::Duration;

use tinyagents::prelude::*;
use tinyagents_tests::CountingModel;

#[json_schema]
struct Steps {
    /// How many steps.
    steps: u32,
}

fn mark_cancelled() {
    if let Some(path) = std::env::var_os("TINYAGENTS_MCP_MARKER") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "cancelled");
        }
    }
}

fn server() -> Result<McpServer, Box<dyn std::error::Error>> {
    let assistant = Agent::builder("assistant")
        .model(CountingModel)
        .instructions("You answer questions.")
        .build()?;
    let slow = FnTool::with_context(
        "slow_steps",
        "Counts steps slowly, reporting each.",
        |args: Steps, ctx: ToolRunContext| async move {
            for step in 1..=args.steps {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    () = ctx.cancellation().cancelled() => {
                        mark_cancelled();
                        anyhow::bail!("cancelled at step {step}");
                    }
                }
                ctx.report_progress(
                    Some(step as f32 / args.steps as f32),
                    format!("step {step} of {}", args.steps),
                );
            }
            // The last progress notification reaches a client before the
            // result does.
            tokio::time::sleep(Duration::from_millis(100)).await;
            anyhow::Ok(format!("counted {} steps", args.steps))
        },
    )
    .map_spec(|spec| spec.read_only().timeout(Duration::from_secs(60)));
    Ok(McpServer::builder("tinyagents-test")
        .agent(assistant.as_tool("assistant", "Answers a question."))
        .tool(slow)
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = server()?;
    match std::env::args().nth(1).as_deref() {
        Some("http") => {
            let http = server.spawn_http(([127, 0, 0, 1], 0).into()).await?;
            println!("listening {}", http.url());
            // Serves until stdin closes (the test holds it open).
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
            http.shutdown().await?;
        }
        _ => server.serve_stdio().await?,
    }
    Ok(())
}
