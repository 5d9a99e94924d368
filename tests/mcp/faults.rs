//! Bad peers under our MCP client (`js/broken.mjs`): a server that crashes,
//! hangs, writes junk or oversized lines, offers a schema that does not
//! compile, changes its tool list, pages it, or is not there at all. Each
//! gives a clear error on that call or at connect time, the run goes on,
//! and the child process is reaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinyagents::mcp::McpError;
use tinyagents::prelude::*;
use tinyagents_tests::{assert_one_terminal_per_start, call_answer, call_failure, run_collecting};

use crate::support::{broken, process_gone, wait_gone};

/// How long a wait for something that should happen may take (generous:
/// two cores, tests in parallel).
const PATIENCE: Duration = Duration::from_secs(10);

/// A scratch directory and the path of a log in it.
fn log_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.log");
    (dir, path)
}

fn log_lines(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

fn count(log: &Path, line: &str) -> usize {
    log_lines(log).iter().filter(|l| *l == line).count()
}

/// `future`, which must end within a minute.
async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"))
}

/// Waits (at most [`PATIENCE`]) until `done`; whether it came.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > PATIENCE {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Waits until the log has a `cancelled <id>` line, a request's number.
async fn assert_told_to_cancel(log: &Path) {
    let told = || {
        log_lines(log).iter().any(|l| {
            l.strip_prefix("cancelled ")
                .is_some_and(|id| id.parse::<u64>().is_ok())
        })
    };
    let told = eventually(told).await;
    assert!(
        told,
        "the server was not told to cancel: {:?}",
        log_lines(log)
    );
}

async fn connect(server: RemoteServer) -> McpClient {
    bounded("connecting", McpClient::connect(server))
        .await
        .unwrap()
}

/// A harness on `client`'s tools whose model runs `script`.
fn harness(client: &McpClient, script: Vec<ChatResponse>, limits: RunLimits) -> AgentHarness {
    AgentHarness::builder(ScriptedModel::new(script))
        .tools(client.tools())
        .limits(limits)
        .build()
        .unwrap()
}

/// A harness whose model calls `tool` with `args`, then answers "done".
fn one_call(client: &McpClient, tool: &str, args: Value, limits: RunLimits) -> AgentHarness {
    let script = vec![
        ScriptedModel::tool_call(tool, args),
        ChatResponse::text("done"),
    ];
    harness(client, script, limits)
}

fn echo(client: &McpClient, limits: RunLimits) -> AgentHarness {
    one_call(client, "broken_echo", json!({"text": "x"}), limits)
}

/// Runs `harness` on "go", asserting the run went on to the model's final
/// text with one terminal event per started call.
async fn run_to_done(harness: &AgentHarness) -> (AgentRun, Vec<AgentEvent>) {
    let (result, events) = bounded("the run", run_collecting(harness, RunRequest::new("go"))).await;
    let run = result.unwrap();
    assert_eq!(
        (run.status, run.final_text.as_str()),
        (RunStatus::Completed, "done")
    );
    assert_one_terminal_per_start(&events);
    (run, events)
}

/// Drops `client` and asserts its server's process is reaped (tools of it
/// may outlive it: they do not keep the process).
async fn assert_reaped(client: McpClient) {
    let pid = client.process_id().expect("a stdio server has a process");
    drop(client);
    assert!(wait_gone(pid).await, "process {pid} was not reaped");
}

/// This process's children, zombies too, whose command line has `args`
/// (a zombie's is empty: then its name, `program`, decides). Nextest runs
/// each test in a process of its own.
fn children(program: &str, args: &str) -> Vec<u32> {
    let me = std::process::id().to_string();
    let out = std::process::Command::new("pgrep")
        .args(["-P", &me])
        .output()
        .expect("pgrep runs");
    let read =
        |pid: u32, file: &str| std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|pid| pid.trim().parse().ok())
        .filter(|&pid| {
            let cmdline = String::from_utf8_lossy(&read(pid, "cmdline")).replace('\0', " ");
            let comm = String::from_utf8_lossy(&read(pid, "comm"))
                .trim()
                .to_owned();
            cmdline.contains(args) || (cmdline.trim().is_empty() && comm == program)
        })
        .collect()
}

/// Waits until no such child remains, running or unreaped.
async fn assert_no_children(program: &str, args: &str) {
    let gone = eventually(|| children(program, args).is_empty()).await;
    assert!(
        gone,
        "`{args}` was not reaped: {:?}",
        children(program, args)
    );
}

/// Bad peers: a server that crashes mid-call → a clear error on that call,
/// the run goes on, the child process is reaped.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_crashes_mid_call_fails_that_call_and_the_run_goes_on() {
    let client = connect(broken("crash", None)).await;
    let harness = echo(&client, RunLimits::default());
    let (run, events) = run_to_done(&harness).await;
    let error = call_failure(&events, "p1").expect("the call failed");
    assert!(
        error.contains("connection to MCP server 'broken' closed during the call of 'echo'"),
        "{error}"
    );
    assert!(call_answer(&run.messages, "p1").is_some_and(|(_, is_error)| is_error));
    assert_reaped(client).await;
}

/// Bad peers: a server that hangs → the harness's tool timeout (which the
/// client also bounds its request by) ends the call, the run goes on, and
/// the call is cancelled at the server as `notifications/cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_server_is_cut_off_by_the_timeout_and_told_to_cancel() {
    let (_dir, log) = log_file();
    let client = connect(broken("hang", Some(&log))).await;
    let limits = RunLimits::default().with_tool_timeout(Some(Duration::from_millis(500)));
    let started = Instant::now();
    let (_, events) = run_to_done(&echo(&client, limits)).await;
    assert!(
        started.elapsed() < PATIENCE,
        "the run took {:?}",
        started.elapsed()
    );
    let error = call_failure(&events, "p1").expect("the call failed");
    // The client's bound (the harness's timeout, not its own 300 s) or the
    // harness's deadline, whichever fires first in that millisecond.
    assert!(
        error.contains("did not answer the call of 'echo' within 500ms")
            || error.contains("'broken_echo' timed out after 500 ms"),
        "{error}"
    );
    assert_told_to_cancel(&log).await;
    assert_eq!(count(&log, "call tools/call"), 1);
    assert_reaped(client).await;
}

/// Bad peers: a server that hangs, with no harness timeout → the client's
/// own request timeout ends the call with a clear error, and the call is
/// cancelled at the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_server_is_cut_off_by_the_request_timeout_and_told_to_cancel() {
    let (_dir, log) = log_file();
    let server = broken("hang", Some(&log)).request_timeout(Duration::from_millis(500));
    let client = connect(server).await;
    let (_, events) = run_to_done(&echo(&client, RunLimits::default())).await;
    let error = call_failure(&events, "p1").expect("the call failed");
    assert!(
        error.contains("MCP server 'broken' did not answer the call of 'echo' within 500ms"),
        "{error}"
    );
    assert_told_to_cancel(&log).await;
    // Closing reaps the process before it returns.
    let pid = client.process_id().unwrap();
    bounded("closing", client.close()).await;
    assert!(process_gone(pid), "process {pid} outlived close");
}

/// Cancellation: a call whose future is dropped mid-flight (a wrap's
/// timeout, a sibling's failure), with no timeout of its own fired, is
/// cancelled at the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_dropped_mid_flight_is_cancelled_at_the_server() {
    let (_dir, log) = log_file();
    let client = connect(broken("hang", Some(&log))).await;
    let tool = client
        .tools()
        .into_iter()
        .find(|t| t.spec().name == "broken_echo")
        .unwrap();
    let call = tool.execute_with_context(json!({"text": "x"}), ToolCallOptions::default(), None);
    let dropped = tokio::time::timeout(Duration::from_millis(300), call).await;
    assert!(dropped.is_err(), "a hanging server answered: {dropped:?}");
    assert_told_to_cancel(&log).await;
    assert_reaped(client).await;
}

/// Cancellation: cancelling the run while an MCP call is in flight ends
/// the run as cancelled and is sent to the server as
/// `notifications/cancelled`.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_run_cancels_the_call_at_the_server() {
    let (_dir, log) = log_file();
    let client = connect(broken("hang", Some(&log))).await;
    let harness = echo(&client, RunLimits::default());
    let mut handle = harness.start(RunRequest::new("go"));
    let token = handle.cancellation().clone();
    let mut events = Vec::new();
    let mut canceller = None;
    bounded("the cancelled run", async {
        while let Some(event) = handle.next_event().await {
            if matches!(event, AgentEvent::ToolStarted { .. }) {
                // Cancel once the request reached the server, the handle
                // driving the run meanwhile.
                let (log, token) = (log.clone(), token.clone());
                canceller = Some(tokio::spawn(async move {
                    let reached = eventually(|| count(&log, "call tools/call") == 1).await;
                    assert!(reached, "the call never reached the server");
                    token.cancel();
                }));
            }
            events.push(event);
        }
    })
    .await;
    canceller.expect("the call started").await.unwrap();
    let run = handle.wait().await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_one_terminal_per_start(&events);
    let error = call_failure(&events, "p1").expect("the call failed");
    assert!(error.contains("cancelled"), "{error}");
    assert_told_to_cancel(&log).await;
    assert_reaped(client).await;
}

/// Bad peers: malformed JSON-RPC (a line that is not JSON, JSON that is not
/// JSON-RPC, a response to no request) is ignored, and the calls answer.
#[tokio::test(flavor = "multi_thread")]
async fn junk_on_the_wire_is_ignored_and_the_call_answers() {
    let client = connect(broken("junk", None)).await;
    let script = vec![
        ScriptedModel::tool_call("broken_echo", json!({"text": "x"})),
        ScriptedModel::tool_call("broken_echo", json!({"text": "y"})),
        ChatResponse::text("done"),
    ];
    let (run, _) = run_to_done(&harness(&client, script, RunLimits::default())).await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("x".to_owned(), false))
    );
    assert_eq!(
        call_answer(&run.messages, "p2"),
        Some(("y".to_owned(), false))
    );
    assert_reaped(client).await;
}

/// Bad peers: an oversized message (bounded sizes) is dropped, the call it
/// answered fails by its timeout, the run goes on and the connection
/// stays usable.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_message_is_dropped_and_the_call_fails_by_its_timeout() {
    let server = broken("oversize", None)
        .max_message_bytes(1024 * 1024)
        .request_timeout(Duration::from_secs(1));
    let client = connect(server).await;
    let (_, events) = run_to_done(&echo(&client, RunLimits::default())).await;
    let error = call_failure(&events, "p1").expect("the call failed");
    assert!(
        error.contains("did not answer the call of 'echo' within 1s"),
        "{error}"
    );
    // The ~20 MB line was skipped, not taken for the end of the connection.
    let change = bounded("a refresh", client.refresh()).await.unwrap();
    assert!(
        change.added.is_empty() && change.removed.is_empty(),
        "{change:?}"
    );
    assert_reaped(client).await;
}

/// Bad peers: a schema that does not compile → a clear error at connect
/// time naming the tool, and the child process is reaped.
#[tokio::test(flavor = "multi_thread")]
async fn a_schema_that_does_not_compile_fails_at_connect_naming_the_tool() {
    let (_dir, log) = log_file();
    let connecting = McpClient::connect(broken("bad_schema", Some(&log)));
    let error = bounded("connecting", connecting)
        .await
        .expect_err("refused");
    let McpError::UnusableTool { tool, server, .. } = &error else {
        panic!("not an unusable tool: {error}");
    };
    assert_eq!(
        (tool.as_str(), server.as_str()),
        ("broken_schema", "broken")
    );
    assert!(
        error
            .to_string()
            .contains("its tool 'broken_schema' cannot be used"),
        "{error}"
    );
    let lines = log_lines(&log);
    assert!(
        lines.iter().any(|l| l == "call tools/list"),
        "never listed: {lines:?}"
    );
    assert_no_children("node", "broken.mjs bad_schema").await;
}

/// Tool list refresh: after `notifications/tools/list_changed` the list is
/// read again, and a tool that disappeared mid-run fails its calls with a
/// clear error, without sending them.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_disappears_fails_its_calls_with_a_clear_error() {
    let (_dir, log) = log_file();
    let client = connect(broken("changing", Some(&log))).await;
    assert_eq!(client.tool_names(), ["broken_echo", "broken_fail"]);
    assert_eq!(client.list_generation(), 1);
    // Both harnesses hold the tools as they were before the change.
    let echo = echo(&client, RunLimits::default());
    let fail = one_call(&client, "broken_fail", json!({}), RunLimits::default());
    let (run, _) = run_to_done(&echo).await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("x".to_owned(), false))
    );

    let changed = tokio::time::timeout(PATIENCE, client.list_changed_since(1)).await;
    assert!(changed.expect("the list was read again") >= 2);
    assert_eq!(client.tool_names(), ["broken_echo"]);
    assert_eq!(client.refresh_failure(), None);

    let (run, events) = run_to_done(&fail).await;
    let (content, is_error) = call_answer(&run.messages, "p1").expect("the call answered");
    assert!(is_error);
    assert!(
        content.contains("MCP server 'broken' no longer offers the tool 'fail'")
            && content.contains("not sent"),
        "{content}"
    );
    assert_eq!(call_failure(&events, "p1"), None);
    let lines = log_lines(&log);
    assert_eq!(count(&log, "call tools/call"), 1, "{lines:?}");
    assert_eq!(count(&log, "call tools/list"), 2, "{lines:?}");
    assert_reaped(client).await;
}

/// Listing follows pagination: the tools of every page are offered, and
/// one from the second page answers its calls.
#[tokio::test(flavor = "multi_thread")]
async fn pagination_is_followed() {
    let (_dir, log) = log_file();
    let client = connect(broken("paged", Some(&log))).await;
    assert_eq!(client.tool_names(), ["broken_echo", "broken_fail"]);
    assert_eq!(count(&log, "call tools/list"), 2);
    let harness = one_call(&client, "broken_fail", json!({}), RunLimits::default());
    let (run, _) = run_to_done(&harness).await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("it failed".to_owned(), true))
    );
    assert_reaped(client).await;
}

/// A tool's error result (`isError`) is a completed call whose error
/// result reaches the model, not a failed call.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_result_is_an_error_result() {
    let client = connect(broken("normal", None)).await;
    let harness = one_call(&client, "broken_fail", json!({}), RunLimits::default());
    let (run, events) = run_to_done(&harness).await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("it failed".to_owned(), true))
    );
    assert_eq!(call_failure(&events, "p1"), None);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolCompleted { call_id, is_error: true, .. } if call_id.as_str() == "p1"
    )));
    assert_reaped(client).await;
}

/// Bad peers at connect time: a program that does not exist, and one that
/// never initializes, each fail to connect with a clear error (the second
/// by the connect timeout), and the silent one's process is reaped.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_not_there_fails_to_connect_clearly() {
    let ghost = McpClient::connect(RemoteServer::stdio("ghost", "/nonexistent/program"));
    let error = bounded("connecting", ghost)
        .await
        .expect_err("nothing to start");
    assert!(
        matches!(&error, McpError::Spawn { server, command, .. }
            if server == "ghost" && command == "/nonexistent/program"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("cannot start `/nonexistent/program`"),
        "{error}"
    );

    let timeout = Duration::from_millis(500);
    let silent = RemoteServer::stdio("silent", "sleep")
        .arg("30")
        .connect_timeout(timeout);
    let connecting = tokio::spawn(McpClient::connect(silent));
    // The claim below is about a process that was there.
    let started = eventually(|| !children("sleep", "sleep 30").is_empty()).await;
    assert!(started, "`sleep 30` never started");
    let error = bounded("connecting", connecting)
        .await
        .unwrap()
        .expect_err("it never initializes");
    assert!(
        matches!(&error, McpError::Timeout { server, during: "initializing", timeout: t }
            if server == "silent" && *t == timeout),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("did not answer within 500ms while initializing"),
        "{error}"
    );
    assert_no_children("sleep", "sleep 30").await;
}
