//! MCP both ways, offline. This program is its own MCP server: started with
//! `serve`, it serves a billing agent and a ledger lookup over stdio. Without
//! an argument it starts itself as that server, connects to it as a client,
//! and a coordinator agent calls the served agent and tool through its own
//! enforced path; its policy refuses the served tool that moves money (the
//! server's annotations say it is destructive; were it called, the server
//! would refuse it too: it needs approval, which cannot be given across
//! MCP). The same server is then reached over Streamable HTTP on a loopback
//! port.
//! `cargo run -p tinyagents --features mcp --example mcp`
#![allow(clippy::print_stdout)] // an example prints what it shows
use std::sync::Arc;

use serde_json::json;
use tinyagents::middleware::ToolPolicyMiddleware;
use tinyagents::prelude::*;

type Error = Box<dyn std::error::Error>;

#[json_schema]
struct Invoice {
    /// The invoice, like "inv-7".
    invoice: String,
}

/// The served side: an agent, a read-only lookup, a payment tool.
fn server() -> Result<McpServer, Error> {
    let billing = Agent::builder("billing")
        .model(ScriptedModel::new(vec![ChatResponse::text(
            "inv-7 was charged twice.",
        )]))
        .instructions("You explain invoices in one sentence.")
        .build()?;
    let lookup = FnTool::new("lookup", "An invoice's amount.", |i: Invoice| async move {
        anyhow::Ok(json!({ "invoice": i.invoice, "cents": 1250 }))
    });
    let refund = FnTool::new("refund", "Refunds an invoice.", |i: Invoice| async move {
        anyhow::Ok(format!("refunded {}", i.invoice))
    });
    Ok(McpServer::builder("billing-desk")
        .agent(billing.as_tool("billing", "Explains invoices."))
        .tool(lookup.map_spec(ToolSpec::read_only))
        .tool(refund.map_spec(|s| s.side_effects(SideEffects::PAYMENT).approval_required()))
        .build()?)
}

/// The client side: a coordinator whose model calls the served tools.
async fn coordinate(desk: &McpClient) -> Result<AgentRun, Error> {
    let model = ScriptedModel::new(vec![
        ScriptedModel::tool_call("desk_billing", json!({ "query": "Why is inv-7 disputed?" })),
        ScriptedModel::tool_call("desk_lookup", json!({ "invoice": "inv-7" })),
        ScriptedModel::tool_call("desk_refund", json!({ "invoice": "inv-7" })),
        ChatResponse::text("inv-7 (1250 cents) was charged twice; a person must refund it."),
    ]);
    let harness = AgentHarness::builder(model)
        .tools(desk.tools())
        // The server's hints say the refund moves money; refuse it here too.
        .middleware(Arc::new(
            ToolPolicyMiddleware::new().deny_side_effects(SideEffects::DESTRUCTIVE),
        ))
        .build()?;
    Ok(harness.run("Look into inv-7.").await?)
}

fn show(run: &AgentRun) {
    for message in &run.messages {
        if let Message::Tool {
            name,
            content,
            is_error,
            ..
        } = message
        {
            println!(
                "  {name}{}: {content}",
                if *is_error { " (error)" } else { "" }
            );
        }
    }
    println!("  {:?}: {}", run.status, run.final_text);
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    if std::env::args().nth(1).as_deref() == Some("serve") {
        return Ok(server()?.serve_stdio().await?);
    }
    // Over stdio: this program, started again as the server. Its own
    // server, so its annotations are facts (another's are claims that
    // loosen nothing: every tool would count as destructive).
    let desk = McpClient::connect(
        RemoteServer::stdio("desk", std::env::current_exe()?)
            .arg("serve")
            .trust(Trust::Trusted),
    )
    .await?;
    println!("over stdio, tools: {:?}", desk.tool_names());
    show(&coordinate(&desk).await?);
    desk.close().await;

    // Over Streamable HTTP: the same server in this process.
    let http = server()?.spawn_http(([127, 0, 0, 1], 0).into()).await?;
    let desk =
        McpClient::connect(RemoteServer::http("desk", http.url()).trust(Trust::Trusted)).await?;
    println!("over {}:", http.url());
    show(&coordinate(&desk).await?);
    desk.close().await;
    Ok(http.shutdown().await?)
}
