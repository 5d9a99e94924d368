//! What the MCP tests share: where the pinned npm peers are, the broken
//! server, the test server binary, and a child process that is always
//! stopped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tinyagents::mcp::RemoteServer;

/// The versions `cargo xtask ci` installs into `.tools/mcp`.
pub(crate) const EVERYTHING_VERSION: &str = "2026.8.31";
pub(crate) const FILESYSTEM_VERSION: &str = "2026.8.31";
pub(crate) const SDK_VERSION: &str = "1.32.2";

/// `.tools/mcp/node_modules`, or `TINYAGENTS_MCP_NODE_MODULES`.
pub(crate) fn node_modules() -> PathBuf {
    if let Some(dir) = std::env::var_os("TINYAGENTS_MCP_NODE_MODULES") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/mcp/node_modules")
}

/// The installed package `name`'s directory, checked to be `version`.
fn package(name: &str, version: &str) -> PathBuf {
    let dir = node_modules().join(name);
    let manifest = std::fs::read_to_string(dir.join("package.json")).unwrap_or_default();
    assert!(
        manifest.contains(&format!("\"version\": \"{version}\"")),
        "{name} {version} is not installed in {}: `cargo xtask ci tests` installs the pinned MCP \
         peers (npm install --prefix .tools/mcp), or set TINYAGENTS_MCP_NODE_MODULES",
        node_modules().display()
    );
    dir
}

/// `server-everything`'s entry point.
pub(crate) fn everything_js() -> PathBuf {
    package(
        "@modelcontextprotocol/server-everything",
        EVERYTHING_VERSION,
    )
    .join("dist/index.js")
}

/// `server-filesystem`'s entry point.
pub(crate) fn filesystem_js() -> PathBuf {
    package(
        "@modelcontextprotocol/server-filesystem",
        FILESYSTEM_VERSION,
    )
    .join("dist/index.js")
}

/// The TypeScript SDK client scenario (`js/client.mjs`), after checking
/// the SDK is the pinned one.
pub(crate) fn sdk_client_js() -> PathBuf {
    let _ = package("@modelcontextprotocol/sdk", SDK_VERSION);
    js_dir().join("client.mjs")
}

fn js_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/js")
}

/// The broken stdio server in `mode` (see `js/broken.mjs`), logging what
/// it receives to `log` when given.
pub(crate) fn broken(mode: &str, log: Option<&Path>) -> RemoteServer {
    let mut server = RemoteServer::stdio("broken", "node")
        .arg(js_dir().join("broken.mjs"))
        .arg(mode);
    if let Some(log) = log {
        server = server.env("BROKEN_LOG", log);
    }
    server
}

/// `server-everything` over stdio.
pub(crate) fn everything_stdio() -> RemoteServer {
    RemoteServer::stdio("everything", "node").arg(everything_js())
}

/// The tinyagents test server binary (`server_bin.rs`).
pub(crate) fn test_server_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-test-server")
}

/// A free loopback port (bound, read, released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed and reaped when dropped.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `server-everything` over Streamable HTTP on a free port, once it says
/// it listens; its URL.
pub(crate) fn everything_http() -> (Reaped, String) {
    let port = free_port();
    let child = Command::new("node")
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("node starts server-everything");
    let child = Reaped(child);
    wait_for_port(port);
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Waits (at most 20 s) until something accepts on `port`.
pub(crate) fn wait_for_port(port: u16) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nothing listens on port {port} after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` is gone (reaped: no /proc entry, not a zombie).
pub(crate) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('X')),
    }
}

/// Waits (at most 10 s) for `pid` to be gone.
pub(crate) async fn wait_gone(pid: u32) -> bool {
    let started = Instant::now();
    while !process_gone(pid) {
        if started.elapsed() > Duration::from_secs(10) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
