//! Beyond the spec (AT-31, AT-32).

use super::*;

/// rule AT-31: `RunLimits::max_depth` caps chains of agents calling agents at run time.
#[tokio::test]
async fn at_31_max_depth_caps_chains_of_agents() {
    let chain = ["a", "b", "c", "d", "e"];
    let mut defs = Vec::new();
    let mut models = Vec::new();
    for (i, id) in chain.iter().enumerate() {
        let mut def = exposed(id, &id.to_uppercase());
        if let Some(next) = chain.get(i + 1) {
            def = def.agent_tools([*next]);
            let next_name: &'static str = Box::leak(next.to_uppercase().into_boxed_str());
            let me: &'static str = id;
            models.push((
                *id,
                TestModel::new(move |seen| match seen.last_tool() {
                    Some(result) => text(format!("{me}<{result}>")),
                    None => call(next_name, json!({"query": "deeper"})),
                }),
            ));
        } else {
            models.push((*id, echo("e")));
        }
        defs.push(def);
    }
    let factory = by_agent(&models);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(store).limits(
        RunLimits::default()
            .with_max_model_calls(40)
            .with_max_depth(2),
    );
    let a = build(&orchestrator, "a", &defs, &factory).await;
    let run = a
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.final_text,
        "a<b<c<agent 'd' failed: limit exceeded: max_depth (limit 2, used 3)>>>"
    );
}

/// A tool bound after the agents are built: lets a test close a cycle at
/// run time that the build walk never closes.
struct LateTool {
    spec: ToolSpec,
    inner: OnceLock<Arc<dyn Tool>>,
}

#[async_trait]
impl Tool for LateTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let inner = self.inner.get().expect("bound before the run");
        inner.execute_with_context(args, opts, context).await
    }
}

/// rule AT-31: the depth cap holds across a cycle of agents through reused conversations.
#[tokio::test]
async fn at_31_max_depth_caps_cycles_through_reused_conversations() {
    let late = Arc::new(LateTool {
        spec: ToolSpec::new(
            "call_ping",
            "Asks ping.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "conversation": {"type": "string"}}, "required": ["query"]}),
        ),
        inner: OnceLock::new(),
    });
    let defs = [
        AgentDefinition::new("ping", "Ping").agent_tools(["pong"]),
        exposed("pong", "Pong").tools(["call_ping"]),
    ];
    let models = by_agent(&[
        (
            "ping",
            TestModel::new(|seen| match seen.last_tool() {
                Some(result) => text(format!("ping<{result}>")),
                None => call("Pong", json!({"query": "again", "conversation": "loop"})),
            }),
        ),
        (
            "pong",
            TestModel::new(|seen| match seen.last_tool() {
                Some(result) => text(format!("pong<{result}>")),
                None => call(
                    "call_ping",
                    json!({"query": "again", "conversation": "Loop"}),
                ),
            }),
        ),
    ]);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>)
        .limits(RunLimits::default().with_max_depth(4));
    let ping = orchestrator
        .get_or_create_agent(
            request("ping", &defs, &models)
                .tools(HostTools::new().with_shared(Arc::clone(&late) as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let bound = orchestrator
        .provider(vec![Arc::clone(ping.agent())])
        .tools(false);
    assert!(late.inner.set(bound[0].clone() as Arc<dyn Tool>).is_ok());

    let scope = SessionScope::new("s");
    for _ in 0..2 {
        let run = tokio::time::timeout(
            Duration::from_secs(10),
            ping.run_in_session(&scope, RunRequest::new("go"), &EventSink::none()),
        )
        .await
        .expect("the cycle ends")
        .unwrap();
        assert_eq!(
            run.final_text,
            "ping<pong<ping<pong<ping<agent 'pong' failed: limit exceeded: max_depth (limit 4, used 5)>>>>>"
        );
    }
    // Four nested child sessions, each continued by the second run.
    let mut parent = SessionId::from("s");
    for _ in 0..4 {
        let children = store.children(&parent).await.unwrap();
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].revision, 2);
        parent = children[0].id.clone();
    }
    assert!(store.children(&parent).await.unwrap().is_empty());
}

/// rule AT-32: the child run's events reach the parent's stream with the parent call id, the agent id and the depth; child runs are linked to the calling call.
#[tokio::test]
async fn at_32_child_events_reach_the_parent_stream() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["researcher"]),
        exposed("researcher", "Researcher").agent_tools(["summarizer"]),
        exposed("summarizer", "Summarizer"),
    ];
    let models = by_agent(&[
        ("root", delegating("Researcher", None)),
        ("researcher", delegating("Summarizer", None)),
        ("summarizer", echo("summary")),
    ]);
    let ledger = Arc::new(MemoryLedger::new());
    let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
        .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>);
    let root = build(&orchestrator, "root", &defs, &models).await;
    let (run, events) = run_collecting(
        &root,
        None,
        RunRequest::new("tides").with_run_id(RunId::new("top")),
    )
    .await;
    assert_eq!(run.unwrap().final_text, "summary: tides");
    let delegated = delegated(&events);
    let starts: Vec<(String, u32, String, RunId)> = delegated
        .iter()
        .filter_map(|(agent, depth, parent, event)| match event {
            AgentEvent::RunStarted { run_id, .. } => {
                Some((agent.clone(), *depth, parent.clone(), run_id.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [
            ("researcher".into(), 1, "p1".into(), RunId::new("top::p1")),
            (
                "summarizer".into(),
                2,
                "p1".into(),
                RunId::new("top::p1::p1")
            ),
        ]
    );
    assert_eq!(
        parent_of_child_run(&RunId::new("top::p1::p1")),
        Some((RunId::new("top::p1"), CallId::new("p1")))
    );
    assert_eq!(
        child_run_id(&RunId::new("top"), &CallId::model(1)),
        RunId::new("top::p1")
    );
    // The ledger links each child run's rows to the call that started it.
    let calls = |run: &str| {
        let ledger = Arc::clone(&ledger);
        let run = RunId::new(run);
        async move {
            ledger
                .rows(&run)
                .await
                .unwrap()
                .into_iter()
                .map(|row| (row.call_id.to_string(), row.tool_name, row.replay))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        calls("top").await,
        [("p1".to_owned(), "Researcher".to_owned(), ToolReplay::Never)]
    );
    assert_eq!(
        calls("top::p1").await,
        [("p1".to_owned(), "Summarizer".to_owned(), ToolReplay::Never)]
    );
    assert!(calls("top::p1::p1").await.is_empty());
    // The summarizer's completion and its tool-less model turn are visible.
    assert!(
        delegated
            .iter()
            .any(|(agent, depth, _, event)| agent == "summarizer"
                && *depth == 2
                && matches!(
                    event,
                    AgentEvent::RunCompleted {
                        status: RunStatus::Completed,
                        ..
                    }
                ))
    );
    assert!(
        delegated
            .iter()
            .any(|(agent, _, _, event)| agent == "researcher"
                && matches!(event, AgentEvent::ToolStarted { name, .. } if name == "Summarizer"))
    );
    // The parent's own call of the researcher brackets the delegated events.
    let position = |pred: &dyn Fn(&AgentEvent) -> bool| events.iter().position(pred).unwrap();
    let started =
        position(&|e| matches!(e, AgentEvent::ToolStarted { name, .. } if name == "Researcher"));
    let first_delegated = position(&|e| matches!(e, AgentEvent::Delegated { .. }));
    let completed =
        position(&|e| matches!(e, AgentEvent::ToolCompleted { name, .. } if name == "Researcher"));
    assert!(started < first_delegated && first_delegated < completed);
}

/// Issue 18: an agent tool never repeats (`ToolReplay::Never`) and cannot
/// tell whether a delegated run that a crash interrupted had its effects,
/// so it answers a reconciliation `Unknown`: recovery answers such a call
/// "interrupted, outcome unknown" and keeps it in view.
#[tokio::test]
async fn i18_an_agent_tool_answers_a_reconciliation_unknown() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", echo("helper")),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let tools = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false);
    assert_eq!(tools[0].spec().replay, ToolReplay::Never);
    let context = tinyagents::tools::ToolRunContext::new(
        RunId::from("crashed"),
        CallId::new("p1"),
        CancellationToken::new(),
    );
    let answer = tools[0].reconcile(&context).await.unwrap();
    assert_eq!(answer, tinyagents::tools::Reconciled::Unknown);
}
