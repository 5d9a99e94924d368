//! MCP tools at the seams of the call path: approval and resume, a nested
//! call, redaction with payload capture on, and a crash with the call in
//! flight. The server is `js/broken.mjs` in `normal` or `hang` mode, whose
//! log shows what reached it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::core::RunId;
use tinyagents::harness::ResumeOptions;
use tinyagents::ledger::{CallStatus, EffectLedger, MemoryLedger};
use tinyagents::middleware::{RedactionMiddleware, Redactor, ToolPolicyMiddleware};
use tinyagents::prelude::*;
use tinyagents_tests::{assert_one_terminal_per_start, call_answer, run_collecting};

use crate::support::broken;

fn log_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    (dir, path)
}

/// How many `tools/call` requests reached the server.
fn calls(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "call tools/call")
        .count()
}

async fn connect(
    mode: &str,
    log: &Path,
    server: impl FnOnce(RemoteServer) -> RemoteServer,
) -> McpClient {
    McpClient::connect(server(broken(mode, Some(log))))
        .await
        .unwrap()
}

fn echo_then(text: &str) -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_call("broken_echo", json!({ "text": text })),
        ChatResponse::text("done"),
    ]
}

/// Issue 15 ("the host can override them per tool") at the approval seam:
/// an MCP tool the host marks for approval waits, nothing reaches the
/// server, and once approved the call runs exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_tool_marked_for_approval_waits_then_runs_once_when_approved() {
    let (_dir, log) = log_file();
    let client = connect("normal", &log, |s| {
        s.override_tool("echo", |spec| spec.approval_required = true)
    })
    .await;
    let harness = AgentHarness::builder(ScriptedModel::new(echo_then("hi")))
        .tools(client.tools())
        .build()
        .unwrap();
    let (run, _) = run_collecting(&harness, RunRequest::new("go")).await;
    let mut run = run.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    assert_eq!(calls(&log), 0, "nothing is sent before the approval");
    let suspended = run.suspended.take().unwrap();
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    let resumed = harness
        .resume(
            suspended,
            &decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(
        call_answer(&resumed.messages, "p1"),
        Some(("hi".to_owned(), false))
    );
    assert_eq!(calls(&log), 1);
}

/// A local tool that nests a call of `broken_echo`.
fn nesting() -> impl Tool {
    FnTool::with_context(
        "relay",
        "Nests an echo.",
        |_: Value, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let answer = exec
                .call_tool("broken_echo", json!({ "text": "nested" }))
                .await?;
            anyhow::Ok(answer.content)
        },
    )
}

/// Issue 15 ("every MCP call goes through the one enforced path … nested
/// calls from other tools"): a nested MCP call is refused by the same
/// policy as a model-issued one (an unannotated tool is destructive), and
/// without it runs as a nested call of its parent.
#[tokio::test(flavor = "multi_thread")]
async fn a_nested_mcp_call_takes_the_same_path_as_a_model_issued_one() {
    let script = || {
        vec![
            ScriptedModel::tool_call("relay", json!({})),
            ChatResponse::text("done"),
        ]
    };
    let (_dir, log) = log_file();
    let client = connect("normal", &log, |s| s).await;
    let guarded = AgentHarness::builder(ScriptedModel::new(script()))
        .tools(client.tools())
        .tool(nesting())
        .limits(RunLimits::default().with_max_nested_depth(1))
        .middleware(Arc::new(
            ToolPolicyMiddleware::new().deny_side_effects(SideEffects::DESTRUCTIVE),
        ))
        .build()
        .unwrap();
    let (run, events) = run_collecting(&guarded, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_one_terminal_per_start(&events);
    let (answer, _) = call_answer(&run.messages, "p1").unwrap();
    assert!(answer.contains("destructive"), "{answer}");
    assert_eq!(
        calls(&log),
        0,
        "the refused nested call never reached the server"
    );

    let open = AgentHarness::builder(ScriptedModel::new(script()))
        .tools(client.tools())
        .tool(nesting())
        .limits(RunLimits::default().with_max_nested_depth(1))
        .build()
        .unwrap();
    let (run, events) = run_collecting(&open, RunRequest::new("go")).await;
    assert_eq!(
        call_answer(&run.unwrap().messages, "p1"),
        Some(("nested".to_owned(), false))
    );
    assert_one_terminal_per_start(&events);
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ToolCompleted { name, parent_call_id: Some(parent), .. }
            if name == "broken_echo" && parent.as_str() == "p1")));
    assert_eq!(calls(&log), 1);
}

/// Issue 15 ("… redaction"): what an MCP server sends back is redacted
/// before any event carries it, with payload capture on; the model reads
/// it redacted too.
#[tokio::test(flavor = "multi_thread")]
async fn what_an_mcp_server_returns_is_redacted_before_events_carry_it() {
    const SECRET: &str = "tenant-42-private-zebra";
    let (_dir, log) = log_file();
    let client = connect("normal", &log, |s| s).await;
    let harness = AgentHarness::builder(ScriptedModel::new(echo_then(&format!(
        "the key is {SECRET}"
    ))))
    .tools(client.tools())
    .middleware(Arc::new(RedactionMiddleware::with_redactor(
        Redactor::new().with_secret(SECRET),
    )))
    .payload_capture(PayloadCapture::all())
    .build()
    .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    let text = tinyagents_tests::events_text(&events);
    assert!(!text.contains(SECRET), "an event leaked the secret");
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::ToolCompleted { result: Some(r), .. } if r.contains("the key is"))),
        "capture on: the (redacted) result is in the event"
    );
    let (answer, _) = call_answer(&run.messages, "p1").unwrap();
    assert!(!answer.contains(SECRET), "{answer}");
    assert_eq!(calls(&log), 1);
}

/// Issue 15 (an unannotated tool is "never replayed (fail closed)") after a
/// crash: a call in flight when the process died is not sent again on
/// recovery, over a new connection; it is answered as in doubt and stays
/// listed for a person.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_call_in_flight_at_a_crash_is_never_sent_again() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let (_dir, log) = log_file();
    let client = connect("hang", &log, |s| s).await;
    let first = AgentHarness::builder(ScriptedModel::new(echo_then("pay")))
        .tools(client.tools())
        .ledger(Arc::clone(&ledger))
        .build()
        .unwrap();
    let events = EventSink::none();
    let run = first.run_with(
        RunRequest::new("go").with_run_id(RunId::from("crash")),
        &events,
    );
    tokio::select! {
        _ = run => panic!("the call hangs: the run cannot end"),
        () = async { while calls(&log) == 0 { tokio::time::sleep(Duration::from_millis(10)).await } } => {}
    }
    // The crash: the run and the connection are gone.
    drop(first);
    drop(client);

    let (_dir2, log2) = log_file();
    let client = connect("hang", &log2, |s| s).await;
    let second = AgentHarness::builder(ScriptedModel::new(vec![ChatResponse::text("told")]))
        .tools(client.tools())
        .ledger(Arc::clone(&ledger))
        .build()
        .unwrap();
    let recovered = tokio::time::timeout(
        Duration::from_secs(30),
        second.recover(
            &RunId::from("crash"),
            ResumeOptions::default(),
            &EventSink::none(),
        ),
    )
    .await
    .expect("recovery does not wait on the server")
    .unwrap();
    assert_eq!(recovered.status, RunStatus::Completed);
    let (answer, is_error) = call_answer(&recovered.messages, "p1").unwrap();
    assert!(is_error && answer.contains("unknown"), "{answer}");
    assert_eq!(calls(&log2), 0, "not sent again");
    let row = ledger
        .get(&RunId::from("crash"), &tinyagents::core::CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, CallStatus::Interrupted);
    assert!(
        ledger
            .in_doubt()
            .await
            .unwrap()
            .iter()
            .any(|d| d.row.call_id.as_str() == "p1")
    );
}

/// The delegated origin, with a nested call inside it: a coordinator asks
/// a specialist agent (as a tool), whose tool nests a call of the MCP tool.
/// The MCP call is refused inside the delegated run by the specialist's
/// policy (nothing reaches the server); without the policy it runs once,
/// its events reaching the coordinator's stream as `Delegated`.
#[tokio::test(flavor = "multi_thread")]
async fn a_delegated_agents_nested_mcp_call_takes_the_same_path() {
    for guarded in [true, false] {
        let (_dir, log) = log_file();
        let client = connect("normal", &log, |s| s).await;
        let mut specialist = Agent::builder("specialist")
            .model(ScriptedModel::new(vec![
                ScriptedModel::tool_call("relay", json!({})),
                ChatResponse::text("relayed"),
            ]))
            .instructions("You relay.")
            .tools(client.tools())
            .tool(nesting())
            .max_nested_depth(1);
        if guarded {
            specialist = specialist.middleware(Arc::new(
                ToolPolicyMiddleware::new().deny_side_effects(SideEffects::DESTRUCTIVE),
            ));
        }
        let specialist = specialist.build().unwrap();
        let coordinator = Agent::builder("coordinator")
            .model(ScriptedModel::new(vec![
                ScriptedModel::tool_call("specialist", json!({ "query": "relay it" })),
                ChatResponse::text("done"),
            ]))
            .instructions("You delegate.")
            .tool(specialist.as_tool("specialist", "Relays."))
            .build()
            .unwrap();
        let (events, run) = {
            let (sink, collected) = tinyagents_tests::collector();
            let run = coordinator.run_with(RunRequest::new("go"), &sink).await;
            drop(sink);
            (collected.await.unwrap(), run.unwrap())
        };
        assert_eq!(run.status, RunStatus::Completed);
        let delegated_echo = |completed: bool| {
            events.iter().any(|e| match e {
                AgentEvent::Delegated { event, .. } => match event.as_ref() {
                    AgentEvent::ToolCompleted {
                        name,
                        parent_call_id: Some(_),
                        ..
                    } => completed && name == "broken_echo",
                    AgentEvent::ToolFailed {
                        name,
                        parent_call_id: Some(_),
                        error,
                        ..
                    } => !completed && name == "broken_echo" && error.contains("destructive"),
                    _ => false,
                },
                _ => false,
            })
        };
        if guarded {
            assert!(
                delegated_echo(false),
                "the nested MCP call was refused in the delegated run"
            );
            assert_eq!(calls(&log), 0);
        } else {
            assert!(
                delegated_echo(true),
                "the nested MCP call ran in the delegated run"
            );
            assert_eq!(calls(&log), 1);
        }
    }
}
