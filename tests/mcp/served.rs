//! Our server under clients: the official TypeScript SDK's client over
//! stdio and Streamable HTTP against the `mcp-test-server` binary, and our
//! own client in process for the server's governance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::core::{CallId, CancellationToken};
use tinyagents::ledger::CallStatus;
use tinyagents::mcp::{McpClient, McpServer, RUN_ID_META, RemoteServer};
use tinyagents::middleware::ToolPolicyMiddleware;
use tinyagents::prelude::*;
use tinyagents_tests::{CountingModel, run_collecting};

use crate::support::{Reaped, sdk_client_js, test_server_bin};

/// The lines `js/client.mjs` printed, by step.
fn scenario(lines: &str) -> std::collections::HashMap<String, Value> {
    lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|step| (step["step"].as_str().unwrap_or_default().to_owned(), step))
        .collect()
}

/// Runs the TypeScript SDK client's scenario with `args` and checks what
/// it saw: the tools and their annotations, the agent's answer, a
/// conversation that continues, progress, and a cancellation that reached
/// the served tool (`marker`).
fn check_sdk_scenario(args: &[&str], marker: &Path) {
    let output = Command::new("node")
        .arg(sdk_client_js())
        .args(args)
        .env("TINYAGENTS_MCP_MARKER", marker)
        .stdin(Stdio::null())
        .output()
        .expect("node runs the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK client failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let steps = scenario(&stdout);
    assert!(steps.contains_key("done"), "{stdout}");

    let tools = steps["tools"]["tools"].as_array().unwrap();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {stdout}"))
    };
    let assistant = tool("assistant");
    assert_eq!(assistant["inputSchema"]["required"], json!(["query"]));
    assert!(assistant["inputSchema"]["properties"]["conversation"].is_object());
    assert_eq!(assistant["annotations"]["readOnlyHint"], false);
    assert_eq!(tool("slow_steps")["annotations"]["readOnlyHint"], true);

    assert_eq!(steps["answer"]["isError"], false);
    assert_eq!(
        steps["answer"]["content"][0]["text"],
        "answer 1 to: What is 2+2?"
    );
    assert_eq!(steps["conversation"]["first"], "answer 1 to: first");
    assert_eq!(steps["conversation"]["second"], "answer 2 to: second");

    let progress = steps["progress"]["progress"].as_array().unwrap();
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(values, [1.0, 2.0, 3.0], "{stdout}");
    assert_eq!(progress[2]["message"], "step 3 of 3 (100%)");
    assert_eq!(steps["progress"]["content"][0]["text"], "counted 3 steps");

    let cancel = &steps["cancel"];
    assert!(
        cancel["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled"),
        "{cancel}"
    );
    assert!(cancel["progressBeforeCancel"].as_u64().unwrap() >= 1);
    // The served run saw the cancellation: its tool stopped early.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(marker)
        .unwrap_or_default()
        .contains("cancelled")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the served tool was never cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 15: "the TypeScript SDK client calls a tinyagents agent over
/// stdio … and gets its answer, progress and cancellation".
#[test]
fn the_typescript_sdk_client_calls_an_agent_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    check_sdk_scenario(&["stdio", test_server_bin(), "stdio"], &marker);
}

/// Issue 15: the same over Streamable HTTP.
#[test]
fn the_typescript_sdk_client_calls_an_agent_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let mut server = Reaped(
        Command::new(test_server_bin())
            .arg("http")
            .env("TINYAGENTS_MCP_MARKER", &marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("listening ").unwrap().to_owned();
    check_sdk_scenario(&["http", &url], &marker);
}

/// Serves `server` to a client of ours over an in-memory stream.
pub(crate) async fn connected(server: &McpServer) -> McpClient {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    let served = server.clone();
    tokio::spawn(async move { served.serve_io(read, write, CancellationToken::new()).await });
    let (read, write) = tokio::io::split(client_io);
    McpClient::connect_stream(RemoteServer::stream("served"), read, write)
        .await
        .unwrap()
}

/// A server of one agent, `assistant`, on [`CountingModel`].
fn counting_desk() -> McpServer {
    let agent = Agent::builder("assistant")
        .model(CountingModel)
        .instructions("You answer.")
        .build()
        .unwrap();
    McpServer::builder("desk")
        .agent(agent.as_tool("assistant", "Answers."))
        .build()
        .unwrap()
}

/// A tool that counts its calls, with its spec changed by `spec`.
fn counted(
    name: &str,
    calls: &Arc<AtomicUsize>,
    spec: fn(ToolSpec) -> ToolSpec,
) -> impl Tool + use<> {
    let calls = Arc::clone(calls);
    FnTool::new(name, "Counts its calls.", move |_: Value| {
        let calls = Arc::clone(&calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            anyhow::Ok("done")
        }
    })
    .map_spec(spec)
}

async fn call(client: &McpClient, name: &str, args: Value) -> ToolResult {
    let tool = client
        .tools()
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap();
    tool.execute_with_context(args, ToolCallOptions::default(), None)
        .await
        .unwrap()
}

/// Issue 15: "a call that needs approval answers with a clear error result
/// (it cannot be deferred across MCP), exactly like a nested call".
#[tokio::test(flavor = "multi_thread")]
async fn a_served_call_that_needs_approval_is_refused_with_a_clear_error_and_never_runs() {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = McpServer::builder("desk")
        .tool(counted("refund", &calls, ToolSpec::approval_required))
        .build()
        .unwrap();
    let client = connected(&server).await;
    let result = call(&client, "served_refund", json!({})).await;
    assert!(result.is_error);
    assert!(
        result.content.contains("requires approval"),
        "{}",
        result.content
    );
    assert!(
        result.content.contains("cannot be deferred"),
        "{}",
        result.content
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// Issue 15: each call runs "with the server's own RunLimits and ledger":
/// its policy refuses, its ledger keeps the row of each call it ran.
#[tokio::test(flavor = "multi_thread")]
async fn the_servers_policy_refuses_and_its_ledger_records_each_call() {
    let paid = Arc::new(AtomicUsize::new(0));
    let looked = Arc::new(AtomicUsize::new(0));
    let ledger = Arc::new(MemoryLedger::new());
    let rows = Arc::clone(&ledger);
    let server = McpServer::builder("desk")
        .tool(counted("pay", &paid, |s| {
            s.side_effects(SideEffects::PAYMENT)
        }))
        .tool(counted("lookup", &looked, ToolSpec::read_only))
        .configure(move |harness| {
            harness
                .middleware(Arc::new(
                    ToolPolicyMiddleware::new().deny_side_effects(SideEffects::PAYMENT),
                ))
                .ledger(ledger)
        })
        .build()
        .unwrap();
    let client = connected(&server).await;

    let looked_up = call(&client, "served_lookup", json!({})).await;
    assert!(!looked_up.is_error, "{}", looked_up.content);
    let run = looked_up.metadata.as_ref().unwrap()["mcp_meta"][RUN_ID_META]
        .as_str()
        .unwrap()
        .to_owned();
    let settled = rows.rows(&RunId::new(&run)).await.unwrap();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].tool_name, "lookup");
    assert_eq!(settled[0].status, CallStatus::Completed);

    let refused = call(&client, "served_pay", json!({})).await;
    assert!(refused.is_error);
    assert!(refused.content.contains("payment"), "{}", refused.content);
    assert_eq!(paid.load(Ordering::SeqCst), 0);
    assert_eq!(looked.load(Ordering::SeqCst), 1);
    let run = refused.metadata.as_ref().unwrap()["mcp_meta"][RUN_ID_META]
        .as_str()
        .unwrap()
        .to_owned();
    let rows = rows.rows(&RunId::new(&run)).await.unwrap();
    assert!(
        rows.iter().all(|row| row.status != CallStatus::Completed),
        "{rows:?}"
    );
}

/// Issue 15 / AT-*: a served agent runs in the delegated shape: the tools
/// that would wait for a person are not offered to it.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_agent_is_not_offered_its_tools_that_wait_for_a_person() {
    let refunds = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(
        ScriptedModel::new(vec![
            ScriptedModel::tool_call("refund", json!({})),
            ChatResponse::text("I cannot refund."),
        ])
        .recording(),
    );
    let agent = Agent::builder("billing")
        .model(Arc::clone(&model))
        .instructions("You handle billing.")
        .tool(counted("refund", &refunds, ToolSpec::approval_required))
        .build()
        .unwrap();
    let server = McpServer::builder("desk")
        .agent(agent.as_tool("billing", "Billing questions."))
        .build()
        .unwrap();
    let client = connected(&server).await;
    let answer = call(&client, "served_billing", json!({"query": "refund inv-7"})).await;
    assert!(!answer.is_error, "{}", answer.content);
    assert_eq!(answer.content, "I cannot refund.");
    assert_eq!(refunds.load(Ordering::SeqCst), 0);
    let offered = &model.requests()[0].tools;
    assert!(offered.iter().all(|t| t.name != "refund"), "{offered:?}");
}

/// Issue 15: "the MCP session id plus `conversation` picks the child
/// session": two connections are two sessions, each its own conversation.
#[tokio::test(flavor = "multi_thread")]
async fn separate_mcp_sessions_keep_separate_conversations() {
    let server = counting_desk();
    let (one, two) = (connected(&server).await, connected(&server).await);
    for (client, query) in [(&one, "a"), (&two, "b"), (&one, "c"), (&two, "d")] {
        let answer = call(client, "served_assistant", json!({"query": query})).await;
        let turn = if query < "c" { 1 } else { 2 };
        assert_eq!(answer.content, format!("answer {turn} to: {query}"));
    }
    let other = call(
        &one,
        "served_assistant",
        json!({"query": "e", "conversation": "side"}),
    )
    .await;
    assert_eq!(other.content, "answer 1 to: e");
}

/// Issue 15: "the run's progress is sent as progress notifications": a
/// served agent's model calls reach a client's run as progress events.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_agents_work_reaches_a_client_run_as_progress() {
    let server = counting_desk();
    let client = connected(&server).await;
    let harness = AgentHarness::builder(ScriptedModel::new(vec![
        ScriptedModel::tool_call("served_assistant", json!({"query": "hi"})),
        ChatResponse::text("done"),
    ]))
    .tools(client.tools())
    .build()
    .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        tinyagents_tests::call_answer(&run.messages, "p1")
            .unwrap()
            .0,
        "answer 1 to: hi"
    );
    let progress: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id, message, ..
            } if *call_id == CallId::new("p1") => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        progress.contains(&"assistant: thinking (model call 1)"),
        "{progress:?}"
    );
}

/// Issue 15: "MCP cancellation cancels the run": a client run cancelled
/// mid-call cancels the served run, whose tool sees it.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_client_run_cancels_the_served_run() {
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Arc::new(parking_lot_free::Slot::new(started_tx));
    let (seen_tx, seen) = tokio::sync::oneshot::channel::<()>();
    let seen_tx = Arc::new(parking_lot_free::Slot::new(seen_tx));
    let wait = FnTool::with_context(
        "wait",
        "Waits until cancelled.",
        move |_: Value, ctx: ToolRunContext| {
            let (started_tx, seen_tx) = (Arc::clone(&started_tx), Arc::clone(&seen_tx));
            async move {
                started_tx.fire();
                ctx.cancellation().cancelled().await;
                seen_tx.fire();
                anyhow::Ok("cancelled")
            }
        },
    );
    let server = McpServer::builder("desk").tool(wait).build().unwrap();
    let client = connected(&server).await;
    let harness = AgentHarness::builder(ScriptedModel::new(vec![
        ScriptedModel::tool_call("served_wait", json!({})),
        ChatResponse::text("done"),
    ]))
    .tools(client.tools())
    .build()
    .unwrap();
    let mut handle = harness.start(RunRequest::new("go"));
    let cancel = handle.cancellation().clone();
    let driven = tokio::spawn(async move {
        let _ = started.await;
        cancel.cancel();
    });
    let run = handle.wait().await.unwrap();
    driven.await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .expect("the served tool saw the cancellation")
        .unwrap();
}

/// A one-shot sender any clone can fire once.
mod parking_lot_free {
    pub(crate) struct Slot(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

    impl Slot {
        pub(crate) fn new(sender: tokio::sync::oneshot::Sender<()>) -> Self {
            Self(std::sync::Mutex::new(Some(sender)))
        }

        pub(crate) fn fire(&self) {
            if let Some(sender) = self.0.lock().unwrap().take() {
                let _ = sender.send(());
            }
        }
    }
}

/// Issue 15: an unknown tool is a protocol error naming what the server
/// offers.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_tool_is_refused_naming_the_offered_tools() {
    use tinyagents::mcp::rmcp::ServiceExt;
    use tinyagents::mcp::rmcp::model::CallToolRequestParams;
    let calls = Arc::new(AtomicUsize::new(0));
    let server = McpServer::builder("desk")
        .tool(counted("lookup", &calls, |s| s))
        .build()
        .unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(server_io);
    tokio::spawn(async move { server.serve_io(read, write, CancellationToken::new()).await });
    let raw = ().serve(client_io).await.unwrap();
    let error = raw
        .peer()
        .call_tool(CallToolRequestParams::new("nope"))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("unknown tool 'nope'") && text.contains("lookup"),
        "{text}"
    );
}

/// Issue 15 (sessions): a session's conversations are the client's while
/// it is connected; when the MCP session ends no client can name it again,
/// and the server deletes them from the agent's store.
#[tokio::test(flavor = "multi_thread")]
async fn a_finished_mcp_session_leaves_no_conversations_behind() {
    use tinyagents::orchestrator::InMemorySessionStore;
    let store = Arc::new(InMemorySessionStore::new());
    let agent = Agent::builder("assistant")
        .model(CountingModel)
        .instructions("You answer.")
        .sessions(store.clone())
        .build()
        .unwrap();
    let server = McpServer::builder("desk")
        .agent(agent.as_tool("assistant", "Answers."))
        .build()
        .unwrap();
    let client = connected(&server).await;
    call(&client, "served_assistant", json!({"query": "a"})).await;
    let second = call(
        &client,
        "served_assistant",
        json!({"query": "b", "conversation": "x"}),
    )
    .await;
    assert_eq!(second.content, "answer 1 to: b");
    assert_eq!(store.len(), 2, "one child session per conversation");
    client.close().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} sessions remain",
            store.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 15 (bounded everywhere): a server runs at most
/// `max_concurrent_calls` calls at once, whatever its clients send.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_runs_no_more_calls_at_once_than_its_cap() {
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (now, peak) = (Arc::clone(&running), Arc::clone(&most));
    let slow = FnTool::new("slow", "Takes a while.", move |_: Value| {
        let (now, peak) = (Arc::clone(&now), Arc::clone(&peak));
        async move {
            let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(at_once, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            anyhow::Ok("done")
        }
    })
    .map_spec(ToolSpec::read_only);
    let server = McpServer::builder("desk")
        .tool(slow)
        .max_concurrent_calls(2)
        .build()
        .unwrap();
    let (one, two) = (connected(&server).await, connected(&server).await);
    let calls: Vec<_> = (0..8)
        .map(|i| {
            call(
                if i % 2 == 0 { &one } else { &two },
                "served_slow",
                json!({}),
            )
        })
        .collect();
    let results = tinyagents_tests::join_all(calls).await;
    assert!(results.iter().all(|r| !r.is_error && r.content == "done"));
    assert_eq!(most.load(Ordering::SeqCst), 2, "two at once, never more");
}
