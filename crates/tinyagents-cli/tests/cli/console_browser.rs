//! The web console (`tinyagents console`) in a real browser: headless
//! Chromium, driven by `console.spec.mjs` (playwright-core), over a store
//! the command line made. Each test starts its own console, lets the
//! browser act in the pages, then reads the store with the command line
//! to check what the browser did. The approve and doubt tests also take
//! the screenshots (`TINYAGENTS_SCREENSHOTS=docs/console` renews those of
//! the documentation).
//!
//! Peers: Chromium at `/usr/bin/chromium` (Debian's `chromium`) and the
//! pinned `playwright-core` in `.tools/browser` (`cargo xtask peers`
//! installs both). Like the other tests over peers, a missing one fails
//! the test, naming `cargo xtask peers`; nothing is skipped.

use std::io::{BufRead as _, Read as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    Scratch, code, json_lines, kill_resume_after_payment, payments, payments_file, payments_js,
    root, run_id, stderr, stdout,
};

/// The `playwright-core` version `cargo xtask peers` installs.
const PLAYWRIGHT_CORE_VERSION: &str = "1.65.2";

/// The browser and the `node_modules` holding its driver, checked to be
/// there (`TINYAGENTS_CHROMIUM` and `TINYAGENTS_BROWSER_NODE_MODULES`
/// name others).
fn browser_peers() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("TINYAGENTS_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        chromium.is_file(),
        "Chromium is not installed at {}: `cargo xtask peers` installs Debian's chromium",
        chromium.display()
    );
    let modules = std::env::var_os("TINYAGENTS_BROWSER_NODE_MODULES")
        .map_or_else(|| root().join(".tools/browser/node_modules"), PathBuf::from);
    let manifest =
        std::fs::read_to_string(modules.join("playwright-core/package.json")).unwrap_or_default();
    assert!(
        manifest.contains(&format!("\"version\": \"{PLAYWRIGHT_CORE_VERSION}\"")),
        "playwright-core {PLAYWRIGHT_CORE_VERSION} is not installed in {}: `cargo xtask peers` \
         installs it",
        modules.display()
    );
    (chromium, modules)
}

/// A process in a process group of its own, with everything it starts
/// (the console's resumes and their MCP servers, the browser's helpers):
/// the whole group is ended when this is dropped, the test passed or not.
pub(crate) struct Group {
    child: Child,
}

impl Group {
    fn spawn(mut command: Command) -> Self {
        command.process_group(0);
        Self {
            child: command.spawn().unwrap(),
        }
    }

    /// Sends signal `name` to the whole group.
    fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .args([format!("-{name}"), "--".to_owned()])
            .arg(format!("-{}", self.child.id()))
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever of the group is still there (a resume it started).
        self.signal("KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tinyagents console` over a test's store, stopped when dropped (with
/// the resumes it started).
pub(crate) struct Console {
    _group: Group,
    /// The URL it printed, with its token.
    pub(crate) url: String,
    /// Where the resumes it starts write their output.
    logs: PathBuf,
}

impl Console {
    fn start(scratch: &Scratch) -> Self {
        Self::start_with(scratch, &[])
    }

    /// A console over `scratch`'s store, with `more` arguments (`--db URL`
    /// puts it on PostgreSQL).
    pub(crate) fn start_with(scratch: &Scratch, more: &[&str]) -> Self {
        let mut command = scratch.std_command();
        command
            .arg("--store")
            .arg(scratch.store())
            .args([
                "--json",
                "console",
                "--listen",
                "127.0.0.1:0",
                "--by",
                "alice",
            ])
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut group = Group::spawn(command);
        let out = group.child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("the console printed no line ({e})"));
        let said: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(said["type"], "console", "{line}");
        let token = said["token"].as_str().unwrap();
        let url = said["url"].as_str().unwrap().to_owned();
        assert_eq!(
            url,
            format!("http://{}/?token={token}", said["listen"].as_str().unwrap())
        );
        Self {
            _group: group,
            url,
            logs: scratch.store().join("console"),
        }
    }

    /// The output of the resumes and recoveries it started.
    fn logs(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.logs)
            .into_iter()
            .flatten()
            .flatten()
        {
            let body = std::fs::read_to_string(entry.path()).unwrap_or_default();
            text.push_str(&format!("--- {}\n{body}\n", entry.path().display()));
        }
        text
    }

    /// Runs scenario `scenario` of `console.spec.mjs` on `run` with the
    /// extra environment `vars`; fails the test, with what node and the
    /// console's resumes printed, unless every check of it held.
    fn browse(&mut self, scenario: &str, run: &str, vars: &[(&str, &str)]) {
        let (chromium, modules) = browser_peers();
        let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cli/console.spec.mjs");
        let mut command = Command::new("node");
        command
            .arg(spec)
            .env("SCENARIO", scenario)
            .env("CONSOLE_URL", &self.url)
            .env("RUN", run)
            .env("CHROMIUM", chromium)
            .env("PLAYWRIGHT_CORE", modules)
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut node = Group::spawn(command);
        let read = |stream: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut stream) = stream {
                    let _ = stream.read_to_string(&mut text);
                }
                text
            })
        };
        let out = read(node.child.stdout.take().map(|s| Box::new(s) as _));
        let err = read(node.child.stderr.take().map(|s| Box::new(s) as _));
        let deadline = started + Duration::from_secs(150);
        let status = loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        drop(node);
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        let ok = status.is_some_and(|s| s.success());
        assert!(
            ok,
            "scenario {scenario}: node {}\n== stdout\n{out}\n== stderr\n{err}\n== the console's \
             resumes\n{}",
            status.map_or_else(|| "timed out".to_owned(), |s| s.to_string()),
            self.logs()
        );
        eprintln!(
            "scenario {scenario} passed in {:.1}s:\n{out}",
            started.elapsed().as_secs_f64()
        );
    }
}

/// An agents file (`name`) whose agent `payer` pays `to` once, the payment
/// waiting for a person, then answers "paid". `to` may name the run's
/// input (`{input}`); payments take `delay_ms` before and after their
/// write to `payments.txt`; `capture` shows tool payloads.
fn one_payment(scratch: &Scratch, name: &str, to: &str, delay_ms: u32, capture: bool) -> String {
    let path = scratch.path().join(name);
    let body = format!(
        r#"
{capture}
[mcp.payments]
command = "node"
args = ["{js}"]
env = {{ PAYMENTS_FILE = "{effects}", PAY_DELAY_MS = "{delay_ms}" }}

[agents.payer]
model = "scripted"
tools = ["payments_pay"]
script = [
    {{ tool = "payments_pay", arguments = {{ to = "{to}" }} }},
    {{ text = "paid" }},
]

[agents.payer.policy]
require_approval = ["payments_pay"]
"#,
        capture = if capture {
            "[capture]\ntool_io = true\n"
        } else {
            ""
        },
        js = payments_js().to_string_lossy(),
        effects = scratch.path().join("payments.txt").to_string_lossy(),
    );
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}

/// Runs `args` in `scratch`'s store, expecting exit code `want`.
fn run_ok(scratch: &Scratch, args: &[&str], want: i32) -> Output {
    let output = scratch.run(args);
    assert_eq!(code(&output), want, "{args:?}: {}", stderr(&output));
    output
}

/// A run of `file` on `input` that waits for a person; its id.
fn waiting_run(scratch: &Scratch, file: &str, input: &str, session: Option<&str>) -> String {
    let mut args = vec!["--json", "run", file, input];
    if let Some(session) = session {
        args.extend(["--session", session]);
    }
    run_id(&json_lines(&run_ok(scratch, &args, 3)))
}

/// What `show RUN --json` prints: the ledger rows, the waiting calls, the
/// run.
fn show(scratch: &Scratch, run: &str) -> Vec<Value> {
    json_lines(&run_ok(scratch, &["--json", "show", run], 0))
}

/// The decision on call `call` of `run`, from `show --json` (`null` when
/// none).
fn decision(scratch: &Scratch, run: &str, call: &str) -> Value {
    show(scratch, run)
        .into_iter()
        .find(|l| l["type"] == "waiting_call" && l["call_id"] == call)
        .unwrap_or_else(|| panic!("call {call} of {run} never waited"))["decision"]
        .clone()
}

/// The status `show --json` gives `run`.
fn status(scratch: &Scratch, run: &str) -> Value {
    show(scratch, run)
        .into_iter()
        .find(|l| l["type"] == "run")
        .unwrap()["status"]
        .clone()
}

/// Where the screenshots go: `TINYAGENTS_SCREENSHOTS` (relative to the
/// repository's root; `docs/console` renews the documentation's), else a
/// directory under the target dir, so every run takes them and the work
/// tree does not change.
fn shots() -> String {
    match std::env::var_os("TINYAGENTS_SCREENSHOTS").filter(|d| !d.is_empty()) {
        Some(dir) => root().join(dir).to_string_lossy().into_owned(),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("console-screenshots")
            .to_string_lossy()
            .into_owned(),
    }
}

/// A run waiting for approval is in the inbox with its arguments, is
/// approved there with a reason, and the console resumes it (a process of
/// its own): the run page's tree shows the slow payment running, then
/// done, and the run finished, without the test reloading it. The store
/// has the decision by alice with the reason, the payment made once.
#[test]
fn approving_in_the_inbox_resumes_the_run_and_its_tree_follows_live() {
    let scratch = Scratch::new();
    // An earlier run, finished, for the runs list.
    let quick = one_payment(&scratch, "quick.toml", "{input}", 5, true);
    let earlier = waiting_run(&scratch, &quick, "globex", Some("globex"));
    run_ok(&scratch, &["approve", &earlier, "--by", "bob"], 0);
    run_ok(&scratch, &["--json", "resume", &earlier], 0);
    let slow = one_payment(&scratch, "slow.toml", "{input}", 1500, true);
    let run = waiting_run(&scratch, &slow, "acme", Some("acme-invoices"));

    let mut console = Console::start(&scratch);
    let shots = shots();
    console.browse(
        "approve",
        &run,
        &[("SESSION", "acme-invoices"), ("SHOTS", &shots)],
    );
    drop(console);

    let decided = decision(&scratch, &run, "p1");
    assert_eq!(decided["approved"], true, "{decided}");
    assert_eq!(decided["by"], "alice", "{decided}");
    assert_eq!(decided["reason"], "invoice 42 checked", "{decided}");
    assert_eq!(status(&scratch, &run), "completed");
    assert_eq!(payments(scratch.path()), ["globex", "acme"]);
}

/// A call denied in the inbox with a reason: the resumed run's tree shows
/// the call failed with the denial's words, the store has the denial by
/// alice, and nothing was paid.
#[test]
fn denying_in_the_inbox_fails_the_call_with_the_reason_and_pays_nothing() {
    let scratch = Scratch::new();
    let file = one_payment(&scratch, "pay.toml", "{input}", 5, true);
    let run = waiting_run(&scratch, &file, "acme", None);

    let mut console = Console::start(&scratch);
    console.browse("deny", &run, &[]);
    drop(console);

    let decided = decision(&scratch, &run, "p1");
    assert_eq!(decided["approved"], false, "{decided}");
    assert_eq!(decided["by"], "alice", "{decided}");
    assert_eq!(decided["reason"], "acme is not a customer", "{decided}");
    assert_eq!(status(&scratch, &run), "completed");
    assert!(
        payments(scratch.path()).is_empty(),
        "{:?}",
        payments(scratch.path())
    );
}

/// A resume killed during the approved payment (after its effect) leaves
/// the call in doubt: /doubt lists it with its idempotency key; what alice
/// found (it happened, with a note) is recorded from the page, the call
/// leaves /doubt, and the store has the finding.
#[test]
fn a_call_in_doubt_is_listed_with_its_key_and_resolved_from_the_page() {
    let scratch = Scratch::new();
    let file = payments_file(scratch.path(), 1500);
    let run = waiting_run(&scratch, file.to_str().unwrap(), "acme", None);
    run_ok(
        &scratch,
        &["approve", &run, "--reason", "invoice checked"],
        0,
    );
    kill_resume_after_payment(&scratch, &run);
    let doubts = json_lines(&run_ok(&scratch, &["--json", "runs", "--in-doubt"], 0));
    let doubt = doubts
        .iter()
        .find(|d| d["run_id"] == run.as_str() && d["call_id"] == "p2")
        .unwrap_or_else(|| panic!("p2 is not in doubt: {doubts:?}"));
    let key = doubt["idempotency_key"].as_str().unwrap().to_owned();

    let mut console = Console::start(&scratch);
    let shots = shots();
    console.browse("doubt", &run, &[("KEY", &key), ("SHOTS", &shots)]);
    drop(console);

    let left = json_lines(&run_ok(&scratch, &["--json", "runs", "--in-doubt"], 0));
    assert!(left.is_empty(), "{left:?}");
    let row = show(&scratch, &run)
        .into_iter()
        .find(|l| l["call_id"] == "p2" && l["tool"] == "payments_pay" && l.get("type").is_none())
        .unwrap();
    assert_eq!(row["in_doubt"], false, "{row}");
    assert!(
        row["effect"]
            .as_str()
            .is_some_and(|e| e.contains("happened")),
        "{row}"
    );
    let shown = stdout(&run_ok(&scratch, &["show", &run], 0));
    assert!(
        shown.contains("found:") && shown.contains("(seen in the bank statement)"),
        "{shown}"
    );
    assert_eq!(payments(scratch.path()), ["acme"], "paid once");
}

/// Without the token every page is refused (401); a form of another site
/// (another origin) that posts a decision to the console, in the browser
/// that holds the console's cookie, is refused (403) and records nothing:
/// the run still waits.
#[test]
fn the_console_refuses_requests_without_its_token_and_forms_from_another_site() {
    let scratch = Scratch::new();
    let file = one_payment(&scratch, "pay.toml", "{input}", 5, true);
    let run = waiting_run(&scratch, &file, "acme", None);

    let mut console = Console::start(&scratch);
    console.browse("guard", &run, &[]);
    drop(console);

    assert_eq!(decision(&scratch, &run, "p1"), Value::Null);
    assert_eq!(status(&scratch, &run), "awaiting_approval");
    assert!(payments(scratch.path()).is_empty());
}

/// With capture off (no `[capture]` in the file) neither the inbox nor the
/// run page holds the call's argument value anywhere in its HTML; both say
/// the arguments are withheld.
#[test]
fn with_capture_off_the_pages_show_no_argument_value() {
    const SECRET: &str = "zebra-7Q4-never-shown";
    let scratch = Scratch::new();
    let file = one_payment(&scratch, "pay.toml", SECRET, 5, false);
    let run = waiting_run(&scratch, &file, "go", None);

    let mut console = Console::start(&scratch);
    console.browse("withheld", &run, &[("SECRET", SECRET)]);
    drop(console);

    assert_eq!(status(&scratch, &run), "awaiting_approval");
    // The command line agrees: its record holds no argument either.
    let shown = stdout(&run_ok(&scratch, &["show", &run], 0));
    assert!(!shown.contains(SECRET), "{shown}");
}
