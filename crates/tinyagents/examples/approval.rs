//! Approval end to end: a tool whose spec asks for a person's approval
//! suspends the run; the suspended state is stored as JSON; the process
//! "restarts" (a new agent over the same SQLite ledger and session store);
//! the state is read back, the call approved, and the run resumed. The run
//! was in a session: its conversation is stored when the resumed run
//! completes. An `ApprovalRequested` event names each waiting call.
//!
//! `cargo run -p tinyagents --example approval`; set `TINYAGENTS_MODEL` to
//! run it on a real model.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

type Error = Box<dyn std::error::Error>;

#[json_schema]
struct Deploy {
    /// The service to deploy.
    service: String,
}

/// The agent as a fresh process builds it, over the files in `dir`.
async fn agent(dir: &Path, script: Vec<ChatResponse>) -> Result<Agent, Error> {
    let model: Arc<dyn ChatModel> = match tinyagents::models::from_env() {
        Some(model) => model?,
        None => Arc::new(ScriptedModel::new(script)),
    };
    let deploy = FnTool::new("deploy", "Deploys a service.", |d: Deploy| async move {
        anyhow::Ok(format!("{} is deployed", d.service))
    })
    .map_spec(|spec| spec.approval_required().replay(ToolReplay::Never));
    Ok(Agent::builder("ops")
        .model(model)
        .instructions("You deploy services when asked.")
        .tool(deploy)
        .ledger(Arc::new(SqliteLedger::open(dir.join("ledger.db")).await?))
        .sessions(Arc::new(
            SqliteSessionStore::open(dir.join("sessions.db")).await?,
        ))
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!("tinyagents-approval-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let session = SessionScope::new("ops-channel");
    let script = vec![ScriptedModel::tool_call(
        "deploy",
        json!({ "service": "billing" }),
    )];

    let first = agent(&dir, script).await?;
    let mut handle = first.start_in_session(&session, RunRequest::new("Deploy billing, please."));
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ApprovalRequested {
            call_id,
            tool,
            reason,
            ..
        } = event
        {
            println!("{call_id} waits: {tool}: {reason}");
        }
    }
    let run = handle.wait().await?;
    drop(handle);
    println!("first process: {:?}", run.status);
    if let Some(suspended) = run.suspended {
        std::fs::write(dir.join("run.json"), serde_json::to_vec(&suspended)?)?;
        drop(first); // the process ends here

        let second = agent(&dir, vec![ChatResponse::text("billing is deployed.")]).await?;
        let stored: SuspendedRun = serde_json::from_slice(&std::fs::read(dir.join("run.json"))?)?;
        let decisions: Vec<ApprovalDecision> = stored.pending().map(PendingCall::approve).collect();
        let run = second.resume(stored, &decisions).await?;
        println!("second process: {:?}: {}", run.status, run.final_text);
        for turn in second.transcript(&session).await? {
            println!("  {:?}: {}", turn.role, turn.text);
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
