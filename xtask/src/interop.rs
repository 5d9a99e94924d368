//! `cargo xtask interop RECEIVER`: the OpenTelemetry export checked against
//! a real receiver that people view agent traces in.
//!
//! `phoenix`: Arize Phoenix (PyPI `arize-phoenix`, pinned), installed into
//! a cached virtual environment (`.tools/phoenix/venv`), started on
//! loopback in a temporary working directory, sent the spans of the `otel`
//! example (an offline agent team) over OTLP/HTTP, and read back through
//! its REST API (`GET /v1/projects/default/spans`): the tree must be the
//! one the GenAI conventions and the harness promise (one trace, `invoke_agent
//! coordinator` at its root, nested calls under their calling tool, the
//! delegated agent under the calling tool, the attributes present), and
//! Phoenix must have read each span as what it is (AGENT, LLM, TOOL).

use std::collections::{BTreeMap, HashMap};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::{cargo_command, root, secs};

/// The Phoenix release the check is written for: the newest that installs
/// on CPython 3.11 (it needs >= 3.11) when it was pinned.
const PHOENIX_VERSION: &str = "20.26.1";

/// How long Phoenix may take to answer `/readyz` after it starts (8 to 10 s
/// on the 2-core machine, the first start after an install included).
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// How long the example's spans may take to show up through the API once
/// it has exited (Phoenix inserts them in batches, about every second).
const SPANS_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the spans read back must stay the same before a tree that is
/// still wrong counts as final.
const SETTLED: Duration = Duration::from_secs(10);

/// The project spans land in when they name none (the example does not
/// set `openinference.project.name`): Phoenix's default.
const PROJECT: &str = "default";

/// The example that exports the team's spans.
const EXAMPLE: &str = "crates/tinyagents/examples/otel.rs";

const USAGE: &str = "usage: cargo xtask interop phoenix";

/// `cargo xtask interop RECEIVER`.
pub(crate) fn interop(args: &[String]) -> ExitCode {
    let check = match args {
        [receiver] if receiver == "phoenix" => phoenix,
        _ => {
            eprintln!("xtask interop: expected a receiver\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    match check() {
        Ok(()) => {
            println!("xtask interop phoenix: ok in {}", secs(started.elapsed()));
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!(
                "\nxtask interop phoenix: FAILED after {}: {why}",
                secs(started.elapsed())
            );
            ExitCode::FAILURE
        }
    }
}

/// The whole Phoenix check: install (when needed), start, export, read
/// back, check. Phoenix is stopped and its directory removed whatever
/// happens.
pub(crate) fn phoenix() -> Result<(), String> {
    if !root().join(EXAMPLE).exists() {
        return Err(format!(
            "{EXAMPLE} is missing: the check runs that example to export spans"
        ));
    }
    let venv = ensure_phoenix()?;
    let server = Phoenix::start(&venv)?;
    let run_id = run_example(&server)?;
    let spans = await_tree(&server, run_id.as_deref())?;
    println!(
        "\nthe tree Phoenix holds: {} spans in trace {}, as expected",
        spans.len(),
        spans.first().map_or("", |s| s.trace_id.as_str())
    );
    print!("{}", render_tree(&spans));
    Ok(())
}

// ----- the cached virtual environment -----

/// `.tools/phoenix`: the virtual environment and the marker naming what
/// was installed into it.
fn tools_dir() -> PathBuf {
    root().join(".tools/phoenix")
}

/// The requirement installed, as the marker records it.
fn requirement() -> String {
    format!("arize-phoenix=={PHOENIX_VERSION}")
}

/// Creates `.tools/phoenix/venv` and installs the pinned Phoenix into it
/// unless the marker says it is there already; returns the venv.
fn ensure_phoenix() -> Result<PathBuf, String> {
    let dir = tools_dir();
    let venv = dir.join("venv");
    let marker = dir.join("installed");
    let python = venv.join("bin/python");
    let wanted = requirement();
    if python.exists() && fs::read_to_string(&marker).is_ok_and(|m| m.trim() == wanted) {
        return Ok(venv);
    }
    println!(
        "{wanted} is missing or of another version: installing it into {}",
        venv.display()
    );
    let started = Instant::now();
    // A half-made or older environment is replaced whole.
    let _ = fs::remove_file(&marker);
    if venv.exists() {
        fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove the old {}: {e}", venv.display()))?;
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let supported = Command::new("python3")
        .args([
            "-c",
            "import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)",
        ])
        .status()
        .map_err(|e| format!("python3 could not start ({e}): Phoenix needs CPython >= 3.11"))?;
    if !supported.success() {
        return Err(format!("python3 is older than 3.11, which {wanted} needs"));
    }
    println!("$ python3 -m venv {}", venv.display());
    run_status(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    println!(
        "$ {} -m pip install --disable-pip-version-check --no-input --quiet {wanted}",
        python.display()
    );
    run_status(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(["--no-input", "--quiet", &wanted]),
    )?;
    // Read from the package's metadata: importing phoenix would create its
    // working directory (in $HOME).
    let got = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('arize-phoenix'))",
        ])
        .output()
        .map_err(|e| format!("{} could not start: {e}", python.display()))?;
    let got = String::from_utf8_lossy(&got.stdout).trim().to_owned();
    if got != PHOENIX_VERSION {
        return Err(format!(
            "pip installed arize-phoenix {got:?} into {}, not {PHOENIX_VERSION}",
            venv.display()
        ));
    }
    fs::write(&marker, format!("{wanted}\n"))
        .map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    println!("installed {wanted} in {}", secs(started.elapsed()));
    Ok(venv)
}

/// Runs `cmd` with inherited stdio; `Err` names it when it fails.
fn run_status(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("{shown} could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

// ----- the server -----

/// A running Phoenix, under [`WATCH`] in a process group of its own and in
/// a temporary directory: dropping it stops the server (TERM, then KILL to
/// the whole group) and removes the directory.
struct Phoenix {
    /// `sh`, running [`WATCH`]: the group's leader, Phoenix's parent.
    child: Child,
    /// The watcher's pipe: closing it (or our exit) stops Phoenix.
    stdin: Option<ChildStdin>,
    /// Its working directory (database, log), removed at the end.
    dir: PathBuf,
    port: u16,
}

/// The shell Phoenix runs under: it exits with Phoenix, and stops Phoenix
/// (then removes its working directory) when its standard input closes,
/// which the kernel does when this process ends however it ends (Ctrl-C,
/// which reaches our process group only, included).
const WATCH: &str = r#"exec 3<&0
"$@" 3<&- </dev/null &
server=$!
{
    read -r _ <&3
    kill -TERM "$server" 2>/dev/null
    while kill -0 "$server" 2>/dev/null; do sleep 0.2; done
    rm -rf "$PHOENIX_WORKING_DIR"
} </dev/null &
wait "$server""#;

impl Phoenix {
    /// Starts Phoenix on free loopback ports and waits until it is ready.
    fn start(venv: &Path) -> Result<Self, String> {
        let dir = temp_dir()?;
        let log_path = dir.join("phoenix.log");
        let log = fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
        let (port, grpc_port) = free_ports()?;
        let mut cmd = Command::new("sh");
        cmd.args(["-c", WATCH, "sh"])
            .arg(venv.join("bin/python"))
            .args(["-m", "phoenix.server.main", "serve"]);
        // Only our settings: a developer's PHOENIX_* (a database URL,
        // authentication, a collector) must not reach this server.
        for (key, _) in env::vars_os() {
            if key.to_string_lossy().starts_with("PHOENIX_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", &dir)
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            // Nothing it or its libraries cache lands in the real $HOME.
            .env("HOME", &dir)
            .stdin(Stdio::piped())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        println!(
            "starting Phoenix {PHOENIX_VERSION} on 127.0.0.1:{port} (gRPC {grpc_port}), \
             working directory {}",
            dir.display()
        );
        let started = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(format!("Phoenix could not start: {e}"));
            }
        };
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            dir,
            port,
        };
        server.await_ready()?;
        println!("Phoenix is ready in {}", secs(started.elapsed()));
        let version = server.get("/arize_phoenix_version")?;
        if version.1.trim() != PHOENIX_VERSION {
            return Err(format!(
                "the server says it is Phoenix {:?}, not {PHOENIX_VERSION}",
                version.1.trim()
            ));
        }
        Ok(server)
    }

    /// Polls `/readyz` until it answers 200, the process exits or
    /// [`READY_TIMEOUT`] passes.
    fn await_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "Phoenix exited before it was ready ({status}){}",
                    self.log_tail()
                ));
            }
            if matches!(self.get("/readyz"), Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "Phoenix did not answer /readyz on port {} within {}{}",
                    self.port,
                    secs(READY_TIMEOUT),
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// `GET path` on the server: status and body.
    fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.port, path)
    }

    /// The OTLP/HTTP traces endpoint.
    fn traces_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1/traces", self.port)
    }

    /// The last lines of the server's log, for an error.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("phoenix.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n  ");
        format!("\nthe end of Phoenix's log:\n  {tail}")
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        // Closing the pipe has the watcher TERM Phoenix; the shell exits
        // once Phoenix has.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
        }
        // Whatever is left of the group: the watcher, a Phoenix that
        // ignored TERM.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A new empty directory under the system's temporary directory.
fn temp_dir() -> Result<PathBuf, String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = env::temp_dir().join(format!("tinyagents-phoenix-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Two loopback ports free now (both held while the second is picked, so
/// they differ).
fn free_ports() -> Result<(u16, u16), String> {
    let bind = || {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| Ok((l.local_addr()?.port(), l)))
            .map_err(|e| format!("no free loopback port: {e}"))
    };
    let (first, _held) = bind()?;
    let (second, _held_too) = bind()?;
    Ok((first, second))
}

/// A plain HTTP/1.1 GET on loopback (all the check needs: no TLS, one
/// request per connection), answering the status and the body.
fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_secs(10);
    let fail = |e: std::io::Error| format!("GET {path} on 127.0.0.1:{port}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    stream.set_write_timeout(Some(timeout)).map_err(fail)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\
         Connection: close\r\n\r\n"
    )
    .map_err(fail)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(fail)?;
    let bad = |what: &str| format!("GET {path} on 127.0.0.1:{port}: {what}");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers in the answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no status in the answer"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        body = dechunk(&body).ok_or_else(|| bad("a malformed chunked body"))?;
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

// ----- the example -----

/// Runs the `otel` example exporting to `server`, echoing what it prints;
/// answers the run id it printed (`run id: …`), if any.
fn run_example(server: &Phoenix) -> Result<Option<String>, String> {
    let endpoint = server.traces_endpoint();
    let args = [
        "run",
        "-q",
        "-p",
        "tinyagents",
        "--example",
        "otel",
        "--features",
        "otel",
    ];
    println!(
        "$ OTEL_EXPORTER_OTLP_ENDPOINT={endpoint} OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \
         cargo {}",
        args.join(" ")
    );
    let mut cmd = cargo_command();
    cmd.args(args);
    // Only this endpoint and the example's own names: a developer's
    // settings must not send the spans elsewhere or rename them.
    for key in [
        "TINYAGENTS_MODEL",
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        cmd.env_remove(key);
    }
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let started = Instant::now();
    let output = cmd
        .output()
        .map_err(|e| format!("cargo could not start: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in stdout.lines() {
        println!("  | {line}");
    }
    if !output.status.success() {
        return Err(format!(
            "the otel example failed ({}){}",
            output.status,
            server.log_tail()
        ));
    }
    println!(
        "the example exported and exited in {}",
        secs(started.elapsed())
    );
    let run_id = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("run id:"))
        .map(|id| id.trim().to_owned());
    Ok(run_id)
}

// ----- the spans, read back -----

/// One span as Phoenix's REST API gives it back.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent_id: Option<String>,
    /// The OpenInference kind Phoenix read the span as (AGENT, LLM, TOOL…).
    kind: String,
    start: String,
    /// Flattened: `gen_ai.tool.name` and so on.
    attributes: serde_json::Map<String, Value>,
}

impl Span {
    fn from_json(value: &Value) -> Result<Self, String> {
        let text = |v: Option<&Value>, what: &str| {
            v.and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("a span without {what}: {value}"))
        };
        Ok(Self {
            name: text(value.get("name"), "a name")?,
            trace_id: text(value.pointer("/context/trace_id"), "a trace id")?,
            span_id: text(value.pointer("/context/span_id"), "a span id")?,
            parent_id: value
                .get("parent_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            kind: text(value.get("span_kind"), "a span kind")?,
            start: text(value.get("start_time"), "a start time")?,
            attributes: value
                .get("attributes")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// The operation its name starts with (`execute_tool` of
    /// `execute_tool lookup`) and what follows.
    fn operation(&self) -> (&str, &str) {
        self.name.split_once(' ').unwrap_or((&self.name, ""))
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }

    /// An attribute as JSON text (`"30"` for a string, `30` for a number),
    /// or `none`.
    fn shown(&self, key: &str) -> String {
        self.attributes
            .get(key)
            .map_or_else(|| "none".to_owned(), Value::to_string)
    }

    fn call_id(&self) -> &str {
        self.text("gen_ai.tool.call.id").unwrap_or("")
    }

    /// A short account of it for the printed tree.
    fn describe(&self) -> String {
        let mut line = format!("{}  [{}]", self.name, self.kind);
        match self.operation().0 {
            "execute_tool" => {
                let _ = write!(line, " call {}", self.call_id());
            }
            "chat" => {
                let tokens = |k: &str| {
                    self.attributes
                        .get(k)
                        .map_or_else(|| "?".to_owned(), Value::to_string)
                };
                let _ = write!(
                    line,
                    " tokens {} in / {} out",
                    tokens("gen_ai.usage.input_tokens"),
                    tokens("gen_ai.usage.output_tokens")
                );
            }
            _ => {
                if let Some(run) = self.text("tinyagents.run.id") {
                    let _ = write!(line, " run {run}");
                }
            }
        }
        let _ = write!(line, "  (span {})", self.span_id);
        line
    }
}

/// Every span of the project, following the pages.
fn read_spans(server: &Phoenix) -> Result<Vec<Span>, String> {
    let mut spans = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/projects/{PROJECT}/spans?limit=1000&sort=start_time&order=asc");
        if let Some(cursor) = &cursor {
            let _ = write!(path, "&cursor={}", url_encode(cursor));
        }
        let (status, body) = server.get(&path)?;
        // The project exists only once its first span is in.
        if status == 404 && spans.is_empty() {
            return Ok(spans);
        }
        if status != 200 {
            return Err(format!("GET {path} answered {status}: {body}"));
        }
        let page: Value = serde_json::from_str(&body)
            .map_err(|e| format!("GET {path} answered no JSON ({e}): {body}"))?;
        let data = page
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("GET {path} answered no `data` list: {body}"))?;
        for span in data {
            spans.push(Span::from_json(span)?);
        }
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(spans),
        }
    }
}

/// Percent-encodes a query value.
fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// Polls Phoenix until its spans form the expected tree and no more come
/// in (two reads alike). Fails with the tree it has and what is wrong with
/// it once the spans have stopped changing for [`SETTLED`] (the example
/// has flushed them all before it exits: what is in is all there is), or
/// after [`SPANS_TIMEOUT`] whatever comes in.
fn await_tree(server: &Phoenix, run_id: Option<&str>) -> Result<Vec<Span>, String> {
    println!("reading the spans back: GET /v1/projects/{PROJECT}/spans");
    let started = Instant::now();
    let mut last_count = None;
    let mut unchanged_since = Instant::now();
    loop {
        let spans = read_spans(server)?;
        let problems = check_tree(&spans, run_id);
        if last_count != Some(spans.len()) {
            unchanged_since = Instant::now();
        }
        if problems.is_empty() && last_count == Some(spans.len()) {
            return Ok(spans);
        }
        let settled = !spans.is_empty() && unchanged_since.elapsed() > SETTLED;
        if settled || started.elapsed() > SPANS_TIMEOUT {
            let mut why = format!(
                "after {} Phoenix's {} spans do not form the expected tree:",
                secs(started.elapsed()),
                spans.len()
            );
            for problem in &problems {
                let _ = write!(why, "\n  - {problem}");
            }
            if problems.is_empty() {
                why.push_str("\n  - spans kept coming in");
            }
            let _ = write!(
                why,
                "\nthe tree as Phoenix holds it:\n{}",
                render_tree(&spans)
            );
            return Err(why);
        }
        last_count = Some(spans.len());
        thread::sleep(Duration::from_millis(750));
    }
}

/// The spans as an indented tree, children in the order they started;
/// spans whose parent is missing are listed at the end.
fn render_tree(spans: &[Span]) -> String {
    let ids: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut children: BTreeMap<Option<&str>, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        let parent = span.parent_id.as_deref().filter(|p| ids.contains_key(p));
        children.entry(parent).or_default().push(span);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.start.cmp(&b.start));
    }
    fn walk(
        out: &mut String,
        span: &Span,
        depth: usize,
        children: &BTreeMap<Option<&str>, Vec<&Span>>,
    ) {
        let _ = writeln!(out, "  {}{}", "  ".repeat(depth), span.describe());
        for child in children
            .get(&Some(span.span_id.as_str()))
            .into_iter()
            .flatten()
        {
            walk(out, child, depth + 1, children);
        }
    }
    let mut out = String::new();
    for top in children.get(&None).into_iter().flatten() {
        if top.parent_id.is_some() {
            let _ = writeln!(
                out,
                "  (parent {} missing)",
                top.parent_id.as_deref().unwrap_or("")
            );
        }
        walk(&mut out, top, 0, &children);
    }
    out
}

/// What is wrong with `spans` as the example's tree (of the run `run_id`
/// printed, when it printed one); empty when nothing is.
fn check_tree(spans: &[Span], run_id: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    if spans.is_empty() {
        problems.push(format!("no spans in project `{PROJECT}` yet"));
        return problems;
    }
    let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent_of = |span: &Span| {
        span.parent_id
            .as_deref()
            .and_then(|p| by_id.get(p).copied())
    };

    let mut traces: Vec<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    traces.sort_unstable();
    traces.dedup();
    if traces.len() != 1 {
        problems.push(format!(
            "{} traces ({}), not one",
            traces.len(),
            traces.join(", ")
        ));
    }

    let roots: Vec<&Span> = spans.iter().filter(|s| s.parent_id.is_none()).collect();
    match roots.as_slice() {
        [root] if root.name == "invoke_agent coordinator" => {}
        [root] => problems.push(format!(
            "the root is `{}`, not `invoke_agent coordinator`",
            root.name
        )),
        _ => problems.push(format!(
            "{} roots ({}), not one `invoke_agent coordinator`",
            roots.len(),
            roots
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }

    for span in spans {
        let name = &span.name;
        if let Some(parent) = &span.parent_id
            && !by_id.contains_key(parent.as_str())
        {
            problems.push(format!("`{name}`'s parent span {parent} is not in Phoenix"));
        }
        let (operation, subject) = span.operation();
        let expected_kind = match operation {
            "invoke_agent" => "AGENT",
            "chat" => "LLM",
            "execute_tool" => "TOOL",
            _ => {
                problems.push(format!(
                    "`{name}` is not named after a GenAI operation (invoke_agent, chat, execute_tool)"
                ));
                continue;
            }
        };
        if subject.is_empty() {
            problems.push(format!("`{name}` names no agent, model or tool"));
        }
        if span.text("gen_ai.operation.name") != Some(operation) {
            problems.push(format!(
                "`{name}` has gen_ai.operation.name {}, not {operation:?}",
                span.shown("gen_ai.operation.name")
            ));
        }
        if span.kind != expected_kind {
            problems.push(format!(
                "Phoenix read `{name}` as a {} span, not {expected_kind}",
                span.kind
            ));
        }
        // Usage anywhere (a chat's, a run's totals) is an integer count.
        if operation != "chat" {
            for key in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"] {
                if span.attributes.contains_key(key)
                    && span.attributes.get(key).and_then(Value::as_u64).is_none()
                {
                    problems.push(format!(
                        "`{name}` has {key} {}, not an integer count",
                        span.shown(key)
                    ));
                }
            }
        }
        let parent = parent_of(span);
        let parent_operation = parent.map(|p| p.operation().0);
        match operation {
            "invoke_agent" => {
                if span.text("gen_ai.agent.name") != Some(subject) {
                    problems.push(format!(
                        "`{name}` has gen_ai.agent.name {}, not {subject:?}",
                        span.shown("gen_ai.agent.name")
                    ));
                }
                if span.parent_id.is_some() && parent_operation != Some("execute_tool") {
                    problems.push(format!(
                        "the delegated `{name}` is not the child of the calling `execute_tool` span"
                    ));
                }
            }
            "chat" => {
                // The conventions' counts are integers; Phoenix copies them
                // into its own `llm.token_count.*`, which its UI shows.
                for (key, phoenix_key) in [
                    ("gen_ai.usage.input_tokens", "llm.token_count.prompt"),
                    ("gen_ai.usage.output_tokens", "llm.token_count.completion"),
                ] {
                    let count = span.attributes.get(key).and_then(Value::as_u64);
                    if count.is_none() {
                        problems.push(format!(
                            "`{name}` has {key} {}, not an integer count",
                            span.shown(key)
                        ));
                    }
                    let read = span.attributes.get(phoenix_key).and_then(Value::as_u64);
                    if count.is_some() && read != count {
                        problems.push(format!(
                            "Phoenix read `{name}`'s {key} as {phoenix_key} {}",
                            span.shown(phoenix_key)
                        ));
                    }
                }
                if let Some(model) = span.text("gen_ai.request.model")
                    && model != subject
                {
                    problems.push(format!("`{name}` has gen_ai.request.model {model:?}"));
                }
                if parent_operation != Some("invoke_agent") {
                    problems.push(format!(
                        "`{name}` is not the child of an `invoke_agent` span"
                    ));
                }
            }
            _ => {
                if span.text("gen_ai.tool.name") != Some(subject) {
                    problems.push(format!(
                        "`{name}` has gen_ai.tool.name {}, not {subject:?}",
                        span.shown("gen_ai.tool.name")
                    ));
                }
                if span.call_id().is_empty() {
                    problems.push(format!("`{name}` has no gen_ai.tool.call.id"));
                }
                match parent {
                    Some(p) if p.operation().0 == "execute_tool" => {
                        let prefix = format!("{}/", p.call_id());
                        if !span.call_id().starts_with(&prefix) {
                            problems.push(format!(
                                "the nested `{name}` has call id {:?}, not one under its \
                                 caller's {:?}",
                                span.call_id(),
                                p.call_id()
                            ));
                        }
                    }
                    Some(p) if p.operation().0 == "invoke_agent" => {
                        if let Some((caller, _)) = span.call_id().rsplit_once('/') {
                            problems.push(format!(
                                "`{name}` (call {}) is a nested call but the child of `{}`, \
                                 not of its caller's `execute_tool` span ({caller})",
                                span.call_id(),
                                p.name
                            ));
                        }
                    }
                    _ => problems.push(format!(
                        "`{name}` is neither the child of an agent nor of a calling tool"
                    )),
                }
            }
        }
    }

    // What the team must have produced, beyond each span being in its place.
    let root = roots.first().copied();
    let children_of = |parent: &Span, operation: &str| {
        spans
            .iter()
            .filter(|s| {
                s.parent_id.as_deref() == Some(parent.span_id.as_str())
                    && s.operation().0 == operation
            })
            .count()
    };
    if let Some(root) = root {
        // The harness's own attribute, when it sets one, names the run.
        if let (Some(printed), Some(traced)) = (run_id, root.text("tinyagents.run.id"))
            && printed != traced
        {
            problems.push(format!(
                "the root's tinyagents.run.id is {traced:?}, but the example ran {printed:?}"
            ));
        }
        if children_of(root, "chat") == 0 {
            problems.push("the coordinator has no `chat` span".to_owned());
        }
        if children_of(root, "execute_tool") == 0 {
            problems.push("the coordinator has no `execute_tool` span".to_owned());
        }
    }
    let nested = spans.iter().any(|s| {
        s.operation().0 == "execute_tool"
            && parent_of(s).is_some_and(|p| p.operation().0 == "execute_tool")
    });
    if !nested {
        problems.push("no nested call: no `execute_tool` span is the child of another".to_owned());
    }
    match spans.iter().find(|s| s.name == "invoke_agent specialist") {
        None => problems.push("no `invoke_agent specialist` span (the delegated agent)".to_owned()),
        Some(specialist) => {
            if children_of(specialist, "chat") == 0 {
                problems.push("the specialist has no `chat` span".to_owned());
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A span as Phoenix would give it back, its kind the one Phoenix
    /// infers from the operation.
    fn span(name: &str, id: &str, parent: Option<&str>, attributes: &Value) -> Span {
        let operation = name.split_once(' ').map_or(name, |(op, _)| op);
        let kind = match operation {
            "invoke_agent" => "AGENT",
            "chat" => "LLM",
            _ => "TOOL",
        };
        let mut attributes = attributes.as_object().cloned().unwrap_or_default();
        attributes.insert("gen_ai.operation.name".into(), operation.into());
        Span {
            name: name.to_owned(),
            trace_id: "t1".to_owned(),
            span_id: id.to_owned(),
            parent_id: parent.map(str::to_owned),
            kind: kind.to_owned(),
            start: id.to_owned(),
            attributes,
        }
    }

    fn agent(name: &str, id: &str, parent: Option<&str>) -> Span {
        let full = format!("invoke_agent {name}");
        span(&full, id, parent, &json!({ "gen_ai.agent.name": name }))
    }

    fn chat(id: &str, parent: &str, tokens: &Value) -> Span {
        let attributes = json!({
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": tokens,
            "gen_ai.usage.output_tokens": tokens,
            "llm.token_count.prompt": 7,
            "llm.token_count.completion": 7,
        });
        span("chat m", id, Some(parent), &attributes)
    }

    fn tool(name: &str, call: &str, id: &str, parent: &str) -> Span {
        let attributes = json!({ "gen_ai.tool.name": name, "gen_ai.tool.call.id": call });
        span(
            &format!("execute_tool {name}"),
            id,
            Some(parent),
            &attributes,
        )
    }

    /// The example's tree (see crates/tinyagents/examples/otel.rs).
    fn team() -> Vec<Span> {
        vec![
            agent("coordinator", "a", None),
            chat("b", "a", &json!(7)),
            tool("research", "p1", "c", "a"),
            tool("lookup", "p1/1", "d", "c"),
            tool("specialist", "p2", "e", "a"),
            agent("specialist", "f", Some("e")),
            chat("g", "f", &json!(7)),
            tool("lookup", "p1", "h", "f"),
            chat("i", "a", &json!(7)),
        ]
    }

    #[test]
    fn the_examples_tree_passes() {
        assert_eq!(check_tree(&team(), None), Vec::<String>::new());
        let tree = render_tree(&team());
        assert!(
            tree.contains("\n      execute_tool lookup  [TOOL] call p1/1"),
            "{tree}"
        );
    }

    #[test]
    fn counts_sent_as_text_are_named() {
        let mut spans = team();
        spans[1] = chat("b", "a", &json!("7"));
        spans[0]
            .attributes
            .insert("gen_ai.usage.input_tokens".into(), "21".into());
        let problems = check_tree(&spans, None);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems.iter().any(|p| {
            p.starts_with(r#"`invoke_agent coordinator` has gen_ai.usage.input_tokens "21""#)
        }));
        assert!(
            problems
                .iter()
                .any(|p| p.contains(r#"gen_ai.usage.input_tokens "7", not an integer"#))
        );
    }

    #[test]
    fn a_nested_call_outside_its_caller_is_named() {
        let mut spans = team();
        spans[3] = tool("lookup", "p1/1", "d", "a");
        let problems = check_tree(&spans, None);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("(call p1/1) is a nested call"))
        );
        assert!(problems.iter().any(|p| p.starts_with("no nested call")));
    }

    #[test]
    fn a_delegated_run_outside_its_calling_tool_is_named() {
        let mut spans = team();
        spans[5] = agent("specialist", "f", Some("a"));
        let problems = check_tree(&spans, None);
        assert_eq!(
            problems,
            [
                "the delegated `invoke_agent specialist` is not the child of the calling \
              `execute_tool` span"
            ]
        );
    }

    #[test]
    fn a_second_trace_a_lost_parent_and_another_run_are_named() {
        let mut spans = team();
        spans[8].trace_id = "t2".to_owned();
        spans[6].parent_id = Some("zz".to_owned());
        spans[0]
            .attributes
            .insert("tinyagents.run.id".into(), "run-1".into());
        let problems = check_tree(&spans, Some("run-2")).join("\n");
        assert!(problems.contains("2 traces (t1, t2)"), "{problems}");
        assert!(
            problems.contains("parent span zz is not in Phoenix"),
            "{problems}"
        );
        assert!(
            problems.contains("the specialist has no `chat` span"),
            "{problems}"
        );
        assert!(
            problems.contains(r#"but the example ran "run-2""#),
            "{problems}"
        );
        assert!(check_tree(&[], None)[0].starts_with("no spans"));
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let raw = b"4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(dechunk(raw).as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(dechunk(b"4\r\nab"), None);
    }
}
