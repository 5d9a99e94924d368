//! The billing team: a coordinator with three typed tools (one nests a call,
//! one needs approval), a disputes specialist as a tool, a durable SQLite
//! ledger. The run suspends for the refund, is stored as JSON, the process
//! "restarts" and the run resumes. Offline on scripts, or on a real model
//! with `TINYAGENTS_MODEL`: `cargo run -p tinyagents --example team`.
#![allow(clippy::print_stdout)] // an example prints what it shows
use std::{path::Path, sync::Arc};

use serde_json::json;
use tinyagents::prelude::*;

type Error = Box<dyn std::error::Error>;

#[json_schema]
struct Customer {
    /// The customer's id, like "c-42".
    customer: String,
}

#[json_schema]
struct Refund {
    /// The invoice to refund, like "inv-7".
    invoice: String,
    /// How much, in cents.
    cents: u64,
}

/// The real model when `TINYAGENTS_MODEL` names one, else the script.
fn model(script: Vec<ChatResponse>) -> Result<Arc<dyn ChatModel>, Error> {
    match tinyagents::models::from_env() {
        Some(model) => Ok(model?),
        None => Ok(Arc::new(ScriptedModel::new(script))),
    }
}

/// The team, as a fresh process builds it (the ledger is on disk).
async fn team(dir: &Path, script: Vec<ChatResponse>) -> Result<Agent, Error> {
    let balance = FnTool::new("balance", "A balance in cents.", |c: Customer| async move {
        anyhow::Ok(json!({ "customer": c.customer, "cents": 1250 }))
    });
    let statement = FnTool::with_context(
        "statement",
        "A customer's statement.",
        |c: Customer, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let args = json!({ "customer": c.customer });
            let balance = exec.call_tool("balance", args).await?.content;
            anyhow::Ok(format!("Invoice inv-7; balance {balance}"))
        },
    );
    let refund = FnTool::new("refund", "Refunds an invoice.", |r: Refund| async move {
        anyhow::Ok(format!("refunded {} cents on {}", r.cents, r.invoice))
    })
    .map_spec(|spec| spec.approval_required().replay(ToolReplay::Never));
    let disputes = Agent::builder("disputes")
        .model(model(vec![ChatResponse::text(
            "Refund a duplicate charge.",
        )])?)
        .instructions("You decide billing disputes, in one sentence.")
        .build()?;
    Ok(Agent::builder("billing")
        .model(model(script)?)
        .instructions("You are the billing coordinator. Ask disputes about disputes.")
        .tool(balance.map_spec(ToolSpec::read_only))
        .tool(statement)
        .tool(refund)
        .tool(disputes.as_tool("disputes", "Decides disputed charges."))
        .max_nested_depth(1)
        .ledger(Arc::new(SqliteLedger::open(dir.join("ledger.db")).await?))
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!("tinyagents-team-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let script = vec![
        ScriptedModel::tool_call("statement", json!({ "customer": "c-42" })),
        ScriptedModel::tool_call("disputes", json!({ "query": "inv-7 charged twice?" })),
        ScriptedModel::tool_call("refund", json!({ "invoice": "inv-7", "cents": 1250 })),
    ];
    let agent = team(&dir, script).await?;
    let mut run = agent.run("c-42 says inv-7 was charged twice.").await?;
    while let Some(suspended) = run.suspended.take() {
        for pending in suspended.pending() {
            println!(
                "approval needed: {} ({})",
                pending.call.name, pending.reason
            );
        }
        std::fs::write(dir.join("run.json"), serde_json::to_vec(&suspended)?)?;
        // A restart: a new team over the same ledger, the state read back.
        let agent = team(&dir, vec![ChatResponse::text("Refunded inv-7.")]).await?;
        let stored: SuspendedRun = serde_json::from_slice(&std::fs::read(dir.join("run.json"))?)?;
        let decisions: Vec<_> = stored.pending().map(PendingCall::approve).collect();
        run = agent.resume(stored, &decisions).await?;
    }
    println!("{:?}: {}", run.status, run.final_text);
    Ok(std::fs::remove_dir_all(&dir)?)
}
