//! Issue 31 (4): a served call that needs a person's approval, put to the
//! MCP client by elicitation: under the official TypeScript SDK's client
//! (`js/elicit.mjs`, over Streamable HTTP) and under a raw JSON-RPC client
//! of our own (newline-delimited, over an in-memory stream) that answers
//! late, twice and out of turn. And a served call's progress with its
//! `total`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::core::{CancellationToken, args_hash};
use tinyagents::mcp::{McpServer, RUN_ID_META};
use tinyagents::middleware::ToolPolicyMiddleware;
use tinyagents::prelude::*;
use tinyagents_tests::CountingModel;
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

use crate::support::sdk_client_js;

/// `js/elicit.mjs`, after checking the SDK is the pinned one.
fn elicit_js() -> PathBuf {
    sdk_client_js().with_file_name("elicit.mjs")
}

/// A tool that counts its runs.
fn counted(
    name: &str,
    runs: &Arc<AtomicUsize>,
    spec: fn(ToolSpec) -> ToolSpec,
) -> impl Tool + use<> {
    let runs = Arc::clone(runs);
    FnTool::new(name, "Counts its runs.", move |_: Value| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            anyhow::Ok("refunded")
        }
    })
    .map_spec(spec)
}

/// A server of one tool, `refund`, that needs approval, counting its runs.
fn refund_desk(runs: &Arc<AtomicUsize>) -> McpServer {
    McpServer::builder("desk")
        .tool(counted("refund", runs, ToolSpec::approval_required))
        .build()
        .unwrap()
}

/// Serves `server` over Streamable HTTP on loopback, runs the SDK client
/// with `plan` against it, and returns the `call` steps it printed.
async fn sdk_plan(server: &McpServer, plan: Value) -> Vec<Value> {
    let http = server.spawn_http(([127, 0, 0, 1], 0).into()).await.unwrap();
    let url = http.url();
    let script = elicit_js();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .arg(url)
            .arg(plan.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("node runs the SDK client")
    })
    .await
    .unwrap();
    http.shutdown().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK client failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(steps.iter().any(|s| s["step"] == "done"), "{stdout}");
    steps.into_iter().filter(|s| s["step"] == "call").collect()
}

fn text(call: &Value) -> String {
    call["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Issue 31: "a served agent's approval answered by an MCP client (the
/// TypeScript SDK client supports elicitation) runs the call once". The
/// served agent needs approval by the server's policy; the client is
/// asked once, with a form of `approve` and `reason`, naming the tool,
/// the policy, the run, the call and the arguments' hash (not the
/// arguments: the server captures no payloads); it approves, and the
/// agent runs once (its tool ran once) and its answer is the result.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_answered_by_the_typescript_client_runs_the_served_agent_once() {
    let refunds = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder("billing")
        .model(ScriptedModel::new(vec![
            ScriptedModel::tool_call("refund", json!({"invoice": "inv-7"})),
            ChatResponse::text("Refunded inv-7."),
        ]))
        .instructions("You handle billing.")
        .tool(counted("refund", &refunds, |s| s))
        .build()
        .unwrap();
    let server = McpServer::builder("desk")
        .agent(agent.as_tool("billing", "Billing questions."))
        .configure(|harness| {
            harness.middleware(Arc::new(
                ToolPolicyMiddleware::new().require_approval("billing"),
            ))
        })
        .build()
        .unwrap();
    let calls = sdk_plan(
        &server,
        json!({"calls": [{"tool": "billing", "arguments": {"query": "refund inv-7"}, "answer": "approve"}]}),
    )
    .await;
    let call = &calls[0];
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(text(call), "Refunded inv-7.");
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "the agent ran once");

    let asked = call["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "asked once: {call}");
    let asked = &asked[0];
    let run_id = call["meta"][RUN_ID_META].as_str().unwrap();
    let hash = args_hash(&json!({"query": "refund inv-7"}));
    let binding = &asked["meta"]["tinyagents/approval"];
    assert_eq!(binding["run_id"], run_id);
    assert_eq!(binding["tool"], "billing");
    assert_eq!(binding["args_sha256"], hash);
    let call_id = binding["call_id"].as_str().unwrap();
    let message = asked["message"].as_str().unwrap();
    for part in ["'billing'", run_id, call_id, hash.as_str()] {
        assert!(message.contains(part), "{part} missing from: {message}");
    }
    assert!(
        message.to_lowercase().contains("polic"),
        "the reason names the policy: {message}"
    );
    assert!(
        !message.contains("inv-7"),
        "no payload capture, no arguments: {message}"
    );
    let schema = &asked["requestedSchema"];
    assert_eq!(schema["properties"]["approve"]["type"], "boolean");
    assert_eq!(schema["properties"]["reason"]["type"], "string");
    assert_eq!(schema["required"], json!(["approve"]));
}

/// The arguments are shown to the person only when the server's payload
/// capture would show them (and redacted as its events are).
#[tokio::test(flavor = "multi_thread")]
async fn the_approval_request_shows_the_arguments_only_under_payload_capture() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = McpServer::builder("desk")
        .tool(counted("refund", &runs, ToolSpec::approval_required))
        .configure(|harness| harness.payload_capture(PayloadCapture::all()))
        .build()
        .unwrap();
    let calls = sdk_plan(
        &server,
        json!({"calls": [{"tool": "refund", "arguments": {"invoice": "inv-9"}, "answer": "approve"}]}),
    )
    .await;
    let message = calls[0]["elicitations"][0]["message"].as_str().unwrap();
    assert!(message.contains(r#""invoice":"inv-9""#), "{message}");
    assert_eq!(text(&calls[0]), "refunded");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Issue 31: "… a declined one never": declined, dismissed (cancel) and
/// accepted with `approve: false` each deny the call, which never runs,
/// and the result says it was denied (with the person's reason).
#[tokio::test(flavor = "multi_thread")]
async fn a_declined_approval_never_runs_the_served_call_and_says_it_was_denied() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = refund_desk(&runs);
    let calls = sdk_plan(
        &server,
        json!({"calls": [
            {"tool": "refund", "answer": "decline"},
            {"tool": "refund", "answer": "cancel"},
            {"tool": "refund", "answer": "deny"},
        ]}),
    )
    .await;
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(call["isError"], true, "{call}");
        assert!(text(call).contains("denied"), "{call}");
        assert_eq!(call["elicitations"].as_array().unwrap().len(), 1, "{call}");
    }
    assert!(text(&calls[0]).contains("declined"), "{}", text(&calls[0]));
    assert!(text(&calls[2]).contains("not today"), "{}", text(&calls[2]));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a denied call never runs");
}

/// Issue 31: "a client without elicitation keeps today's refusal".
#[tokio::test(flavor = "multi_thread")]
async fn a_client_without_elicitation_keeps_the_refusal() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = refund_desk(&runs);
    let calls = sdk_plan(
        &server,
        json!({"elicitation": false, "calls": [{"tool": "refund", "answer": "approve"}]}),
    )
    .await;
    let call = &calls[0];
    assert_eq!(call["isError"], true);
    assert!(text(call).contains("requires approval"), "{call}");
    assert!(text(call).contains("cannot be deferred"), "{call}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// Issue 31: "a replayed answer is refused", under the SDK's client: an
/// approval sent twice under its request id runs the call once; replayed
/// while the next call waits, it does not answer that call (which the
/// person then declines); replayed after everything, it runs nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_approval_from_the_typescript_client_runs_nothing_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = refund_desk(&runs);
    let calls = sdk_plan(
        &server,
        json!({
            "calls": [
                {"tool": "refund", "answer": "approve", "replay": "twice"},
                {"tool": "refund", "answer": "decline", "replay": "previous"},
            ],
            "replayAfter": true,
        }),
    )
    .await;
    assert_eq!(calls[0]["isError"], false, "{}", calls[0]);
    assert_eq!(text(&calls[0]), "refunded");
    assert_eq!(calls[1]["isError"], true, "{}", calls[1]);
    assert!(text(&calls[1]).contains("declined"), "{}", text(&calls[1]));
    let first = &calls[0]["elicitations"][0]["id"];
    let second = &calls[1]["elicitations"][0]["id"];
    assert_ne!(first, second, "each question has an id of its own");
    // The replays after the calls reached the server before the client
    // closed; give them a moment to have done anything they could.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "approved once, run once");
}

/// Issue 31 (progress): "progress notifications carry progress/total where
/// the harness knows them": a served tool counting its steps gives
/// `progress / total` as its fraction, a message without a fraction has no
/// total, and `progress` increases throughout; a served agent's work has
/// no total.
#[tokio::test(flavor = "multi_thread")]
async fn progress_notifications_carry_a_total_when_the_served_tool_knows_it() {
    let steps = FnTool::with_context(
        "steps",
        "Counts four steps.",
        |_: Value, ctx: ToolRunContext| async move {
            ctx.report_progress(Some(0.25), "step 1 of 4");
            tokio::time::sleep(Duration::from_millis(20)).await;
            ctx.report_progress(Some(0.5), "step 2 of 4");
            tokio::time::sleep(Duration::from_millis(20)).await;
            ctx.report_progress(None, "thinking it over");
            tokio::time::sleep(Duration::from_millis(20)).await;
            ctx.report_progress(Some(1.0), "step 4 of 4");
            // The last notification reaches the client before the result.
            tokio::time::sleep(Duration::from_millis(100)).await;
            anyhow::Ok("four steps")
        },
    )
    .map_spec(ToolSpec::read_only);
    let assistant = Agent::builder("assistant")
        .model(CountingModel)
        .instructions("You answer.")
        .build()
        .unwrap();
    let server = McpServer::builder("desk")
        .tool(steps)
        .agent(assistant.as_tool("assistant", "Answers."))
        .build()
        .unwrap();
    let calls = sdk_plan(
        &server,
        json!({"calls": [
            {"tool": "steps", "answer": "approve", "progress": true},
            {"tool": "assistant", "arguments": {"query": "hi"}, "answer": "approve", "progress": true},
        ]}),
    )
    .await;
    assert_eq!(text(&calls[0]), "four steps");
    let progress = calls[0]["progress"].as_array().unwrap();
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(values, [1.0, 2.0, 3.0, 4.0], "{progress:?}");
    let totals: Vec<Option<f64>> = progress.iter().map(|p| p["total"].as_f64()).collect();
    assert_eq!(
        totals,
        [Some(4.0), Some(4.0), None, Some(4.0)],
        "{progress:?}"
    );
    assert_eq!(progress[1]["message"], "step 2 of 4 (50%)");

    assert_eq!(text(&calls[1]), "answer 1 to: hi");
    let agent = calls[1]["progress"].as_array().unwrap();
    assert!(!agent.is_empty(), "{}", calls[1]);
    assert!(
        agent
            .iter()
            .all(|p| p.get("total").is_none_or(Value::is_null)),
        "{agent:?}"
    );
    let values: Vec<f64> = agent
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

/// A client of raw newline-delimited JSON-RPC on an in-memory stream:
/// it sends what a test writes and keeps what it has read.
struct RawClient {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
}

impl RawClient {
    /// Serves `server` to a raw client that declared elicitation.
    async fn connect(server: &McpServer) -> Self {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server_io);
        let served = server.clone();
        tokio::spawn(async move { served.serve_io(read, write, CancellationToken::new()).await });
        let (read, write) = tokio::io::split(client_io);
        let mut client = Self {
            lines: BufReader::new(read).lines(),
            write,
        };
        client
            .send(
                json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "raw", "version": "0"},
                }}),
            )
            .await;
        client.response("init").await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.flush().await.unwrap();
    }

    /// The next message from the server (within 10 s).
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("the server said something within 10 s")
            .unwrap()
            .expect("the server is still there");
        serde_json::from_str(&line).unwrap()
    }

    /// Reads until the response to our request `id`, skipping the rest.
    async fn response(&mut self, id: &str) -> Value {
        loop {
            let message = self.next().await;
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Reads until the server's next `method` message (request or
    /// notification), skipping the rest.
    async fn until(&mut self, method: &str) -> Value {
        loop {
            let message = self.next().await;
            if message["method"] == method {
                return message;
            }
        }
    }

    /// Calls `refund` as request `id` and returns the server's question.
    async fn call_and_wait_for_question(&mut self, id: &str) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "refund", "arguments": {}}}))
            .await;
        let question = self.until("elicitation/create").await;
        assert_eq!(question["params"]["mode"], "form", "{question}");
        question["id"].clone()
    }

    async fn answer(&mut self, question: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": question, "result": result}))
            .await;
    }
}

fn approve() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

fn result_text(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Issue 31: "a replayed answer is refused", on the wire: an approval sent
/// twice under its request id runs the call once; sent again after the
/// call ended, and again while the next call waits (before the person
/// declines that one), it answers nothing; an approval that comes after
/// the server stopped waiting (its request timeout, a denial said in the
/// result) runs nothing either.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_or_late_answer_on_the_wire_approves_nothing() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = McpServer::builder("desk")
        .tool(counted("refund", &runs, ToolSpec::approval_required))
        .request_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mut client = RawClient::connect(&server).await;

    // Answered twice at once: run once.
    let first = client.call_and_wait_for_question("c1").await;
    client.answer(&first, approve()).await;
    client.answer(&first, approve()).await;
    let done = client.response("c1").await;
    assert_eq!(result_text(&done), "refunded", "{done}");
    assert_eq!(done["result"]["isError"], false);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Replayed after the call ended, and while the next call waits: it
    // answers nothing; the person's decline decides that call.
    client.answer(&first, approve()).await;
    let second = client.call_and_wait_for_question("c2").await;
    assert_ne!(second, first);
    client.answer(&first, approve()).await;
    client.answer(&second, json!({"action": "decline"})).await;
    let declined = client.response("c2").await;
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    assert!(result_text(&declined).contains("declined"), "{declined}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // No answer in time is a denial, said in the result; the answer that
    // comes after it (and its replay) approves nothing.
    let third = client.call_and_wait_for_question("c3").await;
    let timed_out = client.response("c3").await;
    assert_eq!(timed_out["result"]["isError"], true, "{timed_out}");
    let text = result_text(&timed_out);
    assert!(
        text.contains("denied") && text.contains("no answer within"),
        "{text}"
    );
    client.answer(&third, approve()).await;
    client.answer(&third, approve()).await;

    // The session still works, and nothing ran meanwhile.
    let fourth = client.call_and_wait_for_question("c4").await;
    client
        .answer(
            &fourth,
            json!({"action": "accept", "content": {"approve": false}}),
        )
        .await;
    let denied = client.response("c4").await;
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one approval, one run");
}

/// The client's words beyond `approve` and `reason` are not read: an
/// answer that claims another call, tool or hash, or says `approve` as a
/// string, does not approve anything; the decision is made from the
/// waiting call itself.
#[tokio::test(flavor = "multi_thread")]
async fn only_a_boolean_approve_approves_and_the_answer_cannot_rebind_the_call() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = refund_desk(&runs);
    let mut client = RawClient::connect(&server).await;

    let question = client.call_and_wait_for_question("c1").await;
    client
        .answer(
            &question,
            json!({"action": "accept", "content": {"approve": "true"}}),
        )
        .await;
    let denied = client.response("c1").await;
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let question = client.call_and_wait_for_question("c2").await;
    client
        .answer(
            &question,
            json!({"action": "accept", "content": {
                "approve": true, "tool": "other", "call_id": "x", "args_sha256": "00",
            }}),
        )
        .await;
    let approved = client.response("c2").await;
    assert_eq!(result_text(&approved), "refunded", "{approved}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A call cancelled while its client is being asked withdraws the
/// question (`notifications/cancelled` for it); the approval that arrives
/// after that runs nothing.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_call_that_waits_for_approval_withdraws_the_question() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = refund_desk(&runs);
    let mut client = RawClient::connect(&server).await;

    let question = client.call_and_wait_for_question("c1").await;
    client
        .send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "c1", "reason": "changed my mind"}}),
        )
        .await;
    let withdrawn = client.until("notifications/cancelled").await;
    assert_eq!(withdrawn["params"]["requestId"], question, "{withdrawn}");
    client.answer(&question, approve()).await;

    // The session goes on; the late approval ran nothing.
    let next = client.call_and_wait_for_question("c2").await;
    client.answer(&next, json!({"action": "decline"})).await;
    let declined = client.response("c2").await;
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// With the server's effect ledger, the approved call is resumed against
/// the run's checkpoint and settles once: one row, completed.
#[tokio::test(flavor = "multi_thread")]
async fn with_a_ledger_an_approved_served_call_settles_once() {
    use tinyagents::ledger::CallStatus;
    let runs = Arc::new(AtomicUsize::new(0));
    let ledger = Arc::new(MemoryLedger::new());
    let rows = Arc::clone(&ledger);
    let server = McpServer::builder("desk")
        .tool(counted("refund", &runs, ToolSpec::approval_required))
        .configure(move |harness| harness.ledger(ledger))
        .build()
        .unwrap();
    let mut client = RawClient::connect(&server).await;
    let question = client.call_and_wait_for_question("c1").await;
    client.answer(&question, approve()).await;
    client.answer(&question, approve()).await;
    let done = client.response("c1").await;
    assert_eq!(result_text(&done), "refunded", "{done}");
    let run = done["result"]["_meta"][RUN_ID_META].as_str().unwrap();
    let settled = rows.rows(&RunId::new(run)).await.unwrap();
    assert_eq!(settled.len(), 1, "{settled:?}");
    assert_eq!(settled[0].tool_name, "refund");
    assert_eq!(settled[0].status, CallStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
