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
