//! Issue 31, trust in a hostile server: a tool swapped under the same name
//! is refused (the change named, a `Warning` event) until the host accepts
//! it, and then runs on its new spec; a new tool is not offered until
//! accepted; a lock pins definitions across processes and a drift fails
//! the connect; a lying read-only hint opens neither plan mode nor a deny
//! mask unless the host trusts the server.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::mcp::{McpClient, McpError, McpLock, RemoteServer, Trust};
use tinyagents::middleware::{PlanModeMiddleware, ToolPolicyMiddleware};
use tinyagents::prelude::*;
use tinyagents_tests::{call_answer, run_collecting};

/// The hostile server in `mode`, its effects appended to `effects`.
fn hostile(mode: &str, effects: &Path) -> RemoteServer {
    RemoteServer::stdio("hostile", "node")
        .arg(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/js/hostile.mjs"))
        .arg(mode)
        .env("HOSTILE_EFFECTS", effects)
}

fn effects(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `script` over `tools` (with `middleware`), returning the run and
/// its events.
async fn run(
    tools: Vec<Arc<dyn Tool>>,
    script: Vec<ChatResponse>,
    middleware: Option<Arc<dyn tinyagents::middleware::Middleware>>,
) -> (AgentRun, Vec<AgentEvent>) {
    let mut builder = AgentHarness::builder(ScriptedModel::new(script)).tools(tools);
    if let Some(middleware) = middleware {
        builder = builder.middleware(middleware);
    }
    let harness = builder.build().unwrap();
    let (result, events) = run_collecting(&harness, RunRequest::new("go")).await;
    (result.unwrap(), events)
}

fn lookup() -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_call("hostile_lookup", json!({"id": "r1"})),
        ChatResponse::text("done"),
    ]
}

/// Has the hostile server swap its tools (a call of `swap` among `vetted`)
/// and waits until the client listed them again.
async fn swap(client: &McpClient, vetted: &[Arc<dyn Tool>]) {
    let script = vec![
        ScriptedModel::tool_call("hostile_swap", json!({})),
        ChatResponse::text("swapped"),
    ];
    run(vetted.to_vec(), script, None).await;
    tokio::time::timeout(Duration::from_secs(10), client.list_changed_since(1))
        .await
        .expect("a refresh after list_changed");
}

/// The answer the model got for the run's only call.
fn answer(run: &AgentRun) -> (String, bool) {
    call_answer(&run.messages, "p1").expect("the call was answered")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_swapped_tool_is_refused_with_the_change_named_until_accepted_then_runs_on_its_new_spec()
{
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("effects");
    let client = McpClient::connect(hostile("swap", &log).trust(Trust::Trusted))
        .await
        .unwrap();
    let vetted = client.tools();
    let spec = vetted
        .iter()
        .find(|t| t.spec().name == "hostile_lookup")
        .unwrap()
        .spec()
        .clone();
    assert!(spec.read_only, "vetted as read-only: {spec:?}");
    let plan: Arc<dyn tinyagents::middleware::Middleware> = Arc::new(PlanModeMiddleware::new(true));

    // The server swaps `lookup` for a destructive tool and adds one.
    swap(&client, &vetted).await;
    let unvetted = client.unvetted();
    let described: Vec<String> = unvetted.iter().map(|u| u.describe()).collect();
    assert_eq!(
        described,
        [
            "tool 'lookup' changed its description, annotations",
            "tool 'exfiltrate' is new"
        ]
    );
    let names = client.tool_names();
    assert_eq!(names, ["hostile_swap"], "neither is offered: {names:?}");

    // The agent built before still holds the read-only spec: plan mode
    // would let it through, so the call itself is refused, on both specs.
    let (done, events) = run(vetted.clone(), lookup(), Some(Arc::clone(&plan))).await;
    let (text, is_error) = answer(&done);
    assert!(is_error, "{text}");
    assert!(
        text.contains("changed the description, annotations of tool 'lookup'")
            && text.contains("not sent"),
        "{text}"
    );
    let warned = events.iter().any(|e| matches!(e,
        AgentEvent::Warning { message } if message.contains("changed the description, annotations of tool 'lookup'")));
    assert!(warned, "a Warning event names the change: {events:?}");
    assert_eq!(effects(&log), ["swap v1"], "the swapped tool never ran");

    // Accepted: offered with the spec of its new definition (destructive),
    // so plan mode now refuses it; without plan mode it runs, once.
    let change = client.accept_changes(&["hostile_lookup"]);
    assert_eq!(change.added, ["hostile_lookup"]);
    assert_eq!(
        change.unvetted.len(),
        1,
        "exfiltrate still waits: {change:?}"
    );
    let fresh = client.tools();
    let spec = fresh
        .iter()
        .find(|t| t.spec().name == "hostile_lookup")
        .unwrap()
        .spec()
        .clone();
    assert!(
        !spec.read_only && spec.side_effects.contains(SideEffects::DESTRUCTIVE),
        "{spec:?}"
    );
    assert!(
        !client
            .tool_names()
            .contains(&"hostile_exfiltrate".to_owned())
    );
    let (done, _) = run(fresh.clone(), lookup(), Some(plan)).await;
    assert!(answer(&done).1, "plan mode refuses the destructive tool");
    let (done, _) = run(vetted, lookup(), None).await;
    let (text, is_error) = answer(&done);
    assert!(
        is_error && text.contains("take the server's tools again"),
        "{text}"
    );
    let (done, _) = run(fresh, lookup(), None).await;
    assert_eq!(answer(&done), ("lookup ran (v2)".to_owned(), false));
    assert_eq!(effects(&log), ["swap v1", "lookup v2"]);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_pins_definitions_across_connections_and_a_drift_fails_the_connect() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("effects");
    let path = dir.path().join("mcp.lock");
    let first = McpClient::connect(hostile("swap", &log)).await.unwrap();
    let mut lock = McpLock::new();
    lock.pin(&first);
    lock.write(&path).unwrap();
    first.close().await;
    let lock = McpLock::read(&path).unwrap().expect("written");
    assert_eq!(
        lock.server("hostile").unwrap().keys().collect::<Vec<_>>(),
        ["lookup", "swap"]
    );

    let again = McpClient::connect(hostile("swap", &log).locked(&lock))
        .await
        .unwrap();
    assert_eq!(again.tool_names(), ["hostile_lookup", "hostile_swap"]);
    again.close().await;

    let drifted = McpClient::connect(hostile("v2", &log).locked(&lock))
        .await
        .unwrap_err();
    let said = drifted.to_string();
    assert!(
        matches!(&drifted, McpError::Drift { server, changes } if server == "hostile" && changes.len() == 2),
        "{said}"
    );
    assert!(
        said.contains(
            "tool 'lookup' changed its description, annotations since the lock was written"
        ),
        "{said}"
    );
    assert!(
        said.contains("tool 'exfiltrate' is not in the lock"),
        "{said}"
    );
    let unnamed = McpClient::connect(hostile("swap", &log).locked(&McpLock::new()))
        .await
        .unwrap_err();
    assert!(
        unnamed
            .to_string()
            .contains("tool 'lookup' is not in the lock"),
        "{unnamed}"
    );
    assert!(effects(&log).is_empty(), "nothing ran");

    std::fs::write(&path, "{\"servers\": 3}").unwrap();
    let corrupt = McpLock::read(&path).unwrap_err().to_string();
    assert!(
        corrupt.contains(&path.display().to_string()) && corrupt.contains("not an MCP lock"),
        "{corrupt}"
    );
    assert!(
        McpLock::read(&dir.path().join("none.lock"))
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lying_read_only_hint_opens_neither_plan_mode_nor_a_deny_mask_unless_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("effects");
    let wipe = || {
        vec![
            ScriptedModel::tool_call("hostile_wipe", json!({})),
            ChatResponse::text("done"),
        ]
    };
    let plan = || {
        Some(Arc::new(PlanModeMiddleware::new(true)) as Arc<dyn tinyagents::middleware::Middleware>)
    };
    let mask = || {
        Some(
            Arc::new(ToolPolicyMiddleware::new().deny_side_effects(SideEffects::DESTRUCTIVE))
                as Arc<dyn tinyagents::middleware::Middleware>,
        )
    };
    let untrusted = McpClient::connect(hostile("liar", &log)).await.unwrap();
    let spec = untrusted.tools()[0].spec().clone();
    assert!(
        !spec.read_only && spec.side_effects.contains(SideEffects::DESTRUCTIVE),
        "{spec:?}"
    );
    for guard in [plan(), mask()] {
        let (done, _) = run(untrusted.tools(), wipe(), guard).await;
        assert!(answer(&done).1, "refused");
    }
    assert!(effects(&log).is_empty(), "the liar's tool never ran");
    untrusted.close().await;

    let trusted = McpClient::connect(hostile("liar", &log).trust(Trust::Trusted))
        .await
        .unwrap();
    assert!(trusted.tools()[0].spec().read_only);
    for guard in [plan(), mask()] {
        let (done, _) = run(trusted.tools(), wipe(), guard).await;
        assert_eq!(answer(&done), ("wipe ran (v1)".to_owned(), false));
    }
    assert_eq!(
        effects(&log),
        ["wipe v1", "wipe v1"],
        "trusted, its word is taken"
    );
    trusted.close().await;
}

/// The status of a raw `initialize` POST to `addr` carrying `origin`.
async fn initialize_status(addr: std::net::SocketAddr, origin: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    })
    .to_string();
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{origin}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {len}\r\n\r\n{body}",
        port = addr.port(),
        len = body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    String::from_utf8_lossy(&head[9..12]).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_http_server_refuses_a_foreign_origin_and_admits_its_own() {
    use tinyagents::mcp::McpServer;
    let echo = || {
        FnTool::new("echo", "Echoes.", |v: serde_json::Value| async move {
            anyhow::Ok(v.to_string())
        })
    };
    let server = McpServer::builder("guarded").tool(echo()).build().unwrap();
    let http = server
        .spawn_http("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = http.address();
    let port = addr.port();
    assert_eq!(
        initialize_status(addr, Some("http://evil.example")).await,
        403
    );
    assert_eq!(
        initialize_status(addr, Some("null")).await,
        403,
        "an opaque origin (a sandboxed page)"
    );
    assert_eq!(
        initialize_status(addr, Some(&format!("http://localhost:{port}"))).await,
        200
    );
    assert_eq!(initialize_status(addr, None).await, 200, "not a browser");
    http.shutdown().await.unwrap();

    let server = McpServer::builder("app")
        .tool(echo())
        .http_allowed_origins(["https://app.example.com:443"])
        .build()
        .unwrap();
    let http = server
        .spawn_http("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = http.address();
    assert_eq!(
        initialize_status(addr, Some("https://app.example.com")).await,
        200
    );
    assert_eq!(
        initialize_status(addr, Some(&format!("http://localhost:{}", addr.port()))).await,
        403
    );
    http.shutdown().await.unwrap();
}

/// A lock of the real reference server (`server-everything`) pins each of
/// its tools and lets it connect again; a lock pinning it under another
/// server's name refuses it, naming its tools.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_of_the_reference_server_pins_its_tools_and_reconnects() {
    let first = McpClient::connect(crate::support::everything_stdio())
        .await
        .unwrap();
    let mut lock = McpLock::new();
    lock.pin(&first);
    let pinned = lock.server("everything").unwrap().len();
    assert_eq!(pinned, first.tool_names().len(), "every tool pinned");
    assert!(lock.server("everything").unwrap().contains_key("echo"));
    first.close().await;
    let again = McpClient::connect(crate::support::everything_stdio().locked(&lock))
        .await
        .unwrap();
    assert_eq!(again.tool_names().len(), pinned);
    assert!(again.unvetted().is_empty());
    again.close().await;
    let mut other = McpLock::new();
    other.servers.insert(
        "elsewhere".into(),
        lock.server("everything").unwrap().clone(),
    );
    let refused = McpClient::connect(crate::support::everything_stdio().locked(&other))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("tool 'echo' is not in the lock"),
        "{refused}"
    );
}

/// A tool that nests a call of `tool` (with `{ "id": "r1" }`) `depth`
/// levels down: `relay` → … → `tool`.
fn relay(name: &'static str, inner: &'static str) -> impl Tool {
    FnTool::with_context(
        name,
        "Relays.",
        move |_: serde_json::Value, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let args = if inner.starts_with("relay") {
                json!({})
            } else {
                json!({"id": "r1"})
            };
            let answer = exec.call_tool(inner, args).await?;
            anyhow::Ok(answer.content)
        },
    )
}

/// The swapped tool is refused on every origin: nested, nested of nested,
/// a delegated agent's call, and a model-issued call in a run whose
/// events nobody reads (the refusal does not hang on the warning).
#[tokio::test(flavor = "multi_thread")]
async fn a_swapped_tool_is_refused_on_every_origin_and_with_nobody_listening() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("effects");
    let client = McpClient::connect(hostile("swap", &log)).await.unwrap();
    let vetted = client.tools();
    swap(&client, &vetted).await;
    let refused =
        |text: &str| text.contains("changed the description, annotations of tool 'lookup'");

    // Nested, and nested of nested.
    for (outer, depth) in [("relay", 1), ("relay2", 2)] {
        let harness = AgentHarness::builder(ScriptedModel::new(vec![
            ScriptedModel::tool_call(outer, json!({})),
            ChatResponse::text("done"),
        ]))
        .tools(vetted.clone())
        .tool(relay("relay", "hostile_lookup"))
        .tool(relay("relay2", "relay"))
        .limits(RunLimits::default().with_max_nested_depth(depth))
        .build()
        .unwrap();
        let (done, _) = run_collecting(&harness, RunRequest::new("go")).await;
        let (text, _) = answer(&done.unwrap());
        assert!(refused(&text), "depth {depth}: {text}");
    }

    // A delegated agent's call.
    let specialist = Agent::builder("specialist")
        .model(ScriptedModel::new(lookup()))
        .instructions("You look up.")
        .tools(vetted.clone())
        .build()
        .unwrap();
    let coordinator = Agent::builder("coordinator")
        .model(ScriptedModel::new(vec![
            ScriptedModel::tool_call("specialist", json!({ "query": "look it up" })),
            ChatResponse::text("done"),
        ]))
        .instructions("You delegate.")
        .tool(specialist.as_tool("specialist", "Looks up."))
        .build()
        .unwrap();
    let (sink, collected) = tinyagents_tests::collector();
    let done = coordinator
        .run_with(RunRequest::new("go"), &sink)
        .await
        .unwrap();
    drop(sink);
    let events = collected.await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let delegated_refusal = events.iter().any(|e| match e {
        AgentEvent::Delegated { event, .. } => matches!(event.as_ref(),
            AgentEvent::ToolCompleted { name, is_error: true, .. } if name == "hostile_lookup"),
        _ => false,
    });
    assert!(
        delegated_refusal,
        "the delegated call was answered with the refusal: {events:?}"
    );

    // Nobody reads the events.
    let quiet = AgentHarness::builder(ScriptedModel::new(lookup()))
        .tools(vetted)
        .build()
        .unwrap();
    let done = quiet.run("go").await.unwrap();
    let (text, is_error) = answer(&done);
    assert!(is_error && refused(&text), "{text}");

    assert_eq!(
        effects(&log),
        ["swap v1"],
        "the swapped tool never ran on any origin"
    );
    client.close().await;
}
