//! A real third-party server for the provider tests: `@copilotkit/aimock`
//! (npm, pinned), which speaks OpenAI's Chat Completions and Anthropic's
//! Messages from the fixtures in `fixtures/aimock.json`, with injected
//! faults. `cargo xtask ci` installs it into `.tools/aimock` when it is
//! missing; `TINYAGENTS_AIMOCK` may point at another `dist/cli.js`.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pinned version, as `xtask` installs it.
pub(crate) const AIMOCK_VERSION: &str = "1.43.0";

/// The key the server accepts; any other is refused with 401.
pub(crate) const GOOD_KEY: &str = "aimock-good-key";

/// A running aimock on a loopback port, stopped when dropped.
pub(crate) struct Aimock {
    child: Child,
    port: u16,
}

impl Drop for Aimock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cli() -> PathBuf {
    if let Some(path) = std::env::var_os("TINYAGENTS_AIMOCK") {
        return PathBuf::from(path);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/aimock/node_modules/@copilotkit/aimock/dist/cli.js")
}

impl Aimock {
    /// Starts aimock on a free port with the suite's fixtures; the server
    /// accepts only [`GOOD_KEY`], and spaces its stream chunks by 1 ms so
    /// that an interrupted stream has sent some of them.
    pub(crate) fn start() -> Self {
        let cli = cli();
        assert!(
            cli.exists(),
            "aimock {AIMOCK_VERSION} is not installed at {}: `cargo xtask ci` installs it \
             (npm install --prefix .tools/aimock @copilotkit/aimock@{AIMOCK_VERSION}), or set \
             TINYAGENTS_AIMOCK to its dist/cli.js",
            cli.display()
        );
        if std::env::var_os("TINYAGENTS_AIMOCK").is_none() {
            let manifest = cli
                .parent()
                .and_then(std::path::Path::parent)
                .map(|package| package.join("package.json"))
                .unwrap_or_default();
            let text = std::fs::read_to_string(&manifest).unwrap_or_default();
            assert!(
                text.contains(&format!("\"version\": \"{AIMOCK_VERSION}\"")),
                "the installed aimock is not {AIMOCK_VERSION} ({}): `cargo xtask ci` installs the pinned one",
                manifest.display()
            );
        }
        let fixtures =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers/fixtures/aimock.json");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("node")
            .arg(&cli)
            .args([
                "--port",
                &port.to_string(),
                "--host",
                "127.0.0.1",
                "--latency",
                "1",
            ])
            .args(["--log-level", "warn", "--fixtures"])
            .arg(&fixtures)
            .env("AIMOCK_API_KEYS", GOOD_KEY)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs aimock (Node.js is on this machine's PATH)");
        let mut server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("aimock exited before it listened: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "aimock did not listen on {port} in 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The root the clients' base URLs extend.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
