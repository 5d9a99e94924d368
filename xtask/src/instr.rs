//! `cargo xtask bench --instructions`: instructions and heap allocations
//! per tool call, counted by valgrind instead of timed.
//!
//! Each workload of the agent-loop bench (`agent_loop --instr <workload>
//! <n>`) runs twice, with `n` and `2n` calls, under callgrind (instructions)
//! and under memcheck (its "total heap usage: N allocs" line). The figure per
//! call is the difference of the two runs divided by `n`: process start-up,
//! the runtime and the harness's construction are the same in both and
//! cancel out. Counts are the same on every run of the same binary, whatever
//! else the machine is doing, so they can be compared across commits where
//! timings cannot.
//!
//! `parked` is a memory workload: the bench parks `n` (then `2n`) runs
//! inside a model call that never answers and exits holding them; memcheck's
//! "in use at exit" difference divided by `n` is what one idle run holds.
//! It runs under memcheck only.
//!
//! `seq-ledger` and `seq-sqlite` are `seq` with the memory and the SQLite
//! effect ledger (a file under the target directory). Each runs at 50 and
//! 1000 calls: the ratio of the two is the check that a call's cost with a
//! ledger (its rows and its turn's checkpoint) does not grow with the run,
//! and `seq-ledger` less `seq` is what the memory ledger adds to a call.
//!
//! The delegation workloads (`delegate`, `session`, `session-sqlite`) are
//! the orchestrator's delegation bench (`delegation --instr <workload>
//! <n>`): `n` delegated calls of a parent agent, without a session or in
//! one session whose child conversation grows by two messages a call. The
//! session workloads run at 50 and 400 calls, and the ratio of the two is
//! the check that a call's cost does not grow with the conversation.
//!
//! `--check` turns the figures into a gate: each workload's instructions
//! and allocations per call (bytes held per run for `parked`) against the
//! baseline file `xtask/instructions-baseline.json`, failing above +3 %;
//! `--write-baseline` rewrites that file, which the check never does. The
//! file's format and the rules are in [`crate::baseline`]. The CI gate's
//! step (`cargo xtask ci instructions`, [`ci_check`]) checks
//! [`CI_WORKLOADS`] with [`CI_RUNS`] callgrind runs each.

use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::baseline::{BASELINE_FILE, Baseline, Figures, LIMIT_PERCENT, Verdict, compare, round2};
use crate::{cargo_command, root, secs};

/// One row of the table: a workload of the bench and its base size.
#[derive(Clone, Debug)]
struct Workload {
    /// The bench's name for it (`agent_loop --instr <name> <n>`).
    name: String,
    /// The smaller sample; the larger is twice this.
    n: u64,
}

/// A bench binary the workloads run in: (package, bench target).
type BenchTarget = (&'static str, &'static str);

/// The agent-loop bench of the harness.
const AGENT_LOOP: BenchTarget = ("tinyagents-harness", "agent_loop");

/// The orchestrator's delegation bench.
const DELEGATION: BenchTarget = ("tinyagents-orchestrator", "delegation");

/// The workloads of the delegation bench; the others are the agent loop's.
const DELEGATION_WORKLOADS: [&str; 3] = ["delegate", "session", "session-sqlite"];

impl Workload {
    /// Whether it is measured for memory held (memcheck only), not per call.
    fn is_memory(&self) -> bool {
        MEMORY.contains(&self.name.as_str())
    }

    /// The bench binary that runs it.
    fn bench(&self) -> BenchTarget {
        if DELEGATION_WORKLOADS.contains(&self.name.as_str()) {
            DELEGATION
        } else {
            AGENT_LOOP
        }
    }

    fn label(&self) -> String {
        match self.name.as_str() {
            "floor" => "floor (is_valid + from_value + add)".to_owned(),
            "parked" => "parked run (bytes held)".to_owned(),
            "floor-registry" => "floor with RegisteredTool::validate".to_owned(),
            "stack" => format!("seq {} + 10 middlewares", self.n),
            "seq-budget" => format!("seq {} + token and money caps", self.n),
            "seq-ledger" => format!("seq {} + memory ledger", self.n),
            "seq-sqlite" => format!("seq {} + SQLite ledger", self.n),
            name => format!("{name} {}", self.n),
        }
    }
}

/// The default rows: the floor first, then the loop's workloads, then the
/// delegation workloads, then the memory workload.
fn default_workloads() -> Vec<Workload> {
    [
        ("floor", 1000),
        ("floor-registry", 1000),
        ("seq", 400),
        ("seq-budget", 400),
        ("par", 1000),
        ("nested", 1000),
        ("stack", 400),
        ("seq-ledger", 50),
        ("seq-ledger", 1000),
        ("seq-sqlite", 50),
        ("seq-sqlite", 1000),
        ("delegate", 400),
        ("session", 50),
        ("session", 400),
        ("session-sqlite", 50),
        ("session-sqlite", 400),
        ("parked", 1000),
    ]
    .into_iter()
    .map(|(name, n)| Workload {
        name: name.to_owned(),
        n,
    })
    .collect()
}

const KNOWN: [&str; 13] = [
    "floor",
    "floor-registry",
    "seq",
    "seq-budget",
    "seq-ledger",
    "seq-sqlite",
    "par",
    "nested",
    "stack",
    "parked",
    "delegate",
    "session",
    "session-sqlite",
];

/// Workloads left out of the baseline unless named: their counts move
/// between runs of the same binary by more than the gate's 3 %, inside
/// SQLite as much as outside (`seq-sqlite 50`: 170,000 to 185,000
/// instructions a call outside the allocator in five runs; run one at a
/// time, 1.8 %), so a check of them would fail at random.
const UNSTEADY: [&str; 2] = ["seq-sqlite", "session-sqlite"];

/// The workloads a first baseline records: the defaults less [`UNSTEADY`].
fn baseline_defaults() -> Vec<Workload> {
    default_workloads()
        .into_iter()
        .filter(|w| !UNSTEADY.contains(&w.name.as_str()))
        .collect()
}

/// The workloads measured for the memory they hold, under memcheck only.
const MEMORY: [&str; 1] = ["parked"];

/// The most a parked run may hold: 8 KiB, so 10,000 idle runs fit in
/// 100 MB (80 MiB, with room for the allocator's own overhead).
const PARKED_TARGET_BYTES: f64 = 8.0 * 1024.0;

/// Callgrind runs per sample. The allocator's share of the instructions
/// varies between runs of the same binary (by a few hundred instructions
/// per call in `nested`, whose tool awaits the loop): the median of three
/// is steady. Allocation counts do not vary; memcheck runs once.
const DEFAULT_RUNS: u32 = 3;

/// What `bench --instructions` does with the figures it measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Prints the tables and the targets.
    Report,
    /// `--check`: also compares them with the baseline file, and fails
    /// above it (see [`crate::baseline`]); never writes the file.
    Check,
    /// `--write-baseline`: also rewrites the baseline file with them.
    WriteBaseline,
}

/// The command line of `bench --instructions`.
#[derive(Debug)]
struct Options {
    workloads: Vec<Workload>,
    /// Whether workloads were named (else: the defaults, or the baseline's
    /// with `--check` and `--write-baseline`).
    named: bool,
    runs: u32,
    mode: Mode,
}

/// Parses `[--runs K] [--check | --write-baseline] WORKLOAD[=N]...`; the
/// floor is measured whenever an instruction workload is.
fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut runs = DEFAULT_RUNS;
    let mut mode = Mode::Report;
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => {
                runs = args
                    .next()
                    .and_then(|k| k.parse().ok())
                    .filter(|k| *k > 0)
                    .ok_or("--runs takes a positive number")?;
            }
            "--check" | "--write-baseline" => {
                let wanted = if arg == "--check" {
                    Mode::Check
                } else {
                    Mode::WriteBaseline
                };
                if mode != Mode::Report && mode != wanted {
                    return Err(
                        "--check and --write-baseline exclude each other: the check never \
                         writes the baseline"
                            .to_owned(),
                    );
                }
                mode = wanted;
            }
            _ => rest.push(arg.clone()),
        }
    }
    Ok(Options {
        workloads: parse_workloads(&rest)?,
        named: !rest.is_empty(),
        runs,
        mode,
    })
}

/// Parses `WORKLOAD[=N]...`; the floor is measured whenever an instruction
/// workload of the agent loop is (the per-call table compares with it).
fn parse_workloads(args: &[String]) -> Result<Vec<Workload>, String> {
    if args.is_empty() {
        return Ok(default_workloads());
    }
    let mut picked = Vec::new();
    for arg in args {
        let (name, n) = match arg.split_once('=') {
            Some((name, n)) => {
                let n = n
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("`{arg}`: the size must be a positive integer"))?;
                (name, Some(n))
            }
            None => (arg.as_str(), None),
        };
        if !KNOWN.contains(&name) {
            return Err(format!(
                "unknown workload `{name}` (workloads: {})",
                KNOWN.join(", ")
            ));
        }
        let default = default_workloads()
            .into_iter()
            .find(|w| w.name == name)
            .map_or(1000, |w| w.n);
        picked.push(Workload {
            name: name.to_owned(),
            n: n.unwrap_or(default),
        });
    }
    let per_call = picked
        .iter()
        .any(|w| !w.is_memory() && w.bench() == AGENT_LOOP);
    if per_call && !picked.iter().any(|w| w.name == "floor") {
        picked.insert(0, default_workloads().remove(0));
    }
    Ok(picked)
}

/// The valgrind to run: `$VALGRIND`, else `valgrind` on the PATH.
fn valgrind_program() -> OsString {
    env::var_os("VALGRIND").unwrap_or_else(|| "valgrind".into())
}

/// The installed valgrind's version, or why there is none.
fn valgrind_version() -> Result<String, String> {
    let program = valgrind_program();
    let shown = program.to_string_lossy().into_owned();
    match Command::new(&program).arg("--version").output() {
        Ok(out) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        }
        Ok(out) => Err(format!(
            "`{shown} --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(format!(
            "valgrind is not installed: `{shown}` was not found{}. \
             `bench --instructions` counts instructions with callgrind and \
             allocations with memcheck, both part of valgrind: install it \
             (Debian/Ubuntu: `apt-get install valgrind`, which `cargo xtask \
             peers` and `.ci/run` do) or point VALGRIND at the binary",
            if env::var_os("VALGRIND").is_some() {
                " (set by VALGRIND)"
            } else {
                " on the PATH"
            }
        )),
        Err(e) => Err(format!("`{shown}` could not start: {e}")),
    }
}

/// Builds a bench binary (release profile) and returns its path.
fn build_bench((package, name): BenchTarget) -> Result<PathBuf, String> {
    let args = [
        "bench",
        "-p",
        package,
        "--bench",
        name,
        "--no-run",
        "--message-format=json-render-diagnostics",
    ];
    println!("$ cargo {}", args.join(" "));
    let out = cargo_command()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo could not start: {e}"))?;
    if !out.status.success() {
        return Err(format!("building the bench {name} failed ({})", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let target = format!(r#""name":"{name}""#);
    stdout
        .lines()
        .filter(|line| {
            line.contains(r#""reason":"compiler-artifact""#)
                && line.contains(r#""kind":["bench"]"#)
                && line.contains(&target)
        })
        .find_map(|line| json_string_field(line, "executable"))
        .map(PathBuf::from)
        .ok_or_else(|| format!("cargo built the bench {name} but did not report its executable"))
}

/// The value of `"field":"..."` in one line of cargo's JSON (paths only
/// need `\\` and `\"` unescaped).
fn json_string_field(line: &str, field: &str) -> Option<String> {
    let start = line.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let mut value = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(chars.next()?),
            c => value.push(c),
        }
    }
    None
}

/// Which valgrind tool a job runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counter {
    /// callgrind: instructions executed (`Ir`).
    Instructions,
    /// memcheck: heap blocks allocated (reallocs included), and the bytes
    /// and blocks still allocated at exit.
    Allocations,
}

/// What one valgrind run counted: the fields its tool gives, the others 0.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Counts {
    /// callgrind: instructions (`Ir`).
    instructions: u64,
    /// callgrind: of those, the ones spent inside the allocator.
    in_allocator: u64,
    /// memcheck: heap blocks allocated ("total heap usage: N allocs").
    allocations: u64,
    /// memcheck: bytes still allocated at exit ("in use at exit: X bytes").
    bytes_held: u64,
    /// memcheck: blocks still allocated at exit ("... in Y blocks").
    blocks_held: u64,
    /// What the bench printed as one run future's size (`parked` only).
    future_size: Option<u64>,
}

/// One valgrind run: a workload at one size under one tool.
struct Job {
    /// The bench binary that runs the workload.
    bench: PathBuf,
    workload: String,
    n: u64,
    counter: Counter,
    /// Which repetition (callgrind runs are repeated; see [`DEFAULT_RUNS`]).
    run: u32,
}

impl Job {
    fn output(&self, dir: &Path) -> PathBuf {
        match self.counter {
            Counter::Instructions => dir.join(format!(
                "callgrind.{}.{}.{}.out",
                self.workload, self.n, self.run
            )),
            Counter::Allocations => dir.join(format!("memcheck.{}.{}.log", self.workload, self.n)),
        }
    }

    /// Runs valgrind and reads the counts it wrote: instructions and those
    /// spent inside the allocator, or allocations and what was held at exit.
    fn run(&self, dir: &Path) -> Result<Counts, String> {
        let out_file = self.output(dir);
        let mut cmd = Command::new(valgrind_program());
        match self.counter {
            Counter::Instructions => {
                cmd.arg("--tool=callgrind")
                    .arg(format!("--callgrind-out-file={}", out_file.display()));
            }
            Counter::Allocations => {
                cmd.arg("--tool=memcheck")
                    .arg("--leak-check=no")
                    .arg(format!("--log-file={}", out_file.display()));
            }
        }
        cmd.arg(&self.bench)
            .args(["--instr", &self.workload, &self.n.to_string()]);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("valgrind could not start: {e}"))?;
        let what = format!(
            "{} {} under {}",
            self.workload,
            self.n,
            match self.counter {
                Counter::Instructions => "callgrind",
                Counter::Allocations => "memcheck",
            }
        );
        if !out.status.success() {
            return Err(format!(
                "{what} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = fs::read_to_string(&out_file)
            .map_err(|e| format!("{what}: cannot read {}: {e}", out_file.display()))?;
        let count = match self.counter {
            Counter::Instructions => callgrind_total(&text).map(|n| Counts {
                instructions: n,
                in_allocator: allocator_cost(&text),
                ..Counts::default()
            }),
            Counter::Allocations => memcheck_allocs(&text).and_then(|n| {
                let (bytes_held, blocks_held) = memcheck_in_use(&text)?;
                Some(Counts {
                    allocations: n,
                    bytes_held,
                    blocks_held,
                    ..Counts::default()
                })
            }),
        };
        let mut count =
            count.ok_or_else(|| format!("{what}: no count found in {}", out_file.display()))?;
        count.future_size = future_size(&String::from_utf8_lossy(&out.stdout));
        Ok(count)
    }
}

/// The `totals:` (or `summary:`) line of a callgrind out file: its first
/// event, `Ir`, which is the only one collected by default.
fn callgrind_total(text: &str) -> Option<u64> {
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    line("totals:").or_else(|| line("summary:"))
}

/// The allocator's entry points: calls into them from outside are the
/// instructions spent allocating and freeing.
const ALLOCATOR: [&str; 7] = [
    "malloc",
    "free",
    "realloc",
    "calloc",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
];

/// The inclusive `Ir` of every call into the allocator (see [`ALLOCATOR`])
/// from a function outside it, read from a callgrind out file's call
/// records (`cfn=` then `calls=` then the call's position and cost).
fn allocator_cost(text: &str) -> u64 {
    // Compressed names: `(12) name` the first time, `(12)` after.
    let mut names: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut resolve = |spec: &str| -> String {
        let spec = spec.trim();
        match spec.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((id, rest)) => {
                let rest = rest.trim();
                if rest.is_empty() {
                    names.get(id).cloned().unwrap_or_default()
                } else {
                    names.insert(id.to_owned(), rest.to_owned());
                    rest.to_owned()
                }
            }
            None => spec.to_owned(),
        }
    };
    let is_allocator = |name: &str| ALLOCATOR.contains(&name);
    let mut caller_inside = false;
    let mut callee_inside = false;
    let mut call_pending = false;
    let mut total = 0u64;
    for line in text.lines() {
        if let Some(spec) = line.strip_prefix("fn=") {
            caller_inside = is_allocator(&resolve(spec));
        } else if let Some(spec) = line.strip_prefix("cfn=") {
            callee_inside = is_allocator(&resolve(spec));
        } else if line.starts_with("calls=") {
            call_pending = true;
        } else if call_pending {
            call_pending = false;
            if callee_inside && !caller_inside {
                total += line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// "total heap usage: 1,234 allocs, ..." in a memcheck log.
fn memcheck_allocs(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|l| l.split_once("total heap usage:").map(|(_, r)| r))?;
    let count = rest.split_whitespace().next()?;
    count.replace(',', "").parse().ok()
}

/// "in use at exit: 1,234 bytes in 5 blocks" in a memcheck log: the bytes
/// and blocks still allocated when the process exited.
fn memcheck_in_use(text: &str) -> Option<(u64, u64)> {
    let rest = text
        .lines()
        .find_map(|l| l.split_once("in use at exit:").map(|(_, r)| r))?;
    let mut words = rest.split_whitespace();
    let number = |word: Option<&str>| word?.replace(',', "").parse().ok();
    let bytes = number(words.next())?;
    let blocks = number(words.nth(2))?;
    Some((bytes, blocks))
}

/// "future size 1234 bytes" in the bench's output (the `parked` workload).
fn future_size(stdout: &str) -> Option<u64> {
    let rest = stdout
        .lines()
        .find_map(|l| l.split_once("future size ").map(|(_, r)| r))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Where the out files go: `$CARGO_TARGET_DIR/instr`, else `target/instr`.
fn out_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), PathBuf::from)
        .join("instr")
}

/// One memory workload's figures per parked run.
struct MemoryRow {
    label: String,
    name: String,
    n: u64,
    /// Bytes still allocated at exit, per run.
    bytes_held: f64,
    /// Blocks still allocated at exit, per run.
    blocks_held: f64,
    /// Heap blocks allocated (freed or not), per run.
    allocations: f64,
    /// The size of one unboxed run future, as the bench printed it.
    future_size: Option<u64>,
}

/// One row's figures per call.
struct Row {
    label: String,
    name: String,
    n: u64,
    /// The median over the runs.
    instructions: f64,
    /// Largest minus smallest over the runs.
    spread: f64,
    /// Of `instructions`, those inside malloc, free and realloc (median).
    in_allocator: f64,
    /// The others: instructions less those inside the allocator, median
    /// over the runs (the steady part, which the gate compares).
    outside_allocator: f64,
    allocations: f64,
}

/// What one valgrind run gave: its counts (see [`Job::run`]), or why not.
type JobResult = Result<Counts, String>;

/// Runs the jobs on `workers` threads; the counts come back in job order.
fn run_jobs(jobs: &[Job], dir: &Path, workers: usize) -> Vec<JobResult> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<JobResult>>> = Mutex::new(jobs.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let result = job.run(dir);
                    if let Ok(mut results) = results.lock() {
                        results[i] = Some(result);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("the job did not run".to_owned())))
        .collect()
}

/// The workloads the CI gate checks against the baseline (the floor is
/// added, as always): the loop's model-issued calls one at a time and in
/// parallel, a nested call, the middleware stack and a call with the
/// memory ledger, and `seq` under token and money caps (each model call's
/// reservation, issue 33): all in the agent-loop bench, so one release
/// build (see docs/benchmarks.md, "The gate", for its time).
pub(crate) const CI_WORKLOADS: [&str; 6] = [
    "seq",
    "seq-budget",
    "par",
    "nested",
    "stack",
    "seq-ledger=50",
];

/// Callgrind runs per sample in the CI gate: the median of three, like
/// the baseline's. Single runs of `nested` spread over 4 % (15,842 to
/// 16,519 instructions a call in five runs), more than the limit; medians
/// of three agree within 0.1 %, and the runs cost seconds beside the
/// bench's build (see docs/benchmarks.md, "The gate").
pub(crate) const CI_RUNS: u32 = DEFAULT_RUNS;

/// `cargo xtask bench --instructions [--runs K] [--check |
/// --write-baseline] [WORKLOAD[=N]...]`.
pub(crate) fn instructions(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("xtask bench --instructions: {why}");
            return ExitCode::from(2);
        }
    };
    match run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("xtask bench --instructions: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The CI gate's step: `bench --instructions --check --runs 3` over
/// [`CI_WORKLOADS`].
pub(crate) fn ci_check() -> Result<(), String> {
    let named: Vec<String> = CI_WORKLOADS.iter().map(|w| (*w).to_owned()).collect();
    let options = Options {
        workloads: parse_workloads(&named)?,
        named: true,
        runs: CI_RUNS,
        mode: Mode::Check,
    };
    println!(
        "$ cargo xtask bench --instructions --check --runs {CI_RUNS} {}",
        named.join(" ")
    );
    run(options)
}

/// The baseline file's path.
fn baseline_path() -> PathBuf {
    root().join(BASELINE_FILE)
}

/// Reads the baseline file; `Err` says how to make one when there is none.
fn read_baseline() -> Result<Baseline, String> {
    let path = baseline_path();
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "no baseline at {}: record one with `cargo xtask bench --instructions \
                 --write-baseline [WORKLOAD...]` and commit it",
                path.display()
            ));
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    Baseline::from_json(&text).map_err(|why| format!("{}: {why}", path.display()))
}

/// The baseline's workloads, as if named on the command line (the floor
/// added when an agent-loop workload needs it).
fn baseline_workloads(baseline: &Baseline) -> Result<Vec<Workload>, String> {
    let named: Vec<String> = baseline
        .workloads
        .iter()
        .map(|w| format!("{}={}", w.name, w.n))
        .collect();
    if named.is_empty() {
        return Err(format!("{BASELINE_FILE} lists no workload"));
    }
    parse_workloads(&named).map_err(|why| format!("{BASELINE_FILE}: {why}"))
}

/// What a command prints as its version, or `unknown` (`program` does not
/// run); the first line only.
fn version_of(program: OsString, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .current_dir(root())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The rustc the benches are built with (run from the workspace root, so
/// the toolchain of rust-toolchain.toml).
fn rustc_version() -> String {
    version_of(
        env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()),
        "--version",
    )
}

/// The commit checked out, `+dirty` when the work tree has changes other
/// than the baseline file; `unknown` without git.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=7", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let exclude = format!(":(exclude){BASELINE_FILE}");
    let changes = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        &exclude,
    ]);
    match changes {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}+dirty"),
    }
}

/// Today (UTC) as `YYYY-MM-DD`, as `date -u +%F` prints it; `unknown`
/// without `date`.
fn today() -> String {
    Command::new("date")
        .args(["-u", "+%F"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The figures the baseline records, from the measured rows.
fn figures(rows: &[Row], memory: &[MemoryRow]) -> Vec<Figures> {
    let per_call = rows.iter().map(|r| Figures {
        name: r.name.clone(),
        n: r.n,
        instructions: Some(round2(r.instructions)),
        outside_allocator: Some(round2(r.outside_allocator)),
        allocations: round2(r.allocations),
        bytes_held: None,
    });
    let per_run = memory.iter().map(|m| Figures {
        name: m.name.clone(),
        n: m.n,
        instructions: None,
        outside_allocator: None,
        allocations: round2(m.allocations),
        bytes_held: Some(round2(m.bytes_held)),
    });
    per_call.chain(per_run).collect()
}

/// Measures, prints, then checks against the baseline or rewrites it.
fn run(options: Options) -> Result<(), String> {
    let Options {
        mut workloads,
        named,
        runs,
        mode,
    } = options;
    let valgrind = valgrind_version()?;
    // Read before measuring: a missing or broken baseline fails at once.
    let baseline = match mode {
        Mode::Check => Some(read_baseline()?),
        Mode::WriteBaseline => read_baseline().ok(),
        Mode::Report => None,
    };
    if !named {
        match &baseline {
            Some(baseline) => workloads = baseline_workloads(baseline)?,
            None if mode == Mode::WriteBaseline => workloads = baseline_defaults(),
            None => {}
        }
    }
    if mode != Mode::Report {
        let mut unsteady: Vec<&str> = workloads
            .iter()
            .map(|w| w.name.as_str())
            .filter(|name| UNSTEADY.contains(name))
            .collect();
        unsteady.dedup();
        if !unsteady.is_empty() {
            println!(
                "note: {} move{} by more than {LIMIT_PERCENT:.0} % between runs (SQLite): a check \
                 of {} can fail at random",
                unsteady.join(", "),
                if unsteady.len() == 1 { "s" } else { "" },
                if unsteady.len() == 1 { "it" } else { "them" }
            );
        }
    }
    let (rows, memory) = measure(&workloads, runs, &valgrind)?;
    let measured = figures(&rows, &memory);
    let rustc = rustc_version();
    match (mode, baseline) {
        (Mode::Check, Some(baseline)) => {
            println!(
                "\ncheck against {BASELINE_FILE} (recorded {} at {}, {}, {}, median of {} \
                 callgrind run{}; this run: median of {runs}):",
                baseline.recorded,
                baseline.commit,
                baseline.valgrind,
                baseline.rustc,
                baseline.runs,
                if baseline.runs == 1 { "" } else { "s" }
            );
            let report = compare(&baseline, &measured, &valgrind, &rustc);
            print!("{}", report.render());
            if report.passed() {
                println!(
                    "\ninstruction gate: pass ({} figures of {} workloads within +{LIMIT_PERCENT:.0} % \
                     of the baseline)",
                    report.lines.len(),
                    measured.len()
                );
                Ok(())
            } else {
                Err(format!(
                    "instruction gate: FAILED ({} of {} figures above the baseline + \
                     {LIMIT_PERCENT:.0} %, {} workload{} not in the baseline). If the cost is \
                     meant, rewrite the baseline in its own commit: `cargo xtask bench \
                     --instructions --write-baseline`",
                    report
                        .lines
                        .iter()
                        .filter(|l| l.verdict == Verdict::Fail)
                        .count(),
                    report.lines.len(),
                    report.missing.len() + report.unmatched.len(),
                    if report.missing.len() + report.unmatched.len() == 1 {
                        ""
                    } else {
                        "s"
                    }
                ))
            }
        }
        (Mode::WriteBaseline, old) => {
            let written = Baseline {
                recorded: today(),
                commit: commit(),
                valgrind,
                rustc,
                runs,
                workloads: measured,
            };
            let path = baseline_path();
            fs::write(&path, written.to_json())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!(
                "\nwrote {} ({} workloads, median of {runs} callgrind runs, {}, {}, at {}): \
                 commit it",
                path.display(),
                written.workloads.len(),
                written.valgrind,
                written.rustc,
                written.commit
            );
            if let Some(old) = old {
                let dropped: Vec<String> = old
                    .workloads
                    .iter()
                    .filter(|o| {
                        !written
                            .workloads
                            .iter()
                            .any(|w| w.name == o.name && w.n == o.n)
                    })
                    .map(|o| format!("{} {}", o.name, o.n))
                    .collect();
                if !dropped.is_empty() {
                    println!("dropped from the baseline: {}", dropped.join(", "));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Builds the benches, runs the workloads under valgrind (`version`),
/// prints the tables and returns their rows.
fn measure(
    workloads: &[Workload],
    runs: u32,
    version: &str,
) -> Result<(Vec<Row>, Vec<MemoryRow>), String> {
    let mut benches: Vec<(BenchTarget, PathBuf)> = Vec::new();
    for w in workloads {
        let target = w.bench();
        if benches.iter().any(|(t, _)| *t == target) {
            continue;
        }
        benches.push((target, build_bench(target)?));
    }
    let bench_of = |w: &Workload| {
        benches
            .iter()
            .find(|(t, _)| *t == w.bench())
            .map(|(_, path)| path.clone())
            .unwrap_or_default()
    };
    let dir = out_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut jobs = Vec::new();
    for w in workloads {
        let counters: &[(Counter, u32)] = if w.is_memory() {
            &[(Counter::Allocations, 1)]
        } else {
            &[(Counter::Instructions, runs), (Counter::Allocations, 1)]
        };
        for &(counter, repeat) in counters {
            for run in 0..repeat {
                for n in [w.n, 2 * w.n] {
                    jobs.push(Job {
                        bench: bench_of(w),
                        workload: w.name.clone(),
                        n,
                        counter,
                        run,
                    });
                }
            }
        }
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let shown: Vec<String> = benches
        .iter()
        .map(|(_, path)| path.display().to_string())
        .collect();
    println!(
        "{version}: {} runs of {} ({} at a time)",
        jobs.len(),
        shown.join(" and "),
        workers
    );
    let started = Instant::now();
    let counts = run_jobs(&jobs, &dir, workers);
    let failures: Vec<&String> = counts.iter().filter_map(|c| c.as_ref().err()).collect();
    if !failures.is_empty() {
        let failures: Vec<&str> = failures.into_iter().map(String::as_str).collect();
        return Err(failures.join("\n"));
    }
    let count = |name: &str, n: u64, counter: Counter, run: u32| -> Counts {
        jobs.iter()
            .zip(&counts)
            .find(|(j, _)| j.workload == name && j.n == n && j.counter == counter && j.run == run)
            .and_then(|(_, c)| c.as_ref().ok().copied())
            .unwrap_or_default()
    };
    // Per call (or per parked run), for each run: (count(2n) - count(n)) / n.
    let per_n = |w: &Workload, counter: Counter, run: u32, field: fn(&Counts) -> u64| -> f64 {
        let small = field(&count(&w.name, w.n, counter, run));
        let large = field(&count(&w.name, 2 * w.n, counter, run));
        (large as f64 - small as f64) / w.n as f64
    };
    let per_call = |w: &Workload, counter: Counter, run: u32| -> [f64; 2] {
        match counter {
            Counter::Instructions => [
                per_n(w, counter, run, |c| c.instructions),
                per_n(w, counter, run, |c| c.in_allocator),
            ],
            Counter::Allocations => [per_n(w, counter, run, |c| c.allocations), 0.0],
        }
    };
    let median = |mut values: Vec<f64>| -> f64 {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let rows: Vec<Row> = workloads
        .iter()
        .filter(|w| !w.is_memory())
        .map(|w| Row {
            label: w.label(),
            name: w.name.clone(),
            n: w.n,
            instructions: median(
                (0..runs)
                    .map(|r| per_call(w, Counter::Instructions, r)[0])
                    .collect(),
            ),
            spread: {
                let all: Vec<f64> = (0..runs)
                    .map(|r| per_call(w, Counter::Instructions, r)[0])
                    .collect();
                all.iter().copied().fold(f64::MIN, f64::max)
                    - all.iter().copied().fold(f64::MAX, f64::min)
            },
            in_allocator: median(
                (0..runs)
                    .map(|r| per_call(w, Counter::Instructions, r)[1])
                    .collect(),
            ),
            outside_allocator: median(
                (0..runs)
                    .map(|r| {
                        let [all, in_allocator] = per_call(w, Counter::Instructions, r);
                        all - in_allocator
                    })
                    .collect(),
            ),
            allocations: per_call(w, Counter::Allocations, 0)[0],
        })
        .collect();
    let memory: Vec<MemoryRow> = workloads
        .iter()
        .filter(|w| w.is_memory())
        .map(|w| MemoryRow {
            label: w.label(),
            name: w.name.clone(),
            n: w.n,
            bytes_held: per_n(w, Counter::Allocations, 0, |c| c.bytes_held),
            blocks_held: per_n(w, Counter::Allocations, 0, |c| c.blocks_held),
            allocations: per_n(w, Counter::Allocations, 0, |c| c.allocations),
            future_size: count(&w.name, w.n, Counter::Allocations, 0).future_size,
        })
        .collect();
    print!("{}", render(&rows, &memory));
    if !rows.is_empty() {
        println!(
            "\nper call = (count(2n) - count(n)) / n; instructions: callgrind `Ir`, median of \
             {runs} runs (spread: largest - smallest); of which malloc/free: the inclusive \
             cost of calls into the allocator, the part that varies between runs; \
             allocations: memcheck's heap blocks (reallocs count)"
        );
    }
    if !memory.is_empty() {
        println!(
            "\nper parked run = (count(2n) - count(n)) / n over n and 2n runs parked in a \
             model call that never answers; bytes and blocks held: memcheck's \"in use at \
             exit\" (bytes asked of the allocator, without its per-block overhead); \
             allocations: every heap block allocated on the way, freed or not; future size: \
             `size_of_val` of one unboxed run future (boxed, it is one of the blocks held)"
        );
    }
    println!(
        "out files in {} (`callgrind_annotate --inclusive=yes <file>`); {} in {}",
        dir.display(),
        jobs.len(),
        secs(started.elapsed())
    );
    Ok((rows, memory))
}

/// The tables (per call, then memory held), then the targets.
fn render(rows: &[Row], memory: &[MemoryRow]) -> String {
    let floor = rows.iter().find(|r| r.name == "floor");
    let mut out = String::new();
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "\n| workload | instructions/call | spread | of which malloc/free | allocations/call | ratio to floor |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    }
    for row in rows {
        let ratio = floor.filter(|f| f.instructions > 0.0).map_or_else(
            || "-".to_owned(),
            |f| format!("{:.2}", row.instructions / f.instructions),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1} | {ratio} |",
            row.label,
            thousands(row.instructions),
            thousands(row.spread),
            thousands(row.in_allocator),
            row.allocations
        );
    }
    if !memory.is_empty() {
        let _ = writeln!(
            out,
            "\n| workload | bytes held/run | blocks held/run | allocations/run | future size (bytes) |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    }
    for row in memory {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {} |",
            row.label,
            thousands(row.bytes_held),
            row.blocks_held,
            row.allocations,
            row.future_size
                .map_or_else(|| "-".to_owned(), |size| thousands(size as f64))
        );
    }
    let find = |name: &str| rows.iter().find(|r| r.name == name);
    let mark = |ok: bool| if ok { "pass" } else { "MISS" };
    if [
        "seq",
        "par",
        "nested",
        "seq-ledger",
        "seq-sqlite",
        "session",
        "session-sqlite",
    ]
    .into_iter()
    .any(|name| find(name).is_some())
        || !memory.is_empty()
    {
        let _ = writeln!(out, "\ntargets:");
    }
    if let Some(seq) = find("seq") {
        let _ = writeln!(
            out,
            "  seq {}: <= 8,400 instructions/call: {} ({}); <= 10 allocations/call: {} ({:.1})",
            seq.n,
            mark(seq.instructions <= 8_400.0),
            thousands(seq.instructions),
            mark(seq.allocations <= 10.0),
            seq.allocations
        );
    }
    if let Some(par) = find("par") {
        let _ = writeln!(
            out,
            "  par {}: <= 7,000 instructions/call: {} ({})",
            par.n,
            mark(par.instructions <= 7_000.0),
            thousands(par.instructions)
        );
    }
    if let Some(nested) = find("nested") {
        for model in ["par", "seq"].into_iter().filter_map(find) {
            let ratio = nested.instructions / model.instructions;
            let _ = writeln!(
                out,
                "  nested / model-issued call ({} {}): {ratio:.2} (target <= 1.30: {})",
                model.name,
                model.n,
                mark(ratio <= 1.3)
            );
        }
    }
    if let Some(seq) = find("seq") {
        for ledgered in rows.iter().filter(|r| r.name == "seq-ledger") {
            let added = ledgered.instructions - seq.instructions;
            let _ = writeln!(
                out,
                "  memory ledger adds (seq-ledger {} - seq {}): <= 8,000 instructions/call: {} ({})",
                ledgered.n,
                seq.n,
                mark(added <= 8_000.0),
                thousands(added)
            );
        }
    }
    if let (Some(seq), Some(budget)) = (find("seq"), find("seq-budget")) {
        // One model call per tool call in `seq`: per call is per model call.
        let added = budget.instructions - seq.instructions;
        let _ = writeln!(
            out,
            "  the reservation adds (seq-budget {} - seq {}): <= 1,000 instructions/model call: {} ({})",
            budget.n,
            seq.n,
            mark(added <= 1_000.0),
            thousands(added)
        );
    }
    if let (Some(seq), Some(stack)) = (find("seq"), find("stack")) {
        let added = stack.instructions - seq.instructions;
        let _ = writeln!(
            out,
            "  10 pass-through middlewares add (stack {} - seq {}): <= 2,000 instructions/call: {} ({})",
            stack.n,
            seq.n,
            mark(added <= 2_000.0),
            thousands(added)
        );
    }
    let largest = |name: &str| rows.iter().filter(|r| r.name == name).max_by_key(|r| r.n);
    if let (Some(plain), Some(session)) = (largest("delegate"), largest("session")) {
        let ratio = session.instructions / plain.instructions;
        let _ = writeln!(
            out,
            "  a delegated run in a session / a plain one (session {} / delegate {}): {ratio:.2} (target <= 2.00: {})",
            session.n,
            plain.n,
            mark(ratio <= 2.0)
        );
    }
    for name in ["seq-ledger", "seq-sqlite", "session", "session-sqlite"] {
        let sizes = || rows.iter().filter(|r| r.name == name);
        let (Some(small), Some(large)) = (sizes().min_by_key(|r| r.n), sizes().max_by_key(|r| r.n))
        else {
            continue;
        };
        if small.n < large.n {
            let ratio = large.instructions / small.instructions;
            let _ = writeln!(
                out,
                "  {name} {} / {name} {}: {ratio:.2} instructions/call (target <= 1.30: {})",
                large.n,
                small.n,
                mark(ratio <= 1.3)
            );
        }
    }
    if let Some(parked) = memory.iter().find(|r| r.name == "parked") {
        let _ = writeln!(
            out,
            "  parked {}: <= 8 KiB held per parked run (10,000 runs <= 100 MB): {} ({} bytes; \
             10,000 runs: {:.1} MB)",
            parked.n,
            mark(parked.bytes_held <= PARKED_TARGET_BYTES),
            thousands(parked.bytes_held),
            parked.bytes_held * 10_000.0 / 1e6
        );
    }
    out
}

/// `12345.6` as `12,346`.
pub(crate) fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_callgrind_totals() {
        let text = "events: Ir\nsummary: 123\nfn=main\n1 2\ntotals: 4567\n";
        assert_eq!(callgrind_total(text), Some(4567));
        assert_eq!(callgrind_total("events: Ir\nsummary: 89\n"), Some(89));
    }

    #[test]
    fn sums_the_calls_into_the_allocator() {
        let text = "events: Ir\n\
            fn=(1) main\n\
            3 10\n\
            cfn=(2) malloc\n\
            calls=2 0\n\
            4 300\n\
            cfn=(3) work\n\
            calls=1 0\n\
            5 1000\n\
            fn=(3)\n\
            6 50\n\
            cfn=(4) free\n\
            calls=1 0\n\
            +1 120\n\
            cfn=(2)\n\
            calls=1 0\n\
            * 80\n\
            fn=(4)\n\
            cfn=(5) _int_free\n\
            calls=1 0\n\
            7 90\n\
            fn=(2)\n\
            cfn=(4)\n\
            calls=1 0\n\
            8 40\n\
            totals: 1360\n";
        // main -> malloc (300), work -> free (120), work -> malloc (80); not
        // free -> _int_free nor malloc -> free (inside the allocator).
        assert_eq!(allocator_cost(text), 500);
    }

    #[test]
    fn reads_memcheck_allocs() {
        let log = "==1== HEAP SUMMARY:\n==1==     in use at exit: 0 bytes in 0 blocks\n\
                   ==1==   total heap usage: 12,345 allocs, 12,340 frees, 1,000 bytes allocated\n";
        assert_eq!(memcheck_allocs(log), Some(12_345));
    }

    #[test]
    fn reads_memcheck_in_use_and_the_future_size() {
        let log = "==1== HEAP SUMMARY:\n==1==     in use at exit: 6,473,216 bytes in 12,003 blocks\n\
                   ==1==   total heap usage: 12,345 allocs, 340 frees, 9,000,000 bytes allocated\n";
        assert_eq!(memcheck_in_use(log), Some((6_473_216, 12_003)));
        assert_eq!(memcheck_in_use("==1== All heap blocks were freed\n"), None);
        let stdout =
            "instr parked 1000: 1000 runs parked in the model call; future size 2048 bytes\n";
        assert_eq!(future_size(stdout), Some(2048));
        assert_eq!(future_size("instr seq 400: 400 calls\n"), None);
    }

    #[test]
    fn renders_the_parked_row_and_its_target() {
        let row = |bytes_held| MemoryRow {
            label: "parked run (bytes held)".to_owned(),
            name: "parked".to_owned(),
            n: 1000,
            bytes_held,
            blocks_held: 12.0,
            allocations: 20.0,
            future_size: Some(2048),
        };
        let table = render(&[], &[row(6_000.0)]);
        assert!(table.contains("| parked run (bytes held) | 6,000 | 12.0 | 20.0 | 2,048 |"));
        assert!(table.contains("parked 1000: <= 8 KiB held per parked run"));
        assert!(table.contains(": pass (6,000 bytes; 10,000 runs: 60.0 MB)"));
        assert!(render(&[], &[row(9_000.0)]).contains(": MISS (9,000 bytes"));
        assert!(!table.contains("instructions/call"));
    }

    #[test]
    fn reads_the_executable() {
        let line = r#"{"reason":"compiler-artifact","executable":"/t/release/deps/agent_loop-1a\\b","fresh":true}"#;
        assert_eq!(
            json_string_field(line, "executable").as_deref(),
            Some("/t/release/deps/agent_loop-1a\\b")
        );
    }

    #[test]
    fn workloads_parse_and_keep_the_floor() {
        let picked = parse_workloads(&["seq=50".to_owned(), "par".to_owned()]).unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(names, [("floor", 1000), ("seq", 50), ("par", 1000)]);
        assert!(parse_workloads(&["warp".to_owned()]).is_err());
        let options = parse_args(&["--runs".to_owned(), "5".to_owned(), "nested".to_owned()]);
        assert!(
            options.as_ref().is_ok_and(
                |o| (o.workloads.len(), o.runs, o.named, o.mode) == (2, 5, true, Mode::Report)
            ),
            "{options:?}"
        );
        assert!(parse_args(&["--runs".to_owned(), "0".to_owned()]).is_err());
        assert!(parse_workloads(&["seq=0".to_owned()]).is_err());
        // A memory workload alone has no per-call table: no floor.
        let picked = parse_workloads(&["parked".to_owned()]).unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(names, [("parked", 1000)]);
        let picked =
            parse_workloads(&["parked=50".to_owned(), "seq".to_owned()]).unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(names, [("floor", 1000), ("parked", 50), ("seq", 400)]);
        assert_eq!(
            default_workloads().last().map(|w| w.name.as_str()),
            Some("parked")
        );
    }

    #[test]
    fn check_and_write_baseline_parse_and_exclude_each_other() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let options = parse_args(&args(&["--check"]));
        assert!(
            options
                .as_ref()
                .is_ok_and(|o| (o.named, o.runs, o.mode) == (false, DEFAULT_RUNS, Mode::Check)),
            "{options:?}"
        );
        let options = parse_args(&args(&["--write-baseline", "--runs", "1", "seq"]));
        assert!(
            options
                .as_ref()
                .is_ok_and(|o| (o.named, o.runs, o.mode) == (true, 1, Mode::WriteBaseline)),
            "{options:?}"
        );
        assert!(
            parse_args(&args(&["--check", "--write-baseline"]))
                .err()
                .is_some_and(|e| e.contains("never writes"))
        );
        // A first baseline leaves the SQLite workloads out.
        let first: Vec<String> = baseline_defaults().into_iter().map(|w| w.name).collect();
        assert!(
            first.iter().all(|name| !name.contains("sqlite")),
            "{first:?}"
        );
        assert!(first.iter().any(|name| name == "parked"));
        // The CI gate's workloads parse, with the floor.
        let ci = parse_workloads(&args(&CI_WORKLOADS)).unwrap_or_default();
        assert_eq!(ci.len(), CI_WORKLOADS.len() + 1);
        assert_eq!(ci[0].name, "floor");
    }

    #[test]
    fn the_baseline_names_the_workloads_to_measure() {
        let recorded = |name: &str, n| Figures {
            name: name.to_owned(),
            n,
            instructions: Some(1.0),
            outside_allocator: Some(1.0),
            allocations: 1.0,
            bytes_held: None,
        };
        let baseline = Baseline {
            recorded: "2026-12-05".to_owned(),
            commit: "d0692dc".to_owned(),
            valgrind: "valgrind-3.19.0".to_owned(),
            rustc: "rustc 1.95.0".to_owned(),
            runs: 3,
            workloads: vec![
                recorded("floor", 1000),
                recorded("seq-ledger", 50),
                recorded("seq-ledger", 1000),
            ],
        };
        let picked = baseline_workloads(&baseline).unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(
            names,
            [("floor", 1000), ("seq-ledger", 50), ("seq-ledger", 1000)]
        );
        let unknown = Baseline {
            workloads: vec![recorded("warp", 1)],
            ..baseline.clone()
        };
        assert!(
            baseline_workloads(&unknown)
                .err()
                .is_some_and(|e| e.contains("unknown workload `warp`"))
        );
        let empty = Baseline {
            workloads: Vec::new(),
            ..baseline
        };
        assert!(baseline_workloads(&empty).is_err());
    }

    #[test]
    fn delegation_workloads_run_in_their_bench_without_the_floor() {
        let picked = parse_workloads(&["session=50".to_owned(), "session=400".to_owned()])
            .unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(names, [("session", 50), ("session", 400)]);
        assert!(picked.iter().all(|w| w.bench() == DELEGATION));
        let picked =
            parse_workloads(&["delegate".to_owned(), "seq".to_owned()]).unwrap_or_default();
        let names: Vec<_> = picked.iter().map(|w| (w.name.as_str(), w.n)).collect();
        assert_eq!(names, [("floor", 1000), ("delegate", 400), ("seq", 400)]);
        assert_eq!(picked[2].bench(), AGENT_LOOP);
    }

    #[test]
    fn renders_the_session_ratio_against_its_target() {
        let row = |n, instructions| Row {
            label: format!("session {n}"),
            name: "session".to_owned(),
            n,
            instructions,
            spread: 0.0,
            in_allocator: 0.0,
            outside_allocator: 0.0,
            allocations: 0.0,
        };
        let table = render(&[row(50, 40_000.0), row(400, 50_000.0)], &[]);
        assert!(table.contains("| session 400 | 50,000 |"), "{table}");
        assert!(
            table.contains(
                "session 400 / session 50: 1.25 instructions/call (target <= 1.30: pass)"
            ),
            "{table}"
        );
        let table = render(&[row(50, 40_000.0), row(400, 60_000.0)], &[]);
        assert!(
            table.contains(": 1.50 instructions/call (target <= 1.30: MISS)"),
            "{table}"
        );
        assert!(!render(&[row(50, 1.0)], &[]).contains("session 50 / session 50"));
    }

    #[test]
    fn renders_the_ledger_rows_against_their_targets() {
        let row = |name: &str, n, instructions| Row {
            label: format!("{name} {n}"),
            name: name.to_owned(),
            n,
            instructions,
            spread: 0.0,
            in_allocator: 0.0,
            outside_allocator: 0.0,
            allocations: 0.0,
        };
        let rows = [
            row("seq", 400, 20_000.0),
            row("seq-ledger", 50, 27_000.0),
            row("seq-ledger", 1000, 29_000.0),
            row("stack", 400, 23_000.0),
            row("delegate", 400, 40_000.0),
            row("session", 50, 90_000.0),
            row("session", 400, 60_000.0),
            row("seq-sqlite", 50, 100_000.0),
            row("seq-sqlite", 1000, 140_000.0),
        ];
        let table = render(&rows, &[]);
        for line in [
            "memory ledger adds (seq-ledger 50 - seq 400): <= 8,000 instructions/call: pass (7,000)",
            "memory ledger adds (seq-ledger 1000 - seq 400): <= 8,000 instructions/call: MISS (9,000)",
            "seq-ledger 1000 / seq-ledger 50: 1.07 instructions/call (target <= 1.30: pass)",
            "10 pass-through middlewares add (stack 400 - seq 400): <= 2,000 instructions/call: MISS (3,000)",
            "a delegated run in a session / a plain one (session 400 / delegate 400): 1.50 (target <= 2.00: pass)",
            "seq-sqlite 1000 / seq-sqlite 50: 1.40 instructions/call (target <= 1.30: MISS)",
        ] {
            assert!(table.contains(line), "{line}\n{table}");
        }
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(22308.4), "22,308");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_000_000.0), "1,000,000");
    }
}
