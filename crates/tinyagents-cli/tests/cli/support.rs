//! What the command line's tests share: the built binary in a store of its
//! own, agents files over the pinned `server-everything`, and reading the
//! JSON lines a run prints.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

/// The built binary.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_tinyagents");
use serde_json::Value;

/// The `server-everything` version `cargo xtask ci` installs.
const EVERYTHING_VERSION: &str = "2026.8.31";

/// The repository's root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `server-everything`'s entry point, checked to be the pinned version.
pub(crate) fn everything_js() -> PathBuf {
    let dir = std::env::var_os("TINYAGENTS_MCP_NODE_MODULES")
        .map_or_else(|| root().join(".tools/mcp/node_modules"), PathBuf::from)
        .join("@modelcontextprotocol/server-everything");
    let manifest = std::fs::read_to_string(dir.join("package.json")).unwrap_or_default();
    assert!(
        manifest.contains(&format!("\"version\": \"{EVERYTHING_VERSION}\"")),
        "server-everything {EVERYTHING_VERSION} is not installed in {}: `cargo xtask peers` \
         installs the pinned MCP peers",
        dir.display()
    );
    dir.join("dist/index.js")
}

/// The example team file.
pub(crate) fn team_file() -> PathBuf {
    root().join("examples/agents/team.toml")
}

/// A directory for one test: its store and its agents files.
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The store the commands of this test use.
    pub(crate) fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Writes an agents file whose `[mcp.everything]` is the pinned server
    /// (`EVERYTHING` in `body` is replaced by its entry point).
    pub(crate) fn file(&self, name: &str, body: &str) -> PathBuf {
        let js = everything_js().to_string_lossy().replace('\\', "/");
        let path = self.dir.path().join(name);
        std::fs::write(&path, body.replace("EVERYTHING", &js)).unwrap();
        path
    }

    /// The binary, in this test's store, with neither a model nor an OTLP
    /// endpoint from the environment.
    pub(crate) fn std_command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(BIN);
        command
            .current_dir(self.dir.path())
            .env("TINYAGENTS_STORE", self.store())
            .env_remove("TINYAGENTS_MODEL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        command
    }

    /// [`std_command`](Self::std_command) for `assert_cmd`, bounded.
    pub(crate) fn cmd(&self) -> Command {
        let mut cmd = Command::from_std(self.std_command());
        cmd.timeout(std::time::Duration::from_secs(120));
        cmd
    }

    /// Runs the binary with `args`.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }
}

/// Standard output as text.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Standard error as text.
pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code.
pub(crate) fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Every line of standard output, each parsed as JSON (a line that is
/// not JSON fails the test, naming it).
pub(crate) fn json_lines(output: &Output) -> Vec<Value> {
    stdout(output)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect()
}

/// The last line: the run's result.
pub(crate) fn result_of(lines: &[Value]) -> &Value {
    let last = lines.last().expect("a result line");
    assert_eq!(last["type"], "result", "{last}");
    last
}

/// The run id of the run the JSON lines show.
pub(crate) fn run_id(lines: &[Value]) -> String {
    result_of(lines)["run_id"].as_str().unwrap().to_owned()
}

/// The events of the top run, and of delegated runs unwrapped, with the
/// calls that delegated them: `(scope, event)`.
pub(crate) fn flatten(lines: &[Value]) -> Vec<(Vec<String>, Value)> {
    fn walk(scope: Vec<String>, event: &Value, out: &mut Vec<(Vec<String>, Value)>) {
        if event["type"] == "delegated" {
            let mut inner = scope;
            inner.push(event["parent_call_id"].as_str().unwrap().to_owned());
            walk(inner, &event["event"], out);
        } else {
            out.push((scope, event.clone()));
        }
    }
    let mut out = Vec::new();
    for line in lines {
        walk(Vec::new(), line, &mut out);
    }
    out
}

/// The indent (in spaces) of the first line containing `needle`.
pub(crate) fn indent_of(text: &str, needle: &str) -> usize {
    let line = text
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"));
    line.len() - line.trim_start().len()
}

/// A run of the binary in the background, its JSON lines read as they
/// come.
pub(crate) struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub(crate) seen: Vec<String>,
}

impl Running {
    /// Starts the binary with `args` in `scratch`'s store.
    pub(crate) fn start(scratch: &Scratch, args: &[&str]) -> Self {
        let mut child = scratch
            .std_command()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line, read already or still to come, that parses to a
    /// value `until` accepts (60 s at most).
    pub(crate) fn wait_for(&mut self, until: impl Fn(&Value) -> bool) -> Value {
        if let Some(found) = self
            .seen
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| until(v))
        {
            return found;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no such line ({e}); seen:\n{}", self.seen.join("\n")));
            self.seen.push(line.clone());
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && until(&value)
            {
                return value;
            }
        }
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (SIGKILL) and reaps it.
    pub(crate) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends it a signal (`INT`, `TERM`, …).
    pub(crate) fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for it to exit; its code and every line it printed.
    pub(crate) fn finish(mut self) -> (i32, Vec<Value>) {
        let status = self.child.wait().unwrap();
        while let Ok(line) = self.lines.recv_timeout(std::time::Duration::from_secs(10)) {
            self.seen.push(line);
        }
        let lines = self
            .seen
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        (status.code().unwrap_or(-1), lines)
    }
}

/// An agents file whose one agent echoes, then runs one long operation of
/// `server-everything` (`seconds` long), then answers. The server's
/// annotations are ignored, so both tools are exclusive and never
/// replayed: the echo settles before the long operation starts.
pub(crate) fn long_operation(scratch: &Scratch, seconds: u32) -> PathBuf {
    scratch.file(
        "long.toml",
        &format!(
            r#"
[mcp.everything]
command = "node"
args = ["EVERYTHING"]
ignore_annotations = true

[agents.ops]
model = "scripted"
tools = ["everything_trigger-long-running-operation", "everything_echo"]
script = [
    {{ calls = [
        {{ tool = "everything_echo", arguments = {{ message = "starting" }} }},
        {{ tool = "everything_trigger-long-running-operation", arguments = {{ duration = {seconds}, steps = {seconds} }} }},
    ] }},
    {{ text = "done" }},
]
"#
        ),
    )
}

/// Whether `event` is the start of the long operation.
pub(crate) fn long_started(event: &Value) -> bool {
    event["type"] == "tool_started" && event["name"] == "everything_trigger-long-running-operation"
}

/// How many terminal events (`tool_completed`, `tool_failed`) call `call`
/// of the run at `scope` has among `events` (from [`flatten`]).
pub(crate) fn terminal_events(
    events: &[(Vec<String>, Value)],
    scope: &[String],
    call: &str,
) -> usize {
    events
        .iter()
        .filter(|(s, e)| {
            s == scope
                && e["call_id"] == call
                && (e["type"] == "tool_completed" || e["type"] == "tool_failed")
        })
        .count()
}

/// The payments MCP server of these tests (a Node.js script, no packages).
pub(crate) fn payments_js() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cli/payments.mjs")
}

/// An agents file whose agent `payer` looks its input up, pays its input,
/// then pays `<input>-fee`; each payment waits for a person. `pay` writes
/// one line per payment to `payments.txt` beside the file (`delay_ms`
/// before and after the write), and is never replayed.
pub(crate) fn payments_file(dir: &Path, delay_ms: u32) -> PathBuf {
    let path = dir.join("payments.toml");
    let body = format!(
        r#"
main = "payer"

[capture]
tool_io = true

[mcp.payments]
command = "node"
args = ["{js}"]
env = {{ PAYMENTS_FILE = "{effects}", PAY_DELAY_MS = "{delay_ms}" }}

[agents.payer]
model = "scripted"
tools = ["payments_lookup", "payments_pay"]
script = [
    {{ tool = "payments_lookup", arguments = {{ to = "{{input}}" }} }},
    {{ tool = "payments_pay", arguments = {{ to = "{{input}}" }} }},
    {{ tool = "payments_pay", arguments = {{ to = "{{input}}-fee" }} }},
    {{ text = "paid" }},
]

[agents.payer.policy]
require_approval = ["payments_pay"]
"#,
        js = payments_js().to_string_lossy().replace('\\', "/"),
        effects = dir
            .join("payments.txt")
            .to_string_lossy()
            .replace('\\', "/"),
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// The payments made so far (lines of `payments.txt` in `dir`).
pub(crate) fn payments(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("payments.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The record of `run` as `runs --json` lists it.
pub(crate) fn listed(scratch: &Scratch, run: &str) -> Value {
    let output = scratch.run(&["--json", "runs"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    json_lines(&output)
        .into_iter()
        .find(|r| r["run_id"] == run)
        .unwrap_or_else(|| panic!("run {run} is not listed: {}", stdout(&output)))
}

/// A campaign's trials (from the variable `trials_var`, else `default`)
/// and its first seed (`TINYAGENTS_CRASH_SEED`, else the clock: a failure
/// prints the seed that replays it).
pub(crate) fn campaign(trials_var: &str, default: u64) -> (u64, u64) {
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let trials = number(trials_var).unwrap_or(default);
    let seed = number("TINYAGENTS_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(29, |d| d.as_secs())
    });
    (trials, seed)
}

/// Resumes the approved `run` in a process of its own and kills it
/// (SIGKILL) once its payment is written and before its result is: the
/// payment's call is left in doubt.
pub(crate) fn kill_resume_after_payment(scratch: &Scratch, run: &str) {
    let mut resuming = Running::start(scratch, &["--json", "resume", run]);
    resuming.wait_for(|e| e["type"] == "tool_started" && e["name"] == "payments_pay");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while payments(scratch.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the payment never happened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    resuming.kill();
}
