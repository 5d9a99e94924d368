//! Conversations (AT-11, AT-13..AT-19).

use super::*;

fn session_defs() -> [AgentDefinition; 3] {
    [
        AgentDefinition::new("root", "Root").agent_tools(["helper", "other"]),
        exposed("helper", "Helper"),
        exposed("other", "Other"),
    ]
}

/// rule AT-11: a repeated conversation name resumes that child conversation; a missing or blank name uses the default one.
#[tokio::test]
async fn at_11_repeated_conversation_resumes_and_blank_uses_the_default() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", counting("other")),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    let mut answers = Vec::new();
    for request in [
        ask("Helper", Some("Research"), "one"),
        ask("Helper", Some("Research"), "two"),
        ask("Helper", None, "three"),
        ask("Helper", Some("   "), "four"),
        ask("Helper", Some("Research"), "five"),
    ] {
        let run = root
            .run_in_session(&scope, request, &EventSink::none())
            .await
            .unwrap();
        answers.push(run.final_text);
    }
    assert_eq!(
        answers,
        [
            "helper #1: one",
            "helper #2: two",
            "helper #1: three",
            "helper #2: four",
            "helper #3: five"
        ]
    );
}

/// rule AT-13: one child session per called agent and conversation name; names trimmed and caseless.
#[tokio::test]
async fn at_13_one_child_session_per_agent_and_conversation_name() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", counting("other")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    for request in [
        ask("Helper", Some("Research"), "a"),
        ask("Helper", Some(" RESEARCH "), "b"),
        ask("Helper", Some("notes"), "c"),
        ask("Other", Some("Research"), "d"),
    ] {
        root.run_in_session(&scope, request, &EventSink::none())
            .await
            .unwrap();
    }
    let children = store.children(&"s".into()).await.unwrap();
    let keys: Vec<(String, String, usize)> = children
        .iter()
        .map(|r| {
            (
                r.agent_id.as_ref().unwrap().to_string(),
                r.conversation.clone(),
                r.messages.len(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("helper".into(), "notes".into(), 2),
            ("helper".into(), "research".into(), 4),
            ("other".into(), "research".into(), 2),
        ]
    );
    assert_eq!(
        children[1].id,
        child_session_id(&"s".into(), &"helper".into(), "research")
    );
    assert_eq!(children[1].parent, Some(SessionId::from("s")));
}

/// rule AT-14: the child session is saved only after a successful call; a failed or cancelled call leaves the last snapshot.
#[tokio::test]
async fn at_14_child_session_saved_only_after_success() {
    let started = Arc::new(Notify::new());
    let helper = {
        let started = Arc::clone(&started);
        TestModel::new(move |seen| match seen.last_user().as_str() {
            "fail" => Step::Fail(ModelError::Transport {
                message: "down".into(),
            }),
            "block" => Step::Block(Arc::clone(&started)),
            other => text(format!("ok {other}")),
        })
    };
    let models = by_agent(&[("root", router()), ("helper", helper), ("other", echo("o"))]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    let child = child_session_id(&"s".into(), &"helper".into(), "");
    root.run_in_session(&scope, ask("Helper", None, "first"), &EventSink::none())
        .await
        .unwrap();
    let snapshot = store.load(&child).await.unwrap().unwrap();
    assert_eq!(snapshot.revision, 1);
    assert_eq!(snapshot.messages.len(), 2);

    let failed = root
        .run_in_session(&scope, ask("Helper", None, "fail"), &EventSink::none())
        .await
        .unwrap();
    assert!(
        tinyagents_tests::tool_results(&failed.messages)
            .last()
            .unwrap()
            .2
    );
    assert_eq!(store.load(&child).await.unwrap().unwrap(), snapshot);

    let token = CancellationToken::new();
    let quiet = EventSink::none();
    let (cancelled, ()) = tokio::join!(
        root.run_in_session(
            &scope,
            ask("Helper", None, "block").with_cancellation(token.clone()),
            &quiet
        ),
        async {
            started.notified().await;
            token.cancel();
        }
    );
    assert_eq!(cancelled.unwrap().status, RunStatus::Cancelled);
    assert_eq!(store.load(&child).await.unwrap().unwrap(), snapshot);
}

/// rule AT-15: without a parent session every delegated call is stateless.
#[tokio::test]
async fn at_15_without_a_parent_session_calls_are_stateless() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", echo("o")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    for query in ["one", "two"] {
        let run = root
            .run(ask("Helper", Some("same"), query), &EventSink::none())
            .await
            .unwrap();
        assert_eq!(run.final_text, format!("helper #1: {query}"));
    }
    assert!(store.is_empty());
}

/// rule AT-16: the child's compaction applies; the reduced history is what remains.
#[tokio::test]
async fn at_16_child_compaction_applies_and_the_reduced_history_is_stored() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper", "other"]),
        exposed("helper", "Helper").compaction(Compaction::KeepLastMessages { count: 2 }),
        exposed("other", "Other"),
    ];
    let helper = counting("helper");
    let models = by_agent(&[
        ("root", router()),
        ("helper", Arc::clone(&helper)),
        ("other", echo("o")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let scope = SessionScope::new("s");
    for query in ["one", "two", "three"] {
        root.run_in_session(&scope, ask("Helper", None, query), &EventSink::none())
            .await
            .unwrap();
    }
    let stored = store
        .load(&child_session_id(&"s".into(), &"helper".into(), ""))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.messages,
        [
            Message::user("three"),
            Message::assistant("helper #2: three")
        ]
    );
    // The third call saw only the reduced history before its query.
    assert_eq!(
        helper.seen()[2].conversation(),
        [
            Message::user("two"),
            Message::assistant("helper #2: two"),
            Message::user("three")
        ]
    );
}

/// rule AT-17: the provider's functions run one at a time.
#[tokio::test]
async fn at_17_agent_tools_run_serially_by_default() {
    let probe = ProbeTool::new("probe", true, Behaviour::Yield(20));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let root_model = TestModel::new(|seen| match seen.last_tool() {
        Some(_) => text("done"),
        None => Step::Reply(ScriptedModel::tool_calls([
            ("Helper", json!({"query": "a", "conversation": "one"})),
            ("Helper", json!({"query": "b", "conversation": "two"})),
        ])),
    });
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("probe", json!({"tag": seen.last_user()})),
    });
    let models = by_agent(&[("root", root_model), ("helper", helper)]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(Arc::clone(&probe) as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let spec = root.harness().tools().get("Helper").unwrap().spec().clone();
    assert!(!spec.concurrency_safe);
    assert_eq!(spec.replay, ToolReplay::Never);
    let run = root
        .run_in_session(
            &SessionScope::new("s"),
            RunRequest::new("go"),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.final_text, "done");
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        probe.max_active.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// rule AT-17 (beyond the spec): parallel delegation is opt-in, and calls on one child session still wait for each other.
#[tokio::test]
async fn at_17_parallel_delegation_is_opt_in_and_serialises_one_session() {
    let barrier = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(2))),
    );
    let probe = ProbeTool::new("probe", true, Behaviour::Yield(20));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["meet", "probe"]),
    ];
    let root_model = TestModel::new(|seen| match seen.last_tool() {
        Some(_) => text("done"),
        None => {
            let (tool, first, second) = match seen.last_user().as_str() {
                "different" => ("meet", "one", "two"),
                _ => ("probe", "same", " SAME"),
            };
            Step::Reply(ScriptedModel::tool_calls([
                ("Helper", json!({"query": tool, "conversation": first})),
                ("Helper", json!({"query": tool, "conversation": second})),
            ]))
        }
    });
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call(&seen.last_user(), json!({"tag": "x"})),
    });
    let models = by_agent(&[("root", root_model), ("helper", helper)]);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(store).parallel_delegation(true);
    let tools = HostTools::new()
        .with_shared(Arc::clone(&barrier) as Arc<dyn Tool>)
        .with_shared(Arc::clone(&probe) as Arc<dyn Tool>);
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).tools(tools))
        .await
        .unwrap();
    assert!(
        root.harness()
            .tools()
            .get("Helper")
            .unwrap()
            .spec()
            .concurrency_safe
    );
    let scope = SessionScope::new("s");
    // Two sessions: the calls overlap (the barrier only opens for two).
    let run = tokio::time::timeout(
        Duration::from_secs(10),
        root.run_in_session(&scope, RunRequest::new("different"), &EventSink::none()),
    )
    .await
    .expect("both child runs were in flight together")
    .unwrap();
    assert_eq!(run.final_text, "done");
    assert_eq!(
        barrier.max_active.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    // One session: they wait for each other.
    root.run_in_session(&scope, RunRequest::new("same"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        probe.max_active.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// rule AT-18: the host reads a child's stored messages as user and assistant text only.
#[tokio::test]
async fn at_18_host_reads_child_messages_as_user_and_assistant_text_only() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => Step::Reply(ChatResponse {
            content: format!("found {result}"),
            reasoning: Some("private chain of thought".into()),
            ..ChatResponse::default()
        }),
        None => Step::Reply(ChatResponse {
            reasoning: Some("thinking about tools".into()),
            ..ScriptedModel::tool_call("probe", json!({"tag": "t"}))
        }),
    });
    let models = by_agent(&[
        ("root", delegating("Helper", Some("Work"))),
        ("helper", helper),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let scope = SessionScope::new("s");
    root.run_in_session(&scope, RunRequest::new("look"), &EventSink::none())
        .await
        .unwrap();
    let raw = store
        .load(&child_session_id(&"s".into(), &"helper".into(), "work"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        raw.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. }))
    );
    let turns = root
        .child_transcript(&scope, &"helper".into(), Some("work"))
        .await
        .unwrap();
    let turns: Vec<(ChatRole, String)> = turns.into_iter().map(|t| (t.role, t.text)).collect();
    assert_eq!(
        turns,
        [
            (ChatRole::User, "look".to_owned()),
            (ChatRole::Assistant, "found probe ok".to_owned())
        ]
    );
}

/// rule AT-19: an incognito parent keeps continuity in memory and writes neither parent nor child session.
#[tokio::test]
async fn at_19_incognito_parent_keeps_continuity_in_memory_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteSessionStore::open(dir.path().join("s.db"))
            .await
            .unwrap(),
    );
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>);
    let root_model = router();
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("helper", counting("helper")),
        ("other", echo("o")),
    ]);
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::incognito("secret");
    let mut answers = Vec::new();
    for query in ["one", "two"] {
        let run = root
            .run_in_session(&scope, ask("Helper", None, query), &EventSink::none())
            .await
            .unwrap();
        answers.push(run.final_text);
    }
    assert_eq!(answers, ["helper #1: one", "helper #2: two"]);
    assert_eq!(
        root_model.seen().last().unwrap().users(),
        2,
        "parent continuity"
    );
    assert!(store.load(&"secret".into()).await.unwrap().is_none());
    assert!(store.children(&"secret".into()).await.unwrap().is_empty());
    let child = child_session_id(&"secret".into(), &"helper".into(), "");
    assert!(store.load(&child).await.unwrap().is_none());
    // The host still reads the incognito child's text while the process lives.
    assert_eq!(
        root.child_transcript(&scope, &"helper".into(), None)
            .await
            .unwrap()
            .len(),
        4
    );
}
