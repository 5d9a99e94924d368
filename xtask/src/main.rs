//! Build tooling for the tinyagents workspace: `cargo xtask ci` is the gate
//! that CI runs, `cargo xtask bench` runs the benchmarks, `cargo xtask
//! sim` the simulator and `cargo xtask fuzz` the fuzz targets.
//!
//! Plain std on purpose, serde_json aside (reading Phoenix's answers in
//! `cargo xtask interop phoenix`, over a loopback HTTP/1.1 client of our
//! own): the gate must build fast on a fresh machine.

// A command-line tool: printing to stdout is its job.
#![allow(clippy::print_stdout)]

mod baseline;
mod features;
mod instr;
mod interop;
mod peers;
mod sim;

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci [STEP...]   the CI gate, in order, stopping at the first failure:
                 fmt, clippy, features (clippy over the facade without
                 default features and with each alone), tests (nextest +
                 doctests; installs with npm, when missing, the pinned
                 @copilotkit/aimock into .tools/aimock and the pinned
                 @modelcontextprotocol/server-everything, server-filesystem
                 and sdk into .tools/mcp), doc, examples (every example of
                 the facade, offline), interop (`interop phoenix`), sim,
                 loom, instructions (`bench --instructions --check seq
                 seq-budget par nested stack seq-ledger=50`; installs Debian's valgrind
                 when missing), deny;
                 naming steps runs only those (`cargo xtask ci clippy tests`)
  bench [ARGS]   cargo bench --workspace over the bench targets; ARGS are
                 passed to cargo bench (after `--`: to the bench binaries)
  bench --instructions [--runs K] [WORKLOAD[=N]...]
                 instructions (callgrind) and heap allocations (memcheck) per
                 tool call of the agent-loop workloads, beside the floor (the
                 argument check, parse and tool no harness can avoid); each
                 workload runs with N and 2N calls and the difference is
                 divided by N. Workloads: floor (1000), floor-registry
                 (1000: the floor checking with RegisteredTool::validate),
                 seq (400), par (1000), nested (1000), stack (400: seq with
                 10 middlewares). Instructions are the median of K (3)
                 callgrind runs. The memory workload parked (1000) parks N
                 and 2N runs in a model call that never answers: heap bytes
                 held per parked run (memcheck's \"in use at exit\", target
                 <= 8 KiB) and the size of a run's future; it runs under
                 memcheck only, and alone it needs no floor. Delegated
                 calls (the orchestrator's delegation bench): delegate
                 (400: no session), session (50 and 400: one session, in
                 memory), session-sqlite (50 and 400: in SQLite); the
                 ratio of a session workload's two sizes is checked
                 (target <= 1.3). Needs valgrind (or VALGRIND=/path/to/it)
  bench --instructions --check [--runs K] [WORKLOAD[=N]...]
                 the same, then each workload's instructions and allocations
                 per call against xtask/instructions-baseline.json
                 (instructions outside malloc/free, whose share moves
                 between runs): fails (with a table: baseline, measured,
                 change, limit) on a figure above the baseline + 3 % or a
                 workload the baseline lacks; a figure 3 % better passes with a note to lower the
                 baseline. Without WORKLOAD: the baseline's workloads. Never
                 writes the file
  bench --instructions --write-baseline [--runs K] [WORKLOAD[=N]...]
                 measures and rewrites xtask/instructions-baseline.json (the
                 figures, valgrind's and rustc's versions, the commit, the
                 date); without WORKLOAD, the workloads it lists already (when
                 there is none: all but seq-sqlite and session-sqlite,
                 whose counts are not steady). Commit it on its own
  crash [--trials N] [--seed S]
                 the randomized crash campaign (tests/crash_campaign): N
                 trials (default 200) of a real agent process killed with
                 SIGKILL at a seeded random moment, recovered (sometimes
                 killed again), and checked: no never-replayed effect twice,
                 every effect settled, reconciled or listed in doubt; prints
                 the share of \"outcome unknown\" answers whose payment had
                 happened, without and with reconciliation. In release.
                 Then the run store's campaigns on the approval path
                 (issue 29): N trials through the command line (approve,
                 resume, recover killed at random) and N/10 through
                 `tinyagents worker` processes (PostgreSQL)
  sim [--release] [--seeds N | --seed S | --for DURATION] [--from S]
      [--mutation NAME] [--verbose]
                 the deterministic simulator (crates/tinyagents-sim): seeded
                 random histories of the whole harness with injected faults
                 on tokio's paused clock, seven invariants checked after
                 each; a failure prints its seed, a readable account and a
                 shrunk history, and replays with --seed S. --mutation plants
                 one of the harness's test mutations (see docs/simulation.md)
  build-times [--target-dir DIR]
                 the default and the minimal (--no-default-features) facade:
                 crates in its normal dependency tree, then a timed clean
                 `cargo build -p tinyagents` in DIR/default and DIR/minimal
                 (DIR: /tmp/tinyagents-build-times; emptied first), with the
                 packages compiled
  fuzz TARGET [SECONDS]
                 a cargo-fuzz target (fuzz/: parsers, suspended_run,
                 checkpoint, ledger_rows, prepare_arguments) for SECONDS (600), after
                 writing its first corpus; installs cargo-fuzz
  interop phoenix
                 the OTLP export against Arize Phoenix: installs the pinned
                 arize-phoenix into .tools/phoenix/venv (python3 -m venv, pip)
                 when missing, starts it on loopback in a temporary
                 directory, runs the otel example exporting to it, reads the
                 spans back through its REST API and checks the tree
  peers          installs what the tests and examples run against, when
                 missing: aimock, the MCP servers and playwright-core (npm,
                 into .tools/), tmux (Debian's package, for the command
                 line's live-view tests), Chromium (Debian's, for the web
                 console's tests), PostgreSQL's server (Debian's
                 postgresql, without its default cluster, for
                 tinyagents-postgres's throwaway ones) and valgrind
                 (Debian's, for the instruction gate)
  help           this text";

/// cargo-deny release known to build with the pinned toolchain (1.95).
const CARGO_DENY_VERSION: &str = "0.20.2";

/// cargo-nextest release known to build with the pinned toolchain (1.95),
/// installed when missing.
const CARGO_NEXTEST_VERSION: &str = "0.9.143";

fn main() -> ExitCode {
    let args: Vec<String> = env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (command, rest) = args
        .split_first()
        .map_or((None, &[][..]), |(c, r)| (Some(c), r));
    match command.map(String::as_str) {
        Some("ci") => ci(rest),
        Some("bench") => bench(rest),
        Some("crash") => crash(rest),
        Some("sim") => sim::sim(rest),
        Some("fuzz") => sim::fuzz(rest),
        Some("build-times") => features::build_times(rest),
        Some("interop") => interop::interop(rest),
        Some("peers") => match peers::ensure_all() {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("xtask peers: {why}");
                ExitCode::FAILURE
            }
        },
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            if let Some(other) = other {
                eprintln!("xtask: unknown command `{other}`\n");
            }
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// True under CI (`CI` set to anything but `false` or empty), where the
/// gate runs once on a fresh machine.
fn on_ci() -> bool {
    env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// The target directory cargo builds into: `$CARGO_TARGET_DIR`, else
/// `target/` under the workspace root.
fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// One line on the disk the target directory is on: its free space and,
/// `with_size`, the directory's size, read from `df` and `du` (nothing
/// when they cannot tell). A build that runs out of disk fails far from the
/// cause; this line names it.
fn print_disk(when: &str, with_size: bool) {
    let target = target_dir();
    let probe = if target.exists() {
        target.clone()
    } else {
        root()
    };
    // `df -Pk`: a header line, then "filesystem total used available ...".
    let free = kib_from(Command::new("df").arg("-Pk").arg(&probe), 1, 3);
    // `du -sk`: "kib<TAB>path".
    let used = with_size
        .then(|| kib_from(Command::new("du").arg("-sk").arg(&target), 0, 0))
        .flatten();
    let gib = |kib: u64| format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0));
    match (free, used) {
        (Some(free), Some(used)) => println!(
            "disk {when}: {} free, {} in {}",
            gib(free),
            gib(used),
            target.display()
        ),
        (Some(free), None) => println!("disk {when}: {} free at {}", gib(free), probe.display()),
        _ => {}
    }
}

/// The number in column `column` of line `line` of what `command` prints.
fn kib_from(command: &mut Command, line: usize, column: usize) -> Option<u64> {
    let output = command.stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .nth(line)?
        .split_whitespace()
        .nth(column)?
        .parse()
        .ok()
}

/// The cargo that runs us (so the toolchain pinned in rust-toolchain.toml).
fn cargo_program() -> OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `cargo`, run from the workspace root, without the variables `cargo run`
/// set for the xtask itself (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, …):
/// build scripts that watch them (ring's) would otherwise see them change
/// between a build started here and one started by hand, and rebuild.
fn cargo_command() -> Command {
    let mut cmd = Command::new(cargo_program());
    if on_ci() && env::var_os("CARGO_INCREMENTAL").is_none() {
        // A build made once on a fresh machine gains nothing from
        // incremental caches, and they were half of its target directory.
        cmd.env("CARGO_INCREMENTAL", "0");
    }
    for (key, _) in env::vars_os() {
        let name = key.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                &*name,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(&key);
        }
    }
    cmd.current_dir(root());
    cmd
}

/// One command line, printable as a user would type it.
struct Cmd {
    envs: Vec<(&'static str, String)>,
    /// Variables removed from the command's environment.
    unset: Vec<&'static str>,
    args: Vec<OsString>,
}

/// `cargo ARGS...`, run from the workspace root.
fn cargo<I, S>(args: I) -> Cmd
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    Cmd {
        envs: Vec::new(),
        unset: Vec::new(),
        args: args.into_iter().map(Into::into).collect(),
    }
}

impl Cmd {
    fn env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.envs.push((key, value.into()));
        self
    }

    fn env_remove(mut self, key: &'static str) -> Self {
        self.unset.push(key);
        self
    }

    /// Runs to completion with inherited stdio; `Err` says what went wrong.
    fn run(&self) -> Result<(), String> {
        let mut command = cargo_command();
        for key in &self.unset {
            command.env_remove(key);
        }
        let status = command
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .status()
            .map_err(|e| format!("`{self}` could not start: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{self}` failed ({status})"))
        }
    }

    /// Runs silently; true when it exits 0 (used to probe for tools).
    fn succeeds_quietly(&self) -> bool {
        cargo_command()
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for k in &self.unset {
            write!(f, "env -u {k} ")?;
        }
        for (k, v) in &self.envs {
            write!(f, "{k}=\"{v}\" ")?;
        }
        write!(f, "cargo")?;
        for a in &self.args {
            let a = a.to_string_lossy();
            if a.contains([' ', '*']) {
                write!(f, " '{a}'")?;
            } else {
                write!(f, " {a}")?;
            }
        }
        Ok(())
    }
}

/// A cargo subcommand (`cargo SUBCOMMAND`) that a step needs.
struct Tool {
    subcommand: &'static str,
    krate: &'static str,
    version: Option<&'static str>,
}

impl Tool {
    /// Installs the tool with `cargo install --locked` when it is missing.
    fn ensure(&self) -> Result<(), String> {
        if cargo([self.subcommand, "--version"]).succeeds_quietly() {
            return Ok(());
        }
        println!("{} is missing: installing it", self.krate);
        let mut install = cargo(["install", self.krate, "--locked"]);
        if let Some(v) = self.version {
            install.args.extend(["--version".into(), v.into()]);
        }
        println!("$ {install}");
        let started = Instant::now();
        install.run()?;
        println!("installed {} in {}", self.krate, secs(started.elapsed()));
        Ok(())
    }
}

/// One step of the gate: a name, tools it needs, commands run in order.
struct Step {
    name: &'static str,
    /// Servers the step's tests run against, installed when missing.
    peers: Vec<fn() -> Result<(), String>>,
    tools: Vec<Tool>,
    commands: Vec<Cmd>,
    /// Checks of the xtask's own, run after the commands.
    checks: Vec<fn() -> Result<(), String>>,
    note: Option<&'static str>,
}

impl Step {
    fn new(name: &'static str, commands: Vec<Cmd>) -> Self {
        Self {
            name,
            peers: Vec::new(),
            tools: Vec::new(),
            commands,
            checks: Vec::new(),
            note: None,
        }
    }

    fn run(&self) -> Result<(), String> {
        for peer in &self.peers {
            peer()?;
        }
        for tool in &self.tools {
            tool.ensure()?;
        }
        for cmd in &self.commands {
            println!("$ {cmd}");
            cmd.run()?;
        }
        for check in &self.checks {
            check()?;
        }
        if let Some(note) = self.note {
            println!("note: {note}");
        }
        Ok(())
    }
}

fn ci_steps() -> Vec<Step> {
    let mut steps = vec![
        Step::new("fmt", vec![cargo(["fmt", "--all", "--check"])]),
        Step::new(
            "clippy",
            vec![cargo([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])],
        ),
        features::ci_step(),
        Step {
            peers: vec![
                peers::ensure_aimock,
                peers::ensure_mcp_peers,
                peers::ensure_browser_driver,
                peers::ensure_tmux,
                peers::ensure_chromium,
                peers::ensure_postgres,
            ],
            tools: vec![Tool {
                subcommand: "nextest",
                krate: "cargo-nextest",
                version: Some(CARGO_NEXTEST_VERSION),
            }],
            ..Step::new(
                "tests",
                vec![
                    cargo(["nextest", "run", "--workspace"]),
                    cargo(["test", "--workspace", "--doc"]),
                ],
            )
        },
        Step::new(
            "doc",
            vec![cargo(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings")],
        ),
    ];
    steps.push(examples_step());
    // The OTLP export against a real receiver, after `examples` (which
    // builds the otel example): about 70 s cold (installing Phoenix), 11 s
    // warm.
    steps.push(Step {
        checks: vec![interop::phoenix],
        ..Step::new("interop", Vec::new())
    });
    steps.push(sim::ci_step());
    let root = root();
    if root.join("crates/tinyagents-core/tests/loom.rs").exists() {
        let target = target_dir().join("loom").to_string_lossy().into_owned();
        steps.push(Step::new(
            "loom",
            vec![
                cargo([
                    "test",
                    "-p",
                    "tinyagents-core",
                    "--release",
                    "--test",
                    "loom",
                ])
                .env("RUSTFLAGS", "--cfg tinyagents_loom")
                .env("CARGO_TARGET_DIR", target),
            ],
        ));
    }
    // The instruction gate (issue 32): instructions and allocations per
    // call of a few workloads against xtask/instructions-baseline.json,
    // failing above +3 %. It builds the harness's bench in release.
    steps.push(Step {
        peers: vec![peers::ensure_valgrind],
        checks: vec![instr::ci_check],
        ..Step::new("instructions", Vec::new())
    });
    steps.push(Step {
        tools: vec![Tool {
            subcommand: "deny",
            krate: "cargo-deny",
            version: Some(CARGO_DENY_VERSION),
        }],
        note: Some(
            "advisories check skipped: the RustSec advisory database cannot be \
             fetched from this machine (run `cargo deny check advisories` where it can)",
        ),
        ..Step::new(
            "deny",
            vec![cargo(["deny", "check", "bans", "licenses", "sources"])],
        )
    });
    steps
}

/// The examples gallery of the facade, each run offline on its scripted
/// models (with `TINYAGENTS_MODEL` removed, so a developer's real model is
/// never called by the gate).
const EXAMPLES: [&str; 9] = [
    "first",
    "quickstart",
    "team",
    "approval",
    "recovery",
    "typed_output",
    "streaming",
    "mcp",
    "otel",
];

/// The features an example needs beyond the facade's defaults.
fn example_features(example: &str) -> Option<&'static str> {
    match example {
        "mcp" => Some("mcp"),
        "otel" => Some("otel"),
        _ => None,
    }
}

fn examples_step() -> Step {
    let runs = EXAMPLES
        .iter()
        .map(|example| {
            let mut args = vec!["run", "-q", "-p", "tinyagents", "--example", example];
            if let Some(features) = example_features(example) {
                args.extend(["--features", features]);
            }
            cargo(args).env_remove("TINYAGENTS_MODEL")
        })
        .collect();
    Step::new("examples", runs)
}

fn ci(only: &[String]) -> ExitCode {
    let mut steps = ci_steps();
    if let Some(unknown) = only.iter().find(|o| !steps.iter().any(|s| s.name == *o)) {
        let names: Vec<_> = steps.iter().map(|s| s.name).collect();
        eprintln!(
            "xtask ci: no step `{unknown}` (steps: {})",
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    if !only.is_empty() {
        steps.retain(|s| only.iter().any(|o| o == s.name));
    }
    let total = steps.len();
    if on_ci() {
        println!("CI: incremental compilation off (CARGO_INCREMENTAL=0)");
    }
    print_disk("before", false);
    let started = Instant::now();
    for (i, step) in steps.iter().enumerate() {
        println!("\n==> [{}/{total}] {}", i + 1, step.name);
        let step_started = Instant::now();
        if let Err(why) = step.run() {
            println!(
                "\nxtask ci: FAILED at step {}/{total} ({}) after {}: {why}",
                i + 1,
                step.name,
                secs(started.elapsed())
            );
            print_disk("after", true);
            return ExitCode::FAILURE;
        }
        println!("<== {} ok in {}", step.name, secs(step_started.elapsed()));
    }
    print_disk("after", true);
    let names: Vec<_> = steps.iter().map(|s| s.name).collect();
    println!(
        "\nxtask ci: all {total} step{} passed in {} ({})",
        if total == 1 { "" } else { "s" },
        secs(started.elapsed()),
        names.join(", ")
    );
    ExitCode::SUCCESS
}

/// `cargo bench --workspace` over the bench targets (`harness = false`
/// binaries that print their own figures).
fn bench(extra: &[String]) -> ExitCode {
    if let Some(at) = extra.iter().position(|a| a == "--instructions") {
        let mut rest = extra.to_vec();
        rest.remove(at);
        return instr::instructions(&rest);
    }
    if !has_bench_targets() {
        println!("xtask bench: the workspace has no bench targets yet; nothing to run");
        return ExitCode::SUCCESS;
    }
    let mut cmd = cargo(["bench", "--workspace"]);
    // Only the bench targets, unless the caller picks some: the libraries'
    // unit tests have nothing to measure.
    let picks_targets = extra
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a.starts_with("--bench"));
    if !picks_targets {
        cmd.args.extend(["--bench".into(), "*".into()]);
    }
    cmd.args.extend(extra.iter().map(OsString::from));
    println!("$ {cmd}");
    match cmd.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            println!("xtask bench: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask crash [--trials N] [--seed S]`: the crash campaign, with
/// more trials than the CI gate's, in release.
fn crash(args: &[String]) -> ExitCode {
    let mut trials = "200".to_owned();
    let mut seed = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = args.next().filter(|v| v.parse::<u64>().is_ok());
        match (arg.as_str(), value) {
            ("--trials", Some(n)) => trials.clone_from(n),
            ("--seed", Some(s)) => seed = Some(s.clone()),
            _ => {
                eprintln!("xtask crash: expected --trials N and --seed S (numbers), got `{arg}`");
                return ExitCode::from(2);
            }
        }
    }
    let mut cmd = cargo([
        "test",
        "--release",
        "-p",
        "tinyagents-tests",
        "--test",
        "crash_campaign",
        "--",
        "--exact",
        "crash_campaign_never_repeats_an_effect_and_keeps_every_doubt_in_view",
        "--nocapture",
    ])
    .env("TINYAGENTS_CAMPAIGN_TRIALS", trials.clone());
    if let Some(seed) = &seed {
        cmd = cmd.env("TINYAGENTS_CAMPAIGN_SEED", seed.clone());
    }
    println!("$ {cmd}");
    if let Err(why) = cmd.run() {
        println!("xtask crash: {why}");
        return ExitCode::FAILURE;
    }
    // The approval path, through the command line and through workers
    // (issue 29): the run store's campaigns, with as many trials (a tenth
    // of them through workers, whose lease makes each trial longer).
    let worker_trials = (trials.parse::<u64>().unwrap_or(200) / 10)
        .max(1)
        .to_string();
    for test in [
        "crash::randomized_kills_on_the_approval_path_strand_no_run_and_repeat_nothing",
        "postgres::randomized_worker_kills_on_the_approval_path_strand_no_run_and_repeat_nothing",
    ] {
        let mut cmd = cargo([
            "test",
            "-p",
            "tinyagents-cli",
            "--test",
            "cli",
            "--",
            "--exact",
            test,
            "--nocapture",
        ])
        .env("TINYAGENTS_CRASH_TRIALS", trials.clone())
        .env("TINYAGENTS_WORKER_CRASH_TRIALS", worker_trials.clone());
        if let Some(seed) = &seed {
            cmd = cmd.env("TINYAGENTS_CRASH_SEED", seed.clone());
        }
        println!("$ {cmd}");
        if let Err(why) = cmd.run() {
            println!("xtask crash: {why}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Whether any workspace member has a `[[bench]]` target.
fn has_bench_targets() -> bool {
    let output = cargo_command()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output();
    match output {
        Ok(out) if out.status.success() => {
            String::from_utf8_lossy(&out.stdout).contains(r#""kind":["bench"]"#)
        }
        // If metadata fails, let cargo bench report the real error.
        _ => true,
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
