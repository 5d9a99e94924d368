//! Recovery: a process dies in the middle of a run, and another one
//! finishes it from the effect ledger without repeating a payment.
//!
//! The example runs itself twice. The first process looks an invoice up,
//! then pays it and exits before the payment's result is recorded, as a
//! kill would. The second opens the same SQLite ledger and recovers the
//! run: the lookup answers from its settled row; the payment, in doubt, is
//! put to the tool's reconcile, which finds it in the payments file by its
//! idempotency key; the run goes on to its answer. One payment was made.
//!
//! `cargo run -p tinyagents --example recovery`; set `TINYAGENTS_MODEL` to
//! run it on a real model.

#![allow(clippy::print_stdout)] // an example prints what it shows

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

type Error = Box<dyn std::error::Error>;

/// Set in the first process: the directory of the run's files.
const FIRST_PROCESS: &str = "TINYAGENTS_RECOVERY_EXAMPLE_DIR";
const RUN: &str = "pay-inv-7";

#[json_schema]
struct Invoice {
    /// The invoice, like "inv-7".
    invoice: String,
}

fn payments(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("payments")).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

async fn agent(dir: &Path, crash: bool, script: Vec<ChatResponse>) -> Result<Agent, Error> {
    let model: Arc<dyn ChatModel> = match tinyagents::models::from_env() {
        Some(model) => model?,
        None => Arc::new(ScriptedModel::new(script)),
    };
    let lookup = FnTool::new("lookup", "Looks an invoice up.", |i: Invoice| async move {
        anyhow::Ok(format!("{}: 1250 cents, unpaid", i.invoice))
    })
    .map_spec(ToolSpec::read_only);
    let (pay_dir, check_dir) = (dir.to_path_buf(), dir.to_path_buf());
    let pay = FnTool::with_context(
        "pay",
        "Pays an invoice.",
        move |i: Invoice, ctx: ToolRunContext| {
            let dir = pay_dir.clone();
            async move {
                let key = ctx
                    .idempotency_key()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let mut paid = payments(&dir);
                paid.push(key);
                std::fs::write(dir.join("payments"), paid.join("\n"))?;
                if crash {
                    println!(
                        "first process: paid {}, now dying before the result is recorded",
                        i.invoice
                    );
                    std::process::exit(137);
                }
                anyhow::Ok(format!("paid {}", i.invoice))
            }
        },
    )
    .map_spec(|spec| spec.replay(ToolReplay::Never))
    .with_reconcile(move |ctx: ToolRunContext| {
        let dir: PathBuf = check_dir.clone();
        async move {
            let key = ctx
                .idempotency_key()
                .map(ToString::to_string)
                .unwrap_or_default();
            anyhow::Ok(if payments(&dir).contains(&key) {
                Reconciled::Done(ToolResult::text("paid (found by reconcile)"))
            } else {
                Reconciled::NotDone
            })
        }
    });
    Ok(Agent::builder("payer")
        .model(model)
        .instructions("You pay invoices: look each up, then pay it.")
        .tool(lookup)
        .tool(pay)
        .ledger(Arc::new(SqliteLedger::open(dir.join("ledger.db")).await?))
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    if let Some(dir) = std::env::var_os(FIRST_PROCESS) {
        let script = vec![
            ScriptedModel::tool_call("lookup", json!({ "invoice": "inv-7" })),
            ScriptedModel::tool_call("pay", json!({ "invoice": "inv-7" })),
        ];
        let agent = agent(Path::new(&dir), true, script).await?;
        let request = RunRequest::new("Pay invoice inv-7.").with_run_id(RunId::new(RUN));
        let run = agent.run_with(request, &EventSink::none()).await?;
        println!(
            "first process: the run ended without a crash: {}",
            run.final_text
        );
        return Ok(());
    }

    let dir = std::env::temp_dir().join(format!("tinyagents-recovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let status = std::process::Command::new(std::env::current_exe()?)
        .env(FIRST_PROCESS, &dir)
        .status()?;
    println!("first process exited: {status}");
    if !status.success() {
        let agent = agent(&dir, false, vec![ChatResponse::text("inv-7 is paid.")]).await?;
        let run = agent.recover(&RunId::new(RUN)).await?;
        println!("second process: {:?}: {}", run.status, run.final_text);
    }
    println!("payments made: {}", payments(&dir).len());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
