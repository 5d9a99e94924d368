//! A session run whose process died goes on in its session once
//! recovered from the ledger.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::core::RunId;
use tinyagents::orchestrator::{InMemorySessionStore, SessionStore};
use tinyagents::prelude::*;

#[json_schema]
struct Empty {}

fn agent(
    ledger: &Arc<MemoryLedger>,
    store: &Arc<InMemorySessionStore>,
    hangs: bool,
    script: Vec<ChatResponse>,
) -> Agent {
    let slow = FnTool::new("slow", "Slow.", move |_: Empty| async move {
        if hangs {
            std::future::pending::<()>().await;
        }
        anyhow::Ok("finally")
    })
    .map_spec(|s| s.replay(ToolReplay::Safe));
    let store: Arc<dyn SessionStore> = store.clone();
    Agent::builder("worker")
        .model(ScriptedModel::new(script))
        .tool(slow)
        .ledger(ledger.clone())
        .sessions(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_recovered_session_run_stores_its_conversation() {
    let ledger = Arc::new(MemoryLedger::new());
    let store = Arc::new(InMemorySessionStore::new());
    let scope = SessionScope::new("chan");
    let run_id = RunId::new("dies");

    let first = agent(
        &ledger,
        &store,
        true,
        vec![ScriptedModel::tool_call("slow", json!({}))],
    );
    let request = RunRequest::new("do the slow thing").with_run_id(run_id.clone());
    let died = tokio::time::timeout(
        Duration::from_millis(200),
        first
            .active()
            .run_in_session(&scope, request, &EventSink::none()),
    )
    .await;
    assert!(
        died.is_err(),
        "the run was still in its tool when the process died"
    );
    drop(first);
    assert!(ledger.unfinished_runs().await.unwrap().contains(&run_id));

    let second = agent(
        &ledger,
        &store,
        false,
        vec![ChatResponse::text("done at last")],
    );
    let run = second.recover(&run_id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let kept = crate::texts(second.transcript(&scope).await.unwrap());
    assert_eq!(kept, ["do the slow thing", "done at last"]);
}
