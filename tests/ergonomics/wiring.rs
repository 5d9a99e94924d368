//! Wiring is checked: what a build names must exist (friction 2).

use std::sync::Arc;

use serde_json::json;
use tinyagents::orchestrator::{
    AgentBuildRequest, AgentDefinition, AgentOrchestrator, BuildError, HostTools,
    InMemorySessionStore, ModelRegistry,
};
use tinyagents::prelude::*;

#[json_schema]
struct Empty {}

fn leaf() -> impl Tool {
    FnTool::new("leaf", "A leaf.", |_: Empty| async { anyhow::Ok("leaf") })
}

fn orchestrator() -> AgentOrchestrator {
    AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
}

fn models(script: Vec<ChatResponse>) -> Arc<ModelRegistry> {
    Arc::new(ModelRegistry::new(Arc::new(ScriptedModel::new(script))))
}

#[tokio::test]
async fn a_misspelt_tool_in_a_definition_is_a_build_error_listing_what_exists() {
    let definition = AgentDefinition::new("main", "Main").tools(["leef"]);
    let request = AgentBuildRequest::new("main", [Arc::new(definition)], models(vec![]))
        .tools(HostTools::new().with(leaf()));
    let error = orchestrator()
        .get_or_create_agent(request)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::UnknownTool {
            agent: "main".into(),
            tool: "leef".into(),
            available: vec!["leaf".into()],
        }
    );
    assert_eq!(
        error.to_string(),
        "agent 'main' names tool 'leef', which the host does not have (available: leaf)"
    );
}

#[tokio::test]
async fn allowing_missing_tools_builds_and_every_run_reports_each_by_a_warning() {
    let definition = AgentDefinition::new("main", "Main").tools(["leaf", "leef"]);
    let request = AgentBuildRequest::new(
        "main",
        [Arc::new(definition)],
        models(vec![ChatResponse::text("hi")]),
    )
    .tools(HostTools::new().with(leaf()))
    .allow_missing_tools();
    let agent = orchestrator().get_or_create_agent(request).await.unwrap();
    assert_eq!(agent.agent().tools(false), ["leaf"]);
    let (sink, mut receiver) = event_channel(64);
    let run = agent.run(RunRequest::new("q"), &sink).await.unwrap();
    drop(sink);
    assert_eq!(run.final_text, "hi");
    let mut events = Vec::new();
    while let Some(event) = receiver.recv().await {
        events.push(event);
    }
    assert!(matches!(events[0], AgentEvent::RunStarted { .. }));
    assert!(
        matches!(&events[1], AgentEvent::Warning { message }
        if message.contains("'leef'") && message.contains("available: leaf") && message.contains("omitted")),
        "{events:?}"
    );
}

/// rule AT-03: a missing or no-longer-exposed target is omitted (and, beyond the rule,
/// reported).
#[tokio::test]
async fn an_agent_tool_id_that_is_missing_or_not_exposed_is_omitted_and_reported() {
    let main = AgentDefinition::new("main", "Main").agent_tools(["helper", "typo", "hidden"]);
    let helper = AgentDefinition::new("helper", "Helper")
        .description("Helps.")
        .exposed();
    // Defined, but not exposed as a tool (the forgotten `.exposed()`).
    let hidden = AgentDefinition::new("hidden", "Hidden");
    let request = AgentBuildRequest::new(
        "main",
        [Arc::new(main), Arc::new(helper), Arc::new(hidden)],
        models(vec![ChatResponse::text("hi")]),
    );
    let agent = orchestrator().get_or_create_agent(request).await.unwrap();
    let offered: Vec<_> = agent
        .harness()
        .tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert_eq!(offered, ["Helper"]);
    let (sink, mut receiver) = event_channel(64);
    agent.run(RunRequest::new("q"), &sink).await.unwrap();
    drop(sink);
    let mut warnings = Vec::new();
    while let Some(event) = receiver.recv().await {
        if let AgentEvent::Warning { message } = event {
            warnings.push(message);
        }
    }
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("'typo'") && warnings[0].contains("exposed agents: helper"));
    assert!(warnings[1].contains("'hidden'"));
}

#[test]
fn a_code_agent_reports_every_wiring_problem_at_build() {
    let other = Agent::builder("other")
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let error = Agent::builder("main")
        .tool(leaf())
        .tool(leaf())
        .tool(other.as_tool("leaf", "Clashes with the tool."))
        .tool(other.as_tool("two words", "Not a function name."))
        .require_approval("leef")
        .build()
        .unwrap_err();
    let BuildError::Invalid { agent, problems } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(agent.as_str(), "main");
    assert_eq!(
        problems,
        &[
            "two tools are named 'leaf'".to_owned(),
            "two tools are named 'leaf'".to_owned(),
            "agent tool name 'two words' is not a function name (letters, digits and '_', at most 64): try 'two_words'".to_owned(),
            "it has no model: set one with .model(...)".to_owned(),
            "a policy names tool 'leef', which it does not have (tools: leaf)".to_owned(),
        ]
    );
    assert!(
        error
            .to_string()
            .starts_with("agent 'main' could not be built: two tools are named 'leaf'; ")
    );
}

#[tokio::test]
async fn a_tool_that_does_not_register_is_reported_by_build() {
    // A schema that does not compile fails the build, naming the tool.
    let bad = FnTool::new("bad", "Bad.", |_: Empty| async { anyhow::Ok("x") }).map_spec(|mut s| {
        s.parameters = json!({"type": 12});
        s
    });
    let error = Agent::builder("main")
        .model(ScriptedModel::new([]))
        .tool(bad)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("'bad'"), "{error}");
}
