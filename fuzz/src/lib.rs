//! What the fuzz targets share: a small agent with a tool that needs
//! approval and a read-only one, whose model answers a first turn with
//! calls of both and every later turn with text, and a runtime to drive it.

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{core::ToolReplay, ledger::EffectLedger};

/// The run every target drives.
pub const RUN: &str = "fuzzed";

/// A current-thread runtime for one input.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds")
}

/// The agent, over `ledger` when given.
pub fn harness(ledger: Option<Arc<dyn EffectLedger>>) -> AgentHarness {
    let model = ScriptedModel::from_fn(|request| {
        let turns = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        Ok(if turns == 0 {
            ScriptedModel::tool_calls([
                ("deploy", json!({ "to": "prod" })),
                ("read", json!({ "to": "notes" })),
            ])
        } else {
            ChatResponse::text("done")
        })
    });
    let deploy = FnTool::new("deploy", "Deploys.", |args: serde_json::Value| async move {
        anyhow::Ok(format!("deployed {args}"))
    })
    .map_spec(|spec| spec.approval_required().replay(ToolReplay::Never));
    let read = FnTool::new("read", "Reads.", |args: serde_json::Value| async move {
        anyhow::Ok(format!("read {args}"))
    })
    .map_spec(ToolSpec::read_only);
    let mut builder = AgentHarness::builder(Arc::new(model))
        .tool(deploy)
        .tool(read);
    if let Some(ledger) = ledger {
        builder = builder.ledger(ledger);
    }
    builder.build().expect("the fuzz agent builds")
}

/// Writes a real ledger at `path`: rows started, completed, failed,
/// interrupted, deferred and resolved, nested ones, a checkpoint with
/// entries and a finished run.
pub async fn seed_ledger(path: &std::path::Path) {
    use tinyagents::ledger::{Found, Resolve};
    use tinyagents::{
        ToolResult, core::CallId, core::RunId, ledger::Outcome, ledger::SqliteLedger,
        ledger::StartedRow,
    };
    let ledger = SqliteLedger::open(path).await.expect("a new ledger opens");
    let run = RunId::new(RUN);
    ledger.begin_run(&run).await.expect("the run begins");
    let row = |id: &str, tool: &str, replay| {
        StartedRow::new(
            run.clone(),
            CallId::new(id),
            tool,
            format!("hash-{id}"),
            replay,
        )
    };
    let rows = [
        ("p1", "deploy", ToolReplay::Never),
        ("p1/1", "read", ToolReplay::Safe),
        ("p2", "read", ToolReplay::Safe),
        ("p3", "deploy", ToolReplay::Never),
        ("p4", "deploy", ToolReplay::Never),
        ("p5", "deploy", ToolReplay::Never),
    ];
    for (id, tool, replay) in rows {
        ledger
            .record_started(row(id, tool, replay))
            .await
            .expect("a row starts");
    }
    let settle = |id: &str| CallId::new(id);
    ledger
        .record_settled(
            &run,
            &settle("p1/1"),
            &Outcome::Completed(ToolResult::text("read it")),
        )
        .await
        .expect("settles");
    ledger
        .record_settled(&run, &settle("p2"), &Outcome::Failed("it failed".into()))
        .await
        .expect("settles");
    ledger
        .record_settled(
            &run,
            &settle("p3"),
            &Outcome::Interrupted("interrupted, outcome unknown".into()),
        )
        .await
        .expect("settles");
    ledger
        .record_settled(
            &run,
            &settle("p4"),
            &Outcome::Deferred("asks a person".into()),
        )
        .await
        .expect("settles");
    ledger
        .resolve(
            &run,
            &settle("p5"),
            &Resolve::by_person("ops", Found::NotHappened),
        )
        .await
        .expect("resolves");
    ledger
        .save_checkpoint(&run, 1, br#"{"not":"a real state"}"#.to_vec())
        .await
        .expect("a checkpoint saves");
    ledger
        .append_checkpoint(&run, 2, br#"{"entry":2}"#.to_vec())
        .await
        .expect("an entry appends");
    let other = RunId::new("finished");
    ledger.begin_run(&other).await.expect("begins");
    ledger.mark_run_finished(&other).await.expect("finishes");
    ledger.shutdown().await.expect("shuts down");
}
