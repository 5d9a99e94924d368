//! Defaults agree (friction 7): detailed tool errors are off everywhere,
//! and turning nesting on changes no other limit.

use std::sync::Arc;

use serde_json::json;
use tinyagents::orchestrator::{
    AgentBuildRequest, AgentDefinition, AgentOrchestrator, InMemorySessionStore,
    MAX_ITERATIONS_PER_REQUEST, ModelRegistry,
};
use tinyagents::prelude::*;

#[json_schema]
struct Empty {}

fn failing() -> impl Tool {
    FnTool::new("fail", "Fails.", |_: Empty| async {
        Err::<String, _>(anyhow::anyhow!("db password is hunter2"))
    })
}

fn script() -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_call("fail", json!({})),
        ChatResponse::text("sorry"),
    ]
}

/// What the model read as the failed call's result.
fn read(run: &AgentRun) -> String {
    run.messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap()
}

/// rule AT-27, everywhere: detailed error text stays out of what the model reads.
#[tokio::test]
async fn a_raised_error_reaches_no_model_by_default_on_any_kind_of_agent() {
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new(script())))
        .tool(failing())
        .build()
        .unwrap();
    let plain = read(&harness.run("go").await.unwrap());

    let agent = Agent::builder("a")
        .model(ScriptedModel::new(script()))
        .tool(failing())
        .build()
        .unwrap();
    let coded = read(&agent.run("go").await.unwrap());

    for text in [&plain, &coded] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("'fail'"), "{text}");
    }
    assert_eq!(plain, coded);

    // Opted in, the model reads it.
    let detailed = AgentHarness::builder(Arc::new(ScriptedModel::new(script())))
        .tool(failing())
        .include_detailed_errors(true)
        .build()
        .unwrap();
    assert!(read(&detailed.run("go").await.unwrap()).contains("hunter2"));
}

/// rule AT-26: the 40-iteration cap holds when nesting is turned on.
#[tokio::test]
async fn enabling_nested_calls_keeps_the_forty_model_call_cap() {
    let build = |orchestrator: AgentOrchestrator| async move {
        let request = AgentBuildRequest::new(
            "a",
            [Arc::new(AgentDefinition::new("a", "A"))],
            Arc::new(ModelRegistry::new(Arc::new(ScriptedModel::new([])))),
        );
        let agent = orchestrator.get_or_create_agent(request).await.unwrap();
        agent.harness().limits().clone()
    };
    let store = || Arc::new(InMemorySessionStore::new());
    let before = build(AgentOrchestrator::new(store())).await;
    let after = build(AgentOrchestrator::new(store()).max_nested_depth(2)).await;
    assert_eq!(before.max_model_calls, MAX_ITERATIONS_PER_REQUEST);
    assert_eq!(after.max_model_calls, MAX_ITERATIONS_PER_REQUEST);
    assert_eq!(after.max_nested_depth(), 2);
    assert_eq!(after, before.clone().with_max_nested_depth(2));

    let agent = Agent::builder("b")
        .model(ScriptedModel::new([]))
        .max_nested_depth(3)
        .build()
        .unwrap();
    let limits = agent.harness().limits();
    assert_eq!(
        (limits.max_model_calls, limits.max_nested_depth()),
        (MAX_ITERATIONS_PER_REQUEST, 3)
    );
}

/// Withheld from the model is not withheld from the host: with detailed
/// errors off, the host's `ToolFailed` event and the ledger's settled row
/// keep the tool's own text (scrubbed by redaction like every payload), on
/// a model-issued and a nested call alike.
#[tokio::test]
async fn the_host_reads_what_the_model_may_not_in_its_events_and_ledger() {
    use tinyagents::core::RunId;
    use tinyagents::ledger::{CallStatus, EffectLedger};
    let nests = FnTool::with_context(
        "nests",
        "Nests.",
        |_: Empty, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let inner = exec.call_tool("fail", json!({})).await;
            anyhow::Ok(format!("inner failed: {}", inner.is_err()))
        },
    );
    let ledger = Arc::new(MemoryLedger::new());
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new([
        ScriptedModel::tool_calls([("fail", json!({})), ("nests", json!({}))]),
        ChatResponse::text("sorry"),
    ])))
    .tool(failing())
    .tool(nests)
    .limits(RunLimits::default().with_max_nested_depth(1))
    .ledger(ledger.clone())
    .build()
    .unwrap();
    let mut handle = harness.start(RunRequest::new("go").with_run_id(RunId::new("r")));
    let mut events = Vec::new();
    while let Some(event) = handle.next_event().await {
        events.push(event);
    }
    let run = handle.wait().await.unwrap();
    assert!(!read(&run).contains("hunter2"), "the model never reads it");
    let failed: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFailed { call_id, error, .. } => {
                Some((call_id.to_string(), error.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(
        failed
            .iter()
            .all(|(_, error)| error == "db password is hunter2"),
        "{failed:?}"
    );
    let rows = ledger.rows(&RunId::new("r")).await.unwrap();
    let failed_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.status == CallStatus::Failed)
        .collect();
    assert_eq!(failed_rows.len(), 2, "{rows:?}");
    for row in failed_rows {
        let stored = row.result.as_ref().unwrap();
        assert_eq!(stored.content, "db password is hunter2", "{}", row.call_id);
    }
}
