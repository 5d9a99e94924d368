//! `ToolSpec::durable_settle`: the settled row of such a tool's call is made
//! durable (the ledger flushed) before its result is folded and the model
//! is asked again; other tools' rows ride on the next commit. Issue 18,
//! "Durable settle where it matters". The SIGKILL side is in `tests/crash.rs`.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents_tests::{HookedLedger, LedgerWrite, Verdict};

/// A memory ledger that logs the writes it is asked for.
fn logged() -> (HookedLedger, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let entries = Arc::clone(&log);
    let ledger = HookedLedger::new(move |write| {
        let what = match write {
            LedgerWrite::Started(row) => format!("started {}", row.call_id),
            LedgerWrite::Settled(call) => format!("settled {call}"),
            LedgerWrite::Resolve(call) => format!("resolve {call}"),
            LedgerWrite::Base(_) | LedgerWrite::Entry(_) => "checkpoint".to_owned(),
            LedgerWrite::Finished => "finished".to_owned(),
            LedgerWrite::Flush => "flush".to_owned(),
        };
        entries.lock().unwrap().push(what);
        Verdict::Pass
    });
    (ledger, log)
}

fn tool(name: &'static str, durable: bool) -> Arc<dyn Tool> {
    let tool = FnTool::new(
        name,
        "Pays.",
        |_: serde_json::Map<String, serde_json::Value>| async { anyhow::Ok("paid") },
    )
    .map_spec(|spec| if durable { spec.durable_settle() } else { spec });
    Arc::new(tool)
}

async fn writes(durable: bool) -> Vec<String> {
    let (ledger, log) = logged();
    let ledger = Arc::new(ledger);
    let model = vec![
        ScriptedModel::tool_calls([("pay", json!({}))]),
        ChatResponse::text("done"),
    ];
    let mut builder =
        AgentHarness::builder(Arc::new(ScriptedModel::new(model))).ledger(ledger.clone());
    builder.register(tool("pay", durable)).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    log.lock().unwrap().clone()
}

#[tokio::test]
async fn i18_3_a_durable_settle_flushes_the_row_before_the_model_is_asked_again() {
    let durable = writes(true).await;
    let at = durable.iter().position(|w| w == "settled p1").unwrap();
    assert_eq!(
        durable[at + 1],
        "flush",
        "flushed right after its settled row: {durable:?}"
    );
    let plain = writes(false).await;
    let at = plain.iter().position(|w| w == "settled p1").unwrap();
    assert_ne!(
        plain[at + 1],
        "flush",
        "a plain settle rides on the next commit: {plain:?}"
    );
    // The only flush of a plain run is the finished run's.
    assert_eq!(
        plain.iter().filter(|w| *w == "flush").count(),
        1,
        "{plain:?}"
    );
    assert_eq!(
        durable.iter().filter(|w| *w == "flush").count(),
        2,
        "{durable:?}"
    );
}
