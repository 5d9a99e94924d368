//! Scenario: coordinator → researcher → summarizer, sessions in SQLite,
//! continued after a restart.

use super::*;

fn scenario_defs() -> Vec<AgentDefinition> {
    vec![
        AgentDefinition::new("coordinator", "Coordinator")
            .instruction("You coordinate.")
            .agent_tools(["researcher"]),
        exposed("researcher", "Researcher")
            .instruction("You research {{field}}.")
            .variable("field", "oceanography")
            .agent_tools(["summarizer"]),
        exposed("summarizer", "Summarizer").instruction("You summarise."),
    ]
}

struct ScenarioModels {
    coordinator: Arc<TestModel>,
    researcher: Arc<TestModel>,
    summarizer: Arc<TestModel>,
}

fn scenario_models() -> ScenarioModels {
    ScenarioModels {
        coordinator: TestModel::new(|seen| match seen.last_tool() {
            Some(result) => text(format!("Coordinator: {result}")),
            None => call(
                "Researcher",
                json!({"query": seen.last_user(), "conversation": "Tides"}),
            ),
        }),
        researcher: TestModel::new(|seen| match seen.last_tool() {
            Some(result) => text(format!("notes after {} questions ({result})", seen.users())),
            None => call(
                "Summarizer",
                json!({"query": format!("summarise {}", seen.last_user())}),
            ),
        }),
        summarizer: counting("summary"),
    }
}

/// rules AT-11, AT-13, AT-18, AT-20: a coordinator delegates to a researcher that delegates to a summarizer; sessions live in SQLite and continue after a restart.
#[tokio::test]
async fn scenario_coordinator_researcher_summarizer_continue_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let defs = scenario_defs();
    let scope = SessionScope::new("chat-1");

    // First process.
    {
        let store = SqliteSessionStore::open(&path).await.unwrap();
        let orchestrator = AgentOrchestrator::new(Arc::new(store));
        let models = scenario_models();
        let factory = by_agent(&[
            ("coordinator", Arc::clone(&models.coordinator)),
            ("researcher", Arc::clone(&models.researcher)),
            ("summarizer", Arc::clone(&models.summarizer)),
        ]);
        let coordinator = build(&orchestrator, "coordinator", &defs, &factory).await;
        let (run, events) = run_collecting(
            &coordinator,
            Some(&scope),
            RunRequest::new("How do tides work?"),
        )
        .await;
        assert_eq!(
            run.unwrap().final_text,
            "Coordinator: notes after 1 questions (summary #1: summarise How do tides work?)"
        );
        assert!(
            delegated(&events)
                .iter()
                .any(|(a, d, _, _)| a == "summarizer" && *d == 2)
        );
        assert_eq!(
            models.researcher.seen()[0].system(),
            "You research oceanography."
        );
    }

    // A restart: reopen the file, rebuild everything, continue.
    let store = Arc::new(SqliteSessionStore::open(&path).await.unwrap());
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>);
    let models = scenario_models();
    let factory = by_agent(&[
        ("coordinator", Arc::clone(&models.coordinator)),
        ("researcher", Arc::clone(&models.researcher)),
        ("summarizer", Arc::clone(&models.summarizer)),
    ]);
    let coordinator = build(&orchestrator, "coordinator", &defs, &factory).await;
    let run = coordinator
        .run_in_session(&scope, RunRequest::new("And the moon?"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.final_text,
        "Coordinator: notes after 2 questions (summary #2: summarise And the moon?)"
    );
    // Each agent saw its own earlier conversation.
    assert_eq!(models.coordinator.seen()[0].users(), 2);
    assert_eq!(models.researcher.seen()[0].users(), 2);
    assert_eq!(models.summarizer.seen()[0].users(), 2);

    // The host reads the stored conversations as text.
    let researcher = coordinator
        .child_transcript(&scope, &"researcher".into(), Some("tides"))
        .await
        .unwrap();
    let texts: Vec<&str> = researcher.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "How do tides work?",
            "notes after 1 questions (summary #1: summarise How do tides work?)",
            "And the moon?",
            "notes after 2 questions (summary #2: summarise And the moon?)",
        ]
    );
    let researcher_session = child_session_id(&"chat-1".into(), &"researcher".into(), "tides");
    let summarizer = store.children(&researcher_session).await.unwrap();
    assert_eq!(summarizer.len(), 1);
    assert_eq!(summarizer[0].agent_id, Some(AgentId::from("summarizer")));
    assert_eq!(summarizer[0].revision, 2);
    let coordinator_session = store.load(&"chat-1".into()).await.unwrap().unwrap();
    assert_eq!(coordinator_session.revision, 2);
    assert_eq!(
        coordinator.transcript(&scope).await.unwrap().len(),
        4,
        "two questions, two answers"
    );
}
