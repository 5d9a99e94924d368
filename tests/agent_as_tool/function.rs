//! The function (AT-08..AT-10, AT-12).

use super::*;

/// rule AT-08: input is a required `query` and an optional `conversation`; output is the child's final text.
#[tokio::test]
async fn at_08_query_in_final_text_out() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let helper_model = echo("helper");
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", Arc::clone(&helper_model)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;

    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false);
    let schema = &tool[0].spec().parameters;
    assert_eq!(schema["required"], json!(["query"]));
    assert_eq!(schema["properties"]["query"]["type"], "string");
    assert_eq!(schema["properties"]["conversation"]["type"], "string");

    let run = root
        .run(RunRequest::new("What is 2 + 2?"), &EventSink::none())
        .await
        .unwrap();
    let result = tinyagents_tests::tool_results(&run.messages);
    assert_eq!(
        result,
        [(
            "Helper".to_owned(),
            "helper: What is 2 + 2?".to_owned(),
            false
        )]
    );
    assert_eq!(helper_model.seen()[0].last_user(), "What is 2 + 2?");

    // A call without a query breaks the schema and never reaches the child.
    let missing = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("Helper", json!({ "conversation": "x" })),
    });
    let models = by_agent(&[("root", missing), ("helper", Arc::clone(&helper_model))]);
    let (orchestrator, _) = self::orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let run = root
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    let (_, content, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert!(*is_error && content.contains("query"), "{content}");
    assert_eq!(helper_model.calls(), 1);
}

/// rule AT-09: the calling call's cancellation reaches the child run.
#[tokio::test]
async fn at_09_cancellation_reaches_the_child_run() {
    let started = Arc::new(Notify::new());
    let blocking = {
        let started = Arc::clone(&started);
        TestModel::new(move |_| Step::Block(Arc::clone(&started)))
    };
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", blocking)]);
    let recorder = Arc::new(Recorder::default());
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).run_middleware(recorder.clone()))
        .await
        .unwrap();

    // Called directly: cancelling the call's token ends the child run, and
    // the call fails.
    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false)
        .remove(0);
    let token = CancellationToken::new();
    let context = ToolRunContext::new(RunId::new("r"), CallId::model(1), token.clone());
    let (result, ()) = tokio::join!(tool.call("q", None, Some(&context)), async {
        started.notified().await;
        token.cancel();
    });
    assert_eq!(
        result.unwrap_err(),
        AgentToolError::ChildStopped {
            agent: "helper".into(),
            status: RunStatus::Cancelled
        }
    );

    // Through a parent run: the child's run context carries a token that
    // the parent's cancellation fires.
    let token = CancellationToken::new();
    let quiet = EventSink::none();
    let (run, ()) = tokio::join!(
        root.run(
            RunRequest::new("go").with_cancellation(token.clone()),
            &quiet
        ),
        async {
            started.notified().await;
            token.cancel();
        }
    );
    assert_eq!(run.unwrap().status, RunStatus::Cancelled);
    let tokens = recorder.tokens.lock().unwrap().clone();
    let (_, child_token) = tokens.iter().rev().find(|(a, _)| a == "helper").unwrap();
    assert!(child_token.is_cancelled());
}

/// rule AT-10: a child's failure is an error of the call, never success text.
#[tokio::test]
async fn at_10_child_failure_propagates_as_an_error() {
    let failing = TestModel::new(|_| {
        Step::Fail(ModelError::Server {
            status: 500,
            message: "boom".into(),
        })
    });
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", failing)]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let (run, events) = run_collecting(&root, None, RunRequest::new("go")).await;
    let run = run.unwrap();
    let (name, _, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert_eq!(name, "Helper");
    assert!(is_error);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolFailed { name, .. } if name == "Helper"
    )));

    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false)
        .remove(0);
    let error = tool.call("q", None, None).await.unwrap_err();
    assert!(matches!(
        error,
        AgentToolError::ChildFailed {
            source: TinyAgentsError::Model(ModelError::Server { status: 500, .. }),
            ..
        }
    ));
}

/// rule AT-12: the calling run's additional properties are copied into the child run.
#[tokio::test]
async fn at_12_run_properties_are_copied_into_the_child_run() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", echo("h"))]);
    let recorder = Arc::new(Recorder::default());
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).run_middleware(recorder.clone()))
        .await
        .unwrap();
    let mut properties = Map::new();
    properties.insert("tenant".into(), json!("acme"));
    properties.insert("trace".into(), json!({"id": 7}));
    let scope = SessionScope::new("s1");
    root.run_in_session(
        &scope,
        RunRequest::new("go").with_properties(properties),
        &EventSink::none(),
    )
    .await
    .unwrap();
    let seen = recorder.properties.lock().unwrap().clone();
    let (_, child) = seen.iter().find(|(a, _)| a == "helper").unwrap();
    assert_eq!(child["tenant"], "acme");
    assert_eq!(child["trace"], json!({"id": 7}));
    // The session property names the child's own session.
    assert_eq!(
        child[SESSION_PROPERTY],
        child_session_id(&"s1".into(), &"helper".into(), "").as_str()
    );
}
