//! `agent.as_tool(name, description)`: one agent handed to another in one
//! line, under the agent-as-tool rules that apply without a catalogue
//! (friction 1).

use std::sync::Arc;

use serde_json::json;
use tinyagents::core::{AgentId, CancellationToken, RunId};
use tinyagents::ledger::EffectLedger;
use tinyagents::orchestrator::child_run_id;
use tinyagents::prelude::*;

use crate::{drain, recording};

#[json_schema]
struct Empty {}

fn tool_named(name: &str) -> FnTool<Empty, impl tinyagents::tools::ToolHandler<Empty>> {
    let answer = format!("{name} ran");
    FnTool::new(name.to_owned(), "A tool.", move |_: Empty| {
        let answer = answer.clone();
        async move { anyhow::Ok(answer) }
    })
}

/// rules AT-08, AT-32: the `query`/`conversation` schema, the child's answer as the
/// result, and the child's events in the caller's stream as `Delegated`.
#[tokio::test]
async fn a_child_is_offered_with_the_query_schema_and_its_events_arrive_delegated_at_depth_one() {
    let child_model = recording(vec![ChatResponse::text("refund it")]);
    let child = Agent::builder("disputes")
        .model(Arc::clone(&child_model))
        .instructions("Decide disputes.")
        .build()
        .unwrap();
    let parent_model = recording(vec![
        ScriptedModel::tool_call("disputes", json!({"query": "charged twice?"})),
        ChatResponse::text("done"),
    ]);
    let parent = Agent::builder("billing")
        .model(Arc::clone(&parent_model))
        .tool(child.as_tool("disputes", "Decides disputes."))
        .build()
        .unwrap();
    let (events, run) = drain(parent.stream("help")).await;
    let run = run.unwrap();
    assert_eq!(run.final_text, "done");

    let offered = &parent_model.requests()[0].tools;
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].name, "disputes");
    assert_eq!(offered[0].description, "Decides disputes.");
    assert_eq!(offered[0].parameters["required"], json!(["query"]));
    assert!(offered[0].parameters["properties"]["conversation"].is_object());
    // The child was asked the query, after its own instruction.
    let asked = &child_model.requests()[0].messages;
    assert!(matches!(&asked[0], Message::System { content } if content == "Decide disputes."));
    assert!(matches!(asked.last(), Some(Message::User { content }) if content == "charged twice?"));
    // The parent's model read the child's answer as the call's result.
    assert!(
        run.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { content, .. } if content == "refund it"))
    );

    let delegated: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delegated {
                parent_call_id,
                agent_id,
                depth,
                event,
            } => Some((
                parent_call_id.clone(),
                agent_id.clone(),
                *depth,
                event.as_ref().clone(),
            )),
            _ => None,
        })
        .collect();
    assert!(!delegated.is_empty());
    for (call, agent, depth, _) in &delegated {
        assert_eq!(call.as_str(), "p1");
        assert_eq!(agent.as_str(), "disputes");
        assert_eq!(*depth, 1);
    }
    assert!(
        matches!(&delegated[0].3, AgentEvent::RunStarted { run_id, .. }
        if *run_id == child_run_id(&run.run_id, &CallId::new("p1")))
    );
}

/// rule AT-24: a delegated agent omits the tools that would wait for a person.
#[tokio::test]
async fn a_child_does_not_offer_tools_that_need_approval() {
    let child_model = recording(vec![ChatResponse::text("ok")]);
    let child = Agent::builder("ops")
        .model(Arc::clone(&child_model))
        .tool(tool_named("status"))
        .tool(tool_named("deploy").map_spec(|s| s.approval_required()))
        .tool(tool_named("wire").map_spec(|s| s.external()))
        .tool(tool_named("restart"))
        .require_approval("restart")
        .build()
        .unwrap();
    let parent = Agent::builder("lead")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("ops", json!({"query": "status?"})),
            ChatResponse::text("fine"),
        ]))
        .tool(child.as_tool("ops", "Runs operations."))
        .build()
        .unwrap();
    assert_eq!(parent.run("go").await.unwrap().final_text, "fine");
    let offered: Vec<_> = child_model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["status"]);
    // Run directly, the same agent offers all four (and would ask a person).
    assert_eq!(child.harness().tools().len(), 4);
}

/// rule AT-22: the caller's air gap is inherited, never loosened.
#[tokio::test]
async fn an_air_gapped_caller_tightens_its_child_and_an_open_one_does_not() {
    let egress = || tool_named("fetch").map_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    for local_only in [false, true] {
        let child_model = recording(vec![ChatResponse::text("ok")]);
        let child = Agent::builder("researcher")
            .model(Arc::clone(&child_model))
            .tool(egress())
            .tool(tool_named("notes"))
            .build()
            .unwrap();
        let mut parent = Agent::builder("lead")
            .model(ScriptedModel::new([
                ScriptedModel::tool_call("researcher", json!({"query": "look"})),
                ChatResponse::text("done"),
            ]))
            .tool(child.as_tool("researcher", "Researches."));
        if local_only {
            parent = parent.local_only();
        }
        parent.build().unwrap().run("go").await.unwrap();
        let offered: Vec<_> = child_model.requests()[0]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let expected: &[&str] = if local_only {
            &["notes"]
        } else {
            &["fetch", "notes"]
        };
        assert_eq!(offered, expected, "local_only = {local_only}");
    }
}

/// rule AT-31: the depth cap across chains of agents.
#[tokio::test]
async fn a_child_runs_at_depth_plus_one_so_max_depth_caps_chains() {
    let leaf = Agent::builder("leaf")
        .model(ScriptedModel::new([ChatResponse::text("leaf answer")]))
        .map_limits(|l| l.with_max_depth(0))
        .build()
        .unwrap();
    let parent = Agent::builder("root")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("leaf", json!({"query": "q"})),
            ChatResponse::text("after"),
        ]))
        .tool(leaf.as_tool("leaf", "Leaf."))
        .build()
        .unwrap();
    let run = parent.run("go").await.unwrap();
    let result = run
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    assert!(
        result.1,
        "the child's refusal is a failed call: {}",
        result.0
    );
    assert!(result.0.contains("depth"), "{}", result.0);
}

/// rule AT-09: cancellation passes through to the child run.
#[tokio::test]
async fn cancelling_the_caller_cancels_the_child_run() {
    let token = CancellationToken::new();
    let cancel = token.clone();
    let hang = FnTool::new("hang", "Hangs.", move |_: Empty| {
        let cancel = cancel.clone();
        async move {
            cancel.cancel();
            std::future::pending::<()>().await;
            anyhow::Ok("never")
        }
    });
    let child = Agent::builder("worker")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("hang", json!({})),
            ChatResponse::text("x"),
        ]))
        .tool(hang)
        .build()
        .unwrap();
    let parent = Agent::builder("boss")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("worker", json!({"query": "work"})),
            ChatResponse::text("never read"),
        ]))
        .tool(child.as_tool("worker", "Works."))
        .build()
        .unwrap();
    let request = RunRequest::new("go").with_cancellation(token);
    let (events, run) = drain(parent.start(request)).await;
    assert_eq!(run.unwrap().status, RunStatus::Cancelled);
    let child_end = events.iter().find_map(|e| match e {
        AgentEvent::Delegated { event, .. } => match event.as_ref() {
            AgentEvent::RunCompleted { status, .. } => Some(*status),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(child_end, Some(RunStatus::Cancelled));
}

/// rules AT-11, AT-13, AT-15: a child session per (agent, conversation) inside the
/// caller's session; none without one.
#[tokio::test]
async fn a_caller_in_a_session_gives_its_child_a_child_session_per_conversation() {
    let child = Agent::builder("notes")
        .model(ScriptedModel::new([
            ChatResponse::text("noted"),
            ChatResponse::text("noted again"),
        ]))
        .build()
        .unwrap();
    let parent = Agent::builder("lead")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call(
                "notes",
                json!({"query": "remember A", "conversation": "plan"}),
            ),
            ChatResponse::text("ok"),
            ScriptedModel::tool_call(
                "notes",
                json!({"query": "remember B", "conversation": "plan"}),
            ),
            ChatResponse::text("ok again"),
        ]))
        .tool(child.as_tool("notes", "Keeps notes."))
        .build()
        .unwrap();
    let scope = SessionScope::new("s-1");
    parent.run_in_session(&scope, "first").await.unwrap();
    parent.run_in_session(&scope, "second").await.unwrap();
    let kept = parent
        .active()
        .child_transcript(&scope, &AgentId::new("notes"), Some("plan"))
        .await
        .unwrap();
    let texts: Vec<_> = kept.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(texts, ["remember A", "noted", "remember B", "noted again"]);
    // Without a session the child keeps nothing.
    let loose = parent
        .active()
        .child_transcript(
            &SessionScope::new("other"),
            &AgentId::new("notes"),
            Some("plan"),
        )
        .await
        .unwrap();
    assert!(loose.is_empty());
}

#[tokio::test]
async fn a_childs_calls_are_recorded_in_the_callers_ledger_under_its_child_run_id() {
    let ledger = Arc::new(MemoryLedger::new());
    let child = Agent::builder("worker")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("status", json!({})),
            ChatResponse::text("fine"),
        ]))
        .tool(tool_named("status"))
        .build()
        .unwrap();
    let parent = Agent::builder("boss")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("worker", json!({"query": "check"})),
            ChatResponse::text("done"),
        ]))
        .tool(child.as_tool("worker", "Works."))
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let run = parent
        .run_with(
            RunRequest::new("go").with_run_id(RunId::new("r1")),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.final_text, "done");
    let parent_rows = ledger.rows(&RunId::new("r1")).await.unwrap();
    assert_eq!(parent_rows.len(), 1);
    assert_eq!(parent_rows[0].tool_name, "worker");
    let child_rows = ledger
        .rows(&child_run_id(&RunId::new("r1"), &CallId::new("p1")))
        .await
        .unwrap();
    assert_eq!(child_rows.len(), 1);
    assert_eq!(child_rows[0].tool_name, "status");
}

#[tokio::test]
async fn a_plain_harness_takes_an_agent_tool_and_delegates_through_it() {
    let child = Agent::builder("helper")
        .model(ScriptedModel::new([ChatResponse::text("helped")]))
        .build()
        .unwrap();
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("helper", json!({"query": "help me"})),
        ChatResponse::text("thanks"),
    ])))
    .tool(child.as_tool("helper", "Helps."))
    .build()
    .unwrap();
    assert_eq!(
        harness.tools().get("helper").unwrap().spec().replay,
        ToolReplay::Never
    );
    let (events, run) = drain(harness.start(RunRequest::new("go"))).await;
    let run = run.unwrap();
    assert_eq!(run.final_text, "thanks");
    assert!(
        run.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { content, .. } if content == "helped"))
    );
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Delegated { agent_id, depth: 1, .. } if agent_id.as_str() == "helper")));
}
