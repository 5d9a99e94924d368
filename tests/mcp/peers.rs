//! Our client under software no one here wrote: the official
//! `server-everything` (stdio and Streamable HTTP) and `server-filesystem`
//! (stdio), through the facade, on a scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::mcp::{McpClient, Trust};
use tinyagents::middleware::ToolPolicyMiddleware;
use tinyagents::orchestrator::OmitReason;
use tinyagents::prelude::*;
use tinyagents_tests::{assert_one_terminal_per_start, call_answer, call_failure, run_collecting};

use crate::support;

async fn connect(server: RemoteServer) -> McpClient {
    McpClient::connect(server)
        .await
        .expect("the MCP peer connects")
}

/// The spec of the client's tool registered as `name`.
fn spec(client: &McpClient, name: &str) -> ToolSpec {
    client
        .tools()
        .iter()
        .map(|tool| tool.spec().clone())
        .find(|spec| spec.name == name)
        .unwrap_or_else(|| panic!("no tool {name} in {:?}", client.tool_names()))
}

/// Runs a harness over `client`'s tools on `script`, under `policy` when
/// given: the completed run and every event.
async fn run(
    client: &McpClient,
    script: Vec<ChatResponse>,
    policy: Option<ToolPolicyMiddleware>,
) -> (AgentRun, Vec<AgentEvent>) {
    let mut builder = AgentHarness::builder(ScriptedModel::new(script)).tools(client.tools());
    if let Some(policy) = policy {
        builder = builder.middleware(Arc::new(policy));
    }
    let harness = builder.build().unwrap();
    let (result, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_one_terminal_per_start(&events);
    (run, events)
}

/// The id of the (only) call of `name` in the transcript.
fn call_of(run: &AgentRun, name: &str) -> CallId {
    let ids: Vec<&CallId> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id, name: n, ..
            } if n == name => Some(call_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "calls of {name}: {ids:?}");
    ids[0].clone()
}

/// The model-visible answer of the call of `name`, checked not to be an
/// error.
fn answer(run: &AgentRun, name: &str) -> String {
    let id = call_of(run, name);
    let (content, is_error) = call_answer(&run.messages, id.as_str()).unwrap();
    assert!(!is_error, "{name} answered an error: {content}");
    content
}

/// The events of `call`: (started, completed metadata, failure).
fn lifecycle(events: &[AgentEvent], call: &CallId) -> (bool, Option<Value>, Option<String>) {
    let started = events
        .iter()
        .any(|e| matches!(e, AgentEvent::ToolStarted { call_id, .. } if call_id == call));
    let completed = events.iter().find_map(|e| match e {
        AgentEvent::ToolCompleted {
            call_id, metadata, ..
        } if call_id == call => Some(metadata.clone().unwrap_or(Value::Null)),
        _ => None,
    });
    (started, completed, call_failure(events, call.as_str()))
}

/// Issue requirement: annotations from a trusted peer map to the flags the
/// policies act on, fail closed when ignored or untrusted (the default,
/// issue 31), and the host overrides them.
#[tokio::test(flavor = "multi_thread")]
async fn everything_tools_map_their_annotations() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let names = client.tool_names();
    assert!(
        names.iter().all(|n| n.starts_with("everything_")),
        "{names:?}"
    );
    assert!(spec(&client, "everything_get-sum").read_only);

    let echo = spec(&client, "everything_echo");
    assert!(echo.read_only && echo.concurrency_safe, "{echo:?}");
    assert_eq!(echo.replay, ToolReplay::Safe);
    assert!(echo.side_effects.is_empty(), "{:?}", echo.side_effects);
    assert!(!echo.approval_required);

    // Every hint false: a write, not destructive, not idempotent, closed world.
    let logging = spec(&client, "everything_toggle-simulated-logging");
    assert!(
        !logging.read_only && !logging.concurrency_safe,
        "{logging:?}"
    );
    assert!(!logging.side_effects.contains(SideEffects::DESTRUCTIVE));
    assert!(!logging.side_effects.contains(SideEffects::NETWORK_EGRESS));
    assert_eq!(logging.replay, ToolReplay::Never);

    // Idempotent, open world.
    let gzip = spec(&client, "everything_gzip-file-as-resource");
    assert!(!gzip.read_only);
    assert_eq!(gzip.side_effects, SideEffects::NETWORK_EGRESS);
    assert_eq!(gzip.replay, ToolReplay::Safe);
    client.close().await;

    for untrusted in [
        support::everything_stdio().ignore_annotations(),
        support::everything_stdio(),
    ] {
        let ignoring = connect(untrusted).await;
        let echo = spec(&ignoring, "everything_echo");
        assert!(!echo.read_only && !echo.concurrency_safe, "{echo:?}");
        assert_eq!(
            echo.side_effects,
            SideEffects::DESTRUCTIVE | SideEffects::NETWORK_EGRESS
        );
        assert_eq!(echo.replay, ToolReplay::Never);
        ignoring.close().await;
    }

    let overridden = support::everything_stdio()
        .override_tool("echo", |s| s.approval_required = true)
        .prefix(None)
        .trust(Trust::Trusted);
    let overridden = connect(overridden).await;
    let names = overridden.tool_names();
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    assert!(
        names.iter().all(|n| !n.starts_with("everything_")),
        "{names:?}"
    );
    let echo = spec(&overridden, "echo");
    assert!(echo.approval_required && echo.read_only, "{echo:?}");
    assert!(!spec(&overridden, "get-sum").approval_required);
    overridden.close().await;
}

/// Issue requirement: a peer's tools run through the enforced call path
/// (events, one terminal per start, answers to the model), over stdio and
/// over Streamable HTTP alike.
async fn calls_echo_and_sum(client: McpClient) {
    let (run, events) = run(
        &client,
        vec![
            ScriptedModel::tool_call("everything_echo", json!({"message": "hi"})),
            ScriptedModel::tool_call("everything_get-sum", json!({"a": 2, "b": 40})),
            ChatResponse::text("done"),
        ],
        None,
    )
    .await;
    assert_eq!(run.final_text, "done");
    assert_eq!(answer(&run, "everything_echo"), "Echo: hi");
    let sum = answer(&run, "everything_get-sum");
    assert!(sum.contains("42"), "{sum}");
    for name in ["everything_echo", "everything_get-sum"] {
        let (started, completed, failed) = lifecycle(&events, &call_of(&run, name));
        assert!(
            started && completed.is_some() && failed.is_none(),
            "{name}: {events:?}"
        );
    }
    client.close().await;
}

/// See [`calls_echo_and_sum`]: over stdio.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_everything_through_the_enforced_path_over_stdio() {
    calls_echo_and_sum(connect(support::everything_stdio()).await).await;
}

/// See [`calls_echo_and_sum`]: over Streamable HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_everything_through_the_enforced_path_over_http() {
    let (_server, url) = support::everything_http();
    calls_echo_and_sum(connect(RemoteServer::http("everything", url)).await).await;
}

/// Issue requirement: binary content reaches the model as a reference, its
/// data and the structured content as host-only metadata.
#[tokio::test(flavor = "multi_thread")]
async fn images_and_structured_content_become_references_and_metadata() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let (run, events) = run(
        &client,
        vec![
            ScriptedModel::tool_call("everything_get-tiny-image", json!({})),
            ScriptedModel::tool_call(
                "everything_get-structured-content",
                json!({"location": "Chicago"}),
            ),
            ChatResponse::text("done"),
        ],
        None,
    )
    .await;

    let image = call_of(&run, "everything_get-tiny-image");
    let content = answer(&run, "everything_get-tiny-image");
    assert!(content.contains("[image 1: image/png, "), "{content}");
    let (_, metadata, _) = lifecycle(&events, &image);
    let metadata = metadata.unwrap();
    assert_eq!(run.tool_metadata(&image), Some(&metadata));
    let attachment = &metadata["attachments"][0];
    assert_eq!(attachment["mime_type"], "image/png");
    let data = attachment["data"].as_str().unwrap();
    assert!(data.len() > 64, "{data}");
    let transcript = serde_json::to_string(&run.messages).unwrap();
    assert!(!transcript.contains(data), "the base64 reached the model");

    let weather = call_of(&run, "everything_get-structured-content");
    let (_, metadata, _) = lifecycle(&events, &weather);
    let structured = &metadata.unwrap()["structured_content"];
    assert!(structured["temperature"].is_number(), "{structured}");
    assert_eq!(
        run.tool_metadata(&weather).unwrap()["structured_content"],
        *structured
    );
    client.close().await;
}

/// Issue requirement: the server's progress notifications become the
/// call's progress events, as fractions of the total.
#[tokio::test(flavor = "multi_thread")]
async fn server_progress_becomes_progress_events() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let (run, events) = run(
        &client,
        vec![
            ScriptedModel::tool_call(
                "everything_trigger-long-running-operation",
                json!({"duration": 1, "steps": 4}),
            ),
            ChatResponse::text("done"),
        ],
        None,
    )
    .await;
    let call = call_of(&run, "everything_trigger-long-running-operation");
    let fractions: Vec<f32> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id, fraction, ..
            } if *call_id == call => Some(fraction.expect("a fraction of the total")),
            _ => None,
        })
        .collect();
    // All four, in order: progress is routed as the connection reads it,
    // so none is lost to the answer read after it.
    assert_eq!(fractions, [0.25, 0.5, 0.75, 1.0]);
    // Every progress event comes before the call's terminal event.
    let terminal = events
        .iter()
        .position(|e| e.is_tool_terminal() && e.call_id() == Some(&call))
        .unwrap();
    assert!(
        !events[terminal..]
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolProgress { .. })),
        "{events:?}"
    );
    client.close().await;
}

/// The filesystem server on a fresh directory holding `a.txt` =
/// "original": the directory (removed when dropped), the client, the
/// file's path.
async fn filesystem() -> (tempfile::TempDir, McpClient, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("a.txt");
    std::fs::write(&file, "original").unwrap();
    // The reference server: the host trusts its annotations.
    let server = RemoteServer::stdio("fs", "node")
        .arg(support::filesystem_js())
        .arg(&root)
        .trust(Trust::Trusted);
    let path = file.to_str().unwrap().to_owned();
    (dir, connect(server).await, path)
}

/// Write `overwritten` to `path`, read it back, answer.
fn write_then_read(path: &str) -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_call(
            "fs_write_file",
            json!({"path": path, "content": "overwritten"}),
        ),
        ScriptedModel::tool_call("fs_read_text_file", json!({"path": path})),
        ChatResponse::text("done"),
    ]
}

/// Issue requirement: a policy acts on the flags mapped from a real
/// server's annotations: `write_file` (destructive) is refused before it
/// reaches the server, the read-only read runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_policy_refuses_the_destructive_filesystem_tool_and_the_file_is_untouched() {
    let (_dir, client, path) = filesystem().await;
    let write = spec(&client, "fs_write_file");
    assert!(
        write.side_effects.contains(SideEffects::DESTRUCTIVE),
        "{write:?}"
    );
    assert!(spec(&client, "fs_read_text_file").read_only);

    let policy = ToolPolicyMiddleware::new().deny_side_effects(SideEffects::DESTRUCTIVE);
    let (run, events) = run(&client, write_then_read(&path), Some(policy)).await;
    let (_, completed, failure) = lifecycle(&events, &call_of(&run, "fs_write_file"));
    let failure = failure.expect("the write failed");
    assert!(completed.is_none());
    assert!(
        failure.contains("tool policy") && failure.contains("destructive"),
        "{failure}"
    );
    assert_eq!(answer(&run, "fs_read_text_file"), "original");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "original");
    client.close().await;
}

/// The counter-test: without the policy the same script overwrites the
/// file, so the refusal above came from the policy.
#[tokio::test(flavor = "multi_thread")]
async fn without_the_policy_the_filesystem_write_happens() {
    let (_dir, client, path) = filesystem().await;
    let (run, events) = run(&client, write_then_read(&path), None).await;
    let (started, completed, failure) = lifecycle(&events, &call_of(&run, "fs_write_file"));
    assert!(
        started && completed.is_some() && failure.is_none(),
        "{events:?}"
    );
    answer(&run, "fs_write_file");
    assert_eq!(answer(&run, "fs_read_text_file"), "overwritten");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "overwritten");
    client.close().await;
}

/// Issue requirement: an open-world tool (`openWorldHint` true) is network
/// egress, so an air-gapped (local-only) agent is not offered it.
#[tokio::test(flavor = "multi_thread")]
async fn an_air_gapped_run_omits_open_world_tools() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let model = Arc::new(ScriptedModel::new([ChatResponse::text("done")]).recording());
    let agent = Agent::builder("local")
        .model(Arc::clone(&model))
        .tools(client.tools())
        .local_only()
        .build()
        .unwrap();
    assert_eq!(agent.run("go").await.unwrap().final_text, "done");
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let offers = |name: &str| offered.iter().any(|n| n == name);
    assert!(offers("everything_echo"), "{offered:?}");
    assert!(!offers("everything_gzip-file-as-resource"), "{offered:?}");
    let omitted = agent.active().agent().omitted_tools(true);
    assert!(
        omitted
            .iter()
            .any(|o| o.name == "everything_gzip-file-as-resource"
                && o.reason == OmitReason::NetworkEgress),
        "{omitted:?}"
    );
    client.close().await;
}

/// Issue requirement: the tool list follows
/// `notifications/tools/list_changed` (everything sends one after
/// initializing).
#[tokio::test(flavor = "multi_thread")]
async fn list_changed_from_everything_refreshes_the_catalogue() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let generation = tokio::time::timeout(Duration::from_secs(10), client.list_changed_since(1))
        .await
        .expect("a refresh after list_changed");
    assert!(generation >= 2, "{generation}");
    assert!(client.list_generation() >= 2);
    assert_eq!(client.refresh_failure(), None);
    assert!(client.tool_names().iter().any(|n| n == "everything_echo"));
    client.close().await;
}

/// Issue requirement: a stdio server's process is stopped and reaped
/// whether the client is closed or just dropped.
#[tokio::test(flavor = "multi_thread")]
async fn closing_the_client_reaps_the_server_process() {
    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let pid = client.process_id().expect("a stdio server's pid");
    assert!(!support::process_gone(pid));
    client.close().await;
    assert!(support::wait_gone(pid).await, "closed: {pid} lives on");

    let client = connect(support::everything_stdio().trust(Trust::Trusted)).await;
    let pid = client.process_id().expect("a stdio server's pid");
    assert!(!support::process_gone(pid));
    drop(client);
    assert!(support::wait_gone(pid).await, "dropped: {pid} lives on");
}
