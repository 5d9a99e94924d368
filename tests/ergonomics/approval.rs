//! Approval end to end (friction 4): `resume` on an orchestrated agent,
//! sessions that survive suspend and resume, an `ApprovalRequested` event
//! per waiting call, and a reason that names what asked.

use std::sync::Arc;

use serde_json::json;
use tinyagents::middleware::{SecurityGate, ToolCallRequest};
use tinyagents::orchestrator::{
    AgentBuildRequest, AgentDefinition, AgentOrchestrator, HostTools, InMemorySessionStore,
    ModelRegistry, ToolPolicy,
};
use tinyagents::prelude::*;

use crate::drain;

#[json_schema]
struct Service {
    service: String,
}

fn deploy(flagged: bool) -> impl Tool {
    FnTool::new("deploy", "Deploys.", |s: Service| async move {
        anyhow::Ok(format!("{} deployed", s.service))
    })
    .map_spec(move |spec| {
        if flagged {
            spec.approval_required()
        } else {
            spec
        }
    })
}

fn asks_deploy() -> ChatResponse {
    ScriptedModel::tool_call("deploy", json!({"service": "billing"}))
}

/// The waiting calls' `ApprovalRequested` events.
fn requested(events: &[AgentEvent]) -> Vec<(CallId, String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ApprovalRequested {
                call_id,
                tool,
                reason,
                ..
            } => Some((call_id.clone(), tool.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// An agent whose spec-flagged `deploy` suspended its run in the session
/// `chan`; once approved, the model answers `answer`.
async fn suspended_in_session(answer: &str) -> (Agent, SessionScope, AgentRun) {
    let agent = Agent::builder("ops")
        .model(ScriptedModel::new([
            asks_deploy(),
            ChatResponse::text(answer),
        ]))
        .tool(deploy(true))
        .build()
        .unwrap();
    let scope = SessionScope::new("chan");
    let run = agent
        .run_in_session(&scope, "deploy billing")
        .await
        .unwrap();
    (agent, scope, run)
}

#[tokio::test]
async fn a_session_run_that_suspends_keeps_its_conversation_through_a_stored_resume() {
    let (agent, scope, run) = suspended_in_session("billing is out").await;
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    // Nothing is stored while the run waits.
    assert!(agent.transcript(&scope).await.unwrap().is_empty());

    let suspended = run.suspended.unwrap();
    // Where the session turn stood rides in the properties, without the
    // input itself (only the transcript, which redaction covers, holds it).
    let properties = serde_json::to_string(&suspended.properties).unwrap();
    assert!(
        properties.contains("tinyagents.session_turn"),
        "{properties}"
    );
    assert!(!properties.contains("deploy billing"), "{properties}");
    let stored = serde_json::to_string(&suspended).unwrap();
    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    let run = agent.resume(suspended, &decisions).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let kept = crate::texts(agent.transcript(&scope).await.unwrap());
    assert_eq!(kept, ["deploy billing", "billing is out"]);
}

#[tokio::test]
async fn an_orchestrated_agent_resumes_in_its_session() {
    let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()));
    let definition = AgentDefinition::new("ops", "Ops")
        .tools(["deploy"])
        .tool_policy("deploy", ToolPolicy::RequireApproval);
    let models = ModelRegistry::new(Arc::new(ScriptedModel::new([
        ChatResponse::text("first answer"),
        asks_deploy(),
        ChatResponse::text("deployed it"),
    ])));
    let request = AgentBuildRequest::new("ops", [Arc::new(definition)], Arc::new(models))
        .tools(HostTools::new().with(deploy(false)));
    let agent = orchestrator.get_or_create_agent(request).await.unwrap();
    let scope = SessionScope::new("s");
    let none = EventSink::none();
    agent
        .run_in_session(&scope, RunRequest::new("hello"), &none)
        .await
        .unwrap();
    let run = agent
        .run_in_session(&scope, RunRequest::new("deploy billing"), &none)
        .await
        .unwrap();
    let suspended = run.suspended.unwrap();
    let reason = &suspended.pending().next().unwrap().reason;
    assert_eq!(
        reason,
        "tool 'deploy' requires a person's approval (asked by policy 'agent_tool_policy')"
    );
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    let run = agent.resume(suspended, &decisions, &none).await.unwrap();
    assert_eq!(run.final_text, "deployed it");
    let kept = crate::texts(agent.transcript(&scope).await.unwrap());
    assert_eq!(
        kept,
        ["hello", "first answer", "deploy billing", "deployed it"]
    );
}

#[tokio::test]
async fn a_denied_call_completes_the_session_turn_with_the_refusal_read_by_the_model() {
    let (agent, scope, run) = suspended_in_session("not deployed").await;
    let suspended = run.suspended.unwrap();
    let decisions: Vec<_> = suspended.pending().map(|p| p.deny("not today")).collect();
    let run = agent.resume(suspended, &decisions).await.unwrap();
    assert_eq!(run.final_text, "not deployed");
    assert!(run.messages.iter().any(|m| matches!(m, Message::Tool { content, is_error: true, .. } if content.contains("not today"))));
    assert_eq!(agent.transcript(&scope).await.unwrap().len(), 2);
}

#[tokio::test]
async fn each_waiting_call_is_announced_with_its_id_tool_and_reason_before_the_run_ends() {
    let agent = Agent::builder("ops")
        .model(ScriptedModel::new([ScriptedModel::tool_calls([
            ("deploy", json!({"service": "a"})),
            ("deploy", json!({"service": "b"})),
        ])]))
        .tool(deploy(true))
        .build()
        .unwrap();
    // Capture off (the default): the event still names the call.
    let (events, run) = drain(agent.stream("deploy both")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let requested = requested(&events);
    let ids: Vec<_> = requested.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["p1", "p2"]);
    assert!(requested.iter().all(|r| r.1 == "deploy"));
    assert_eq!(
        requested[0].2,
        "tool 'deploy' requires a person's approval (asked by the tool's spec, which flags it approval_required)"
    );
    let end = events
        .iter()
        .position(|e| matches!(e, AgentEvent::RunCompleted { .. }))
        .unwrap();
    let last_request = events
        .iter()
        .rposition(|e| matches!(e, AgentEvent::ApprovalRequested { .. }))
        .unwrap();
    assert!(last_request < end);
    let pending: Vec<_> = run.pending().iter().map(|p| p.call.id.clone()).collect();
    assert_eq!(pending, [CallId::new("p1"), CallId::new("p2")]);
}

#[tokio::test]
async fn a_plain_harness_names_the_spec_a_policy_or_the_gate_as_what_asked() {
    struct Ask;
    #[async_trait]
    impl SecurityGate for Ask {
        async fn authorize_tool(
            &self,
            _: &ToolCallRequest<'_>,
        ) -> Result<ToolVerdict, TinyAgentsError> {
            Ok(ToolVerdict::defer("the gate wants a look"))
        }
    }
    let spec = AgentHarness::builder(Arc::new(ScriptedModel::new([asks_deploy()])))
        .tool(deploy(true))
        .build()
        .unwrap();
    let gate = AgentHarness::builder(Arc::new(ScriptedModel::new([asks_deploy()])))
        .tool(deploy(false))
        .security_gate(Arc::new(Ask))
        .build()
        .unwrap();
    let policy = AgentHarness::builder(Arc::new(ScriptedModel::new([asks_deploy()])))
        .tool(deploy(false))
        .middleware(Arc::new(
            tinyagents::middleware::HumanApprovalMiddleware::new().require("deploy"),
        ))
        .build()
        .unwrap();
    let reason = |run: AgentRun| run.pending()[0].reason.clone();
    assert_eq!(
        reason(spec.run("go").await.unwrap()),
        "tool 'deploy' requires a person's approval (asked by the tool's spec, which flags it approval_required)"
    );
    assert_eq!(
        reason(gate.run("go").await.unwrap()),
        "the gate wants a look (asked by the security gate)"
    );
    let by_policy = reason(policy.run("go").await.unwrap());
    assert!(
        by_policy.ends_with("(asked by policy 'human_approval')"),
        "{by_policy}"
    );
}

#[tokio::test]
async fn auto_approve_runs_a_tool_whose_spec_asks_for_a_person_and_only_model_issued() {
    let agent = Agent::builder("ops")
        .model(ScriptedModel::new([
            asks_deploy(),
            ChatResponse::text("done"),
        ]))
        .tool(deploy(true))
        .auto_approve("deploy")
        .build()
        .unwrap();
    let run = agent.run("deploy billing").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.messages.iter().any(|m| matches!(m, Message::Tool { content, is_error: false, .. } if content == "billing deployed")));
}

/// A stored state whose session turn was edited (junk, or counts that do
/// not hold together) still completes its session turn: the conversation
/// is saved whole, nothing appended twice, nothing lost.
#[tokio::test]
async fn an_edited_session_turn_in_a_stored_state_saves_the_conversation_whole() {
    let edits = [
        json!("junk"),
        json!({"stored": 7, "given": 2, "rewritten": false, "input_hash": "x"}),
        json!({"stored": 0, "given": 99, "rewritten": false, "input_hash": "x"}),
    ];
    for edit in edits {
        let (agent, scope, run) = suspended_in_session("billing is out").await;
        let mut suspended = run.suspended.unwrap();
        suspended.properties.insert(
            tinyagents::orchestrator::SESSION_TURN_PROPERTY.to_owned(),
            edit.clone(),
        );
        let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
        let run = agent.resume(suspended, &decisions).await.unwrap();
        assert_eq!(run.final_text, "billing is out", "{edit}");
        let kept = crate::texts(agent.transcript(&scope).await.unwrap());
        assert_eq!(kept, ["deploy billing", "billing is out"], "{edit}");
    }
}

/// A resumed run that waits again announces its new waiting call on the
/// resumed segment's stream.
#[tokio::test]
async fn a_resumed_run_that_waits_again_announces_the_new_call() {
    let agent = Agent::builder("ops")
        .model(ScriptedModel::new([
            asks_deploy(),
            ScriptedModel::tool_call("deploy", json!({"service": "search"})),
            ChatResponse::text("both out"),
        ]))
        .tool(deploy(true))
        .build()
        .unwrap();
    let run = agent.run("deploy billing, then search").await.unwrap();
    let suspended = run.suspended.unwrap();
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    let (events, run) =
        drain(agent.start_resume(suspended, &decisions, ResumeOptions::default())).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let asked = requested(&events);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].0.as_str(), "p2");
    assert_eq!(
        run.pending()[0].call.arguments,
        json!({"service": "search"})
    );
}

/// A nested call of a tool that waits for a person is refused, and no
/// `ApprovalRequested` is emitted for it: nobody could answer.
#[tokio::test]
async fn a_nested_call_that_would_wait_is_refused_without_an_approval_request() {
    let nests = FnTool::with_context(
        "nests",
        "Nests.",
        |_: Service, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let inner = exec
                .call_tool("deploy", json!({"service": "billing"}))
                .await;
            anyhow::Ok(format!("refused: {}", inner.is_err()))
        },
    );
    let agent = Agent::builder("ops")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("nests", json!({"service": "x"})),
            ChatResponse::text("done"),
        ]))
        .tool(deploy(true))
        .tool(nests)
        .max_nested_depth(1)
        .build()
        .unwrap();
    let (events, run) = drain(agent.stream("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert!(requested(&events).is_empty());
    assert!(
        run.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { content, .. } if content == "refused: true"))
    );
}

/// Issue 30: a waiting call's `ApprovalRequested` carries its arguments
/// only under `tool_io` capture, scrubbed as `ToolStarted`'s are (what the
/// console's inbox shows); without capture, none.
#[tokio::test]
async fn approval_requested_carries_the_arguments_only_under_capture_and_redacted() {
    use tinyagents::middleware::{REDACTED, RedactionMiddleware, Redactor};
    for capture in [PayloadCapture::default(), PayloadCapture::all()] {
        let tool = FnTool::new("deploy", "Deploys.", |s: Service| async move {
            anyhow::Ok(format!("{} deployed", s.service))
        })
        .map_spec(|spec| spec.approval_required());
        let model =
            ScriptedModel::tool_call("deploy", json!({"service": "billing", "token": "s3cret"}));
        let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new([model])))
            .payload_capture(capture)
            .middleware(Arc::new(RedactionMiddleware::with_redactor(
                Redactor::new().with_key("token"),
            )));
        builder.register(Arc::new(tool)).unwrap();
        let harness = builder.build().unwrap();
        let mut handle = harness.start(RunRequest::new("deploy"));
        let mut events = Vec::new();
        while let Some(event) = handle.next_event().await {
            events.push(event);
        }
        assert_eq!(
            handle.wait().await.unwrap().status,
            RunStatus::AwaitingApproval
        );
        let arguments: Vec<Option<serde_json::Value>> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ApprovalRequested { arguments, .. } => Some(arguments.clone()),
                _ => None,
            })
            .collect();
        let expected = capture
            .tool_io
            .then(|| json!({"service": "billing", "token": REDACTED}));
        assert_eq!(arguments, [expected], "capture {capture:?}");
        let all = serde_json::to_string(&events).unwrap();
        assert!(!all.contains("s3cret"), "{all}");
    }
}
