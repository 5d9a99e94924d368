//! A resumed run (after approval, docs/approval.md) opens its own
//! `invoke_agent` root, linked to the first segment by the run id.

use super::*;

#[tokio::test]
async fn a_resumed_run_exports_its_own_invoke_agent_with_the_same_run_id() {
    let spans = Spans::capture();
    let mut run = deployer(ScriptedModel::tool_call("deploy", json!({ "id": "v2" })))
        .run("deploy v2")
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let suspended = run.suspended.take().unwrap();
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    // As another process would: a new agent, the stored state.
    let second = deployer(ChatResponse::text("deployed v2"));
    let resumed = second.resume(suspended, &decisions).await.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    let spans = spans.finished();
    let segments: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent deployer")
        .collect();
    assert_eq!(segments.len(), 2, "{:?}", names(&spans));
    let run_id = resumed.run_id.to_string();
    for segment in &segments {
        assert!(is_root(segment), "each segment is a root");
        assert_eq!(attr(segment, "tinyagents.run.id"), Some(run_id.clone()));
    }
    assert_ne!(trace(segments[0]), trace(segments[1]));
    assert_eq!(
        attr(segments[0], "tinyagents.run.segment").as_deref(),
        Some("run")
    );
    assert_eq!(
        attr(segments[0], "tinyagents.run.status").as_deref(),
        Some("awaiting_approval")
    );
    assert_eq!(
        attr(segments[1], "tinyagents.run.segment").as_deref(),
        Some("resume")
    );
    assert_eq!(
        attr(segments[1], "tinyagents.run.status").as_deref(),
        Some("completed")
    );
    // The approved call ran in the resumed segment, under its root.
    let call = tool_call(&spans, "deploy", "p1");
    assert!(is_child_of(call, segments[1]));
    assert!(!is_error(call));
}

/// An agent whose `deploy` waits for a person; its model answers `next`.
fn deployer(next: ChatResponse) -> Agent {
    let deploy = FnTool::new("deploy", "Deploys.", |r: Record| async move {
        anyhow::Ok(format!("deployed {}", r.id))
    })
    .map_spec(ToolSpec::approval_required);
    Agent::builder("deployer")
        .model(ScriptedModel::new([next]))
        .tool(deploy)
        .build()
        .unwrap()
}

/// Answers with a call to `fetch`, then never answers again: the process
/// "dies" waiting on the second turn.
struct HangsAfterOneTurn;

#[tinyagents::async_trait]
impl ChatModel for HangsAfterOneTurn {
    fn name(&self) -> &str {
        "hangs"
    }

    async fn chat(
        &self,
        request: tinyagents::core::ChatRequest<'_>,
    ) -> Result<ChatResponse, tinyagents::core::ModelError> {
        if request
            .messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. }))
        {
            std::future::pending::<()>().await;
        }
        Ok(ScriptedModel::tool_call("fetch", json!({ "id": "r-1" })))
    }
}

#[tokio::test]
async fn a_recovered_run_exports_its_own_invoke_agent_with_the_same_run_id() {
    let spans = Spans::capture();
    let ledger: Arc<dyn tinyagents::ledger::EffectLedger> =
        Arc::new(tinyagents::ledger::MemoryLedger::new());
    let run_id = RunId::from("run-recovered");
    let harness = |model: Arc<dyn ChatModel>| {
        let mut builder = AgentHarness::builder(model)
            .agent_id(tinyagents::core::AgentId::from("recoverer"))
            .ledger(Arc::clone(&ledger));
        builder.register(Arc::new(fetch())).unwrap();
        builder.build().unwrap()
    };
    let died = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        harness(Arc::new(HangsAfterOneTurn)).run_with(
            RunRequest::new("fetch r-1").with_run_id(run_id.clone()),
            &EventSink::none(),
        ),
    )
    .await;
    assert!(died.is_err(), "the first process dies in its second turn");
    let recovered = harness(Arc::new(ScriptedModel::new([ChatResponse::text("ok")])))
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(recovered.status, RunStatus::Completed);
    let spans = spans.finished();
    let segments: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent recoverer")
        .collect();
    assert_eq!(segments.len(), 2, "{:?}", names(&spans));
    for segment in &segments {
        assert!(is_root(segment));
        assert_eq!(
            attr(segment, "tinyagents.run.id").as_deref(),
            Some("run-recovered")
        );
    }
    let recovery = segments
        .iter()
        .find(|s| attr(s, "tinyagents.run.segment").as_deref() == Some("recover"))
        .unwrap();
    assert_eq!(
        attr(recovery, "tinyagents.run.status").as_deref(),
        Some("completed")
    );
    assert!(
        spans
            .iter()
            .filter(|s| s.name == "chat scripted")
            .all(|chat| is_child_of(chat, recovery))
    );
}
