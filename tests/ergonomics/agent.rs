//! `Agent::builder(..).build()`, `agent.run`, `agent.stream` (friction 3).

use serde_json::json;
use tinyagents::prelude::*;

use crate::drain;

fn add() -> impl Tool {
    #[json_schema]
    struct Add {
        a: i64,
        b: i64,
    }
    FnTool::new("add", "Adds.", |args: Add| async move {
        anyhow::Ok(args.a + args.b)
    })
}

#[tokio::test]
async fn an_agent_runs_to_its_answer_in_one_call() {
    let agent = Agent::builder("calc")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("add", json!({"a": 2, "b": 3})),
            ChatResponse::text("5"),
        ]))
        .instructions("Add.")
        .tool(add())
        .build()
        .unwrap();
    let run = agent.run("2 + 3?").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "5");
    assert_eq!(run.budget.tool_calls, 1);
    // The tool's i64 answer reached the model as JSON text, and the
    // standing instruction leads the transcript.
    assert!(matches!(&run.messages[0], Message::System { content } if content == "Add."));
    assert!(
        run.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { content, .. } if content == "5"))
    );
}

#[tokio::test]
async fn a_stream_yields_every_event_in_order_then_the_result() {
    let agent = Agent::builder("calc")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("add", json!({"a": 1, "b": 1})),
            ChatResponse::text("2"),
        ]))
        .tool(add())
        .build()
        .unwrap();
    let (events, result) = drain(agent.stream("1 + 1?")).await;
    let run = result.unwrap();
    assert_eq!(run.final_text, "2");
    assert!(
        matches!(events.first(), Some(AgentEvent::RunStarted { agent_id: Some(id), .. }) if id.as_str() == "calc")
    );
    assert!(matches!(
        events.last(),
        Some(AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            ..
        })
    ));
    let started = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolStarted { .. }))
        .count();
    let ended = events.iter().filter(|e| e.is_tool_terminal()).count();
    assert_eq!((started, ended), (1, 1));
}

#[tokio::test]
async fn awaiting_a_stream_before_reading_it_cannot_deadlock_and_keeps_its_events() {
    // More events than the buffer holds, awaited first: the handle drives
    // the run and keeps the most recent events.
    let script: Vec<ChatResponse> = (0..6)
        .map(|_| ScriptedModel::tool_call("add", json!({"a": 1, "b": 1})))
        .chain([ChatResponse::text("done")])
        .collect();
    let agent = Agent::builder("calc")
        .model(ScriptedModel::new(script))
        .tool(add())
        .harness(|builder| builder.event_buffer(4))
        .build()
        .unwrap();
    let mut handle = agent.stream("go");
    let run = handle.wait().await.unwrap();
    assert_eq!(run.final_text, "done");
    let mut kept = Vec::new();
    while let Some(event) = handle.next_event().await {
        kept.push(event);
    }
    assert_eq!(kept.len(), 4);
    assert!(handle.dropped_events() > 0);
    assert!(matches!(kept.last(), Some(AgentEvent::RunCompleted { .. })));
}

#[tokio::test]
async fn a_failed_run_reports_its_error_through_the_handle_and_a_terminal_event() {
    let agent = Agent::builder("empty")
        .model(ScriptedModel::new([]))
        .build()
        .unwrap();
    let (events, result) = drain(agent.stream("hi")).await;
    let error = result.unwrap_err();
    assert!(error.to_string().contains("no response left"), "{error}");
    assert!(matches!(events.last(), Some(AgentEvent::RunFailed { .. })));
}
