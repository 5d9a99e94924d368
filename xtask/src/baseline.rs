//! The instruction gate: `cargo xtask bench --instructions --check`
//! compares what [`crate::instr`] measured with a baseline kept in the
//! repository, and `--write-baseline` records that baseline. The check
//! never writes the file: lowering or raising it is a commit of its own,
//! made on purpose and reviewed like code.
//!
//! The file is [`BASELINE_FILE`] (`xtask/instructions-baseline.json`),
//! beside the xtask that reads it. JSON, one workload a line so that a
//! change of the figures reads as a diff of the lines that moved:
//!
//! ```json
//! {
//!   "format": 1,
//!   "recorded": "2026-12-05",
//!   "commit": "d0692dc",
//!   "valgrind": "valgrind-3.19.0",
//!   "rustc": "rustc 1.95.0 (… 2026-…)",
//!   "runs": 3,
//!   "workloads": [
//!     {"name": "seq", "n": 400, "instructions_per_call": 16132.66, "outside_malloc_per_call": 12727.12, "allocations_per_call": 19},
//!     {"name": "parked", "n": 1000, "allocations_per_call": 20, "bytes_held_per_call": 6000}
//!   ]
//! }
//! ```
//!
//! A workload is its name and its `n` (`seq-ledger` 50 and 1000 are two).
//! `instructions_per_call` is the median of `runs` callgrind runs, kept to
//! be read beside the bench's table; `outside_malloc_per_call` is the
//! median of each run's instructions less those spent inside malloc/free
//! (the inclusive cost of calls into the allocator), and is what the gate
//! compares, with `allocations_per_call` (memcheck's count). A memory
//! workload (`parked`) has no instructions; its "per call" figures are per
//! parked run, with the bytes it holds (`bytes_held_per_call`).
//! `recorded`, `commit`, `valgrind` and `rustc` say what the figures were
//! measured with: the check names a different valgrind or rustc (counts
//! move with either) but does not fail on it.
//!
//! Why outside the allocator: glibc's malloc does not spend the same
//! instructions on the same calls from one run of the same binary to the
//! next. In `nested 1000`, five runs spent 14,034 to 14,041 instructions a
//! call outside it, but 1,474, 1,803 or 2,474 inside it (`_int_malloc`
//! and `malloc_consolidate`: where freed chunks land), so the total moved
//! by 6 % and even a median of three moved by 4 %, more than the limit.
//! What the harness asks of the allocator is its allocation count, which
//! is exact and gated; what the allocator does with it is glibc's.
//!
//! The rule, for every compared figure of every workload measured: it
//! fails above the baseline + [`LIMIT_PERCENT`] (3 %). The same rule for
//! allocations, which are exact counts (per call, fractions come from
//! growth amortised over `n` calls): with a baseline of 10 the limit is
//! 10.3, so one more allocation a call (11) fails on any baseline under
//! 34. The 3 % also absorbs what moves between machines: std and memchr
//! pick their string routines (`memcpy`, `memcmp`: AVX2, SSE2, ERMS) by
//! the CPU features they detect, under valgrind the host's as valgrind
//! reports them, which shifts a call's instructions by a fraction of a
//! percent; outside the allocator, repeated runs here agree within 0.3 %.
//!
//! A figure more than 3 % *below* its baseline passes, with a note that
//! the baseline should be lowered (`--write-baseline`) so the gain is
//! locked in. A measured workload that the baseline lacks fails, naming it
//! (a new workload enters the gate with a new baseline); a baseline
//! workload that was not measured is only listed.

use std::fmt::Write as _;

use serde_json::Value;

/// Where the baseline lives, relative to the workspace root.
pub(crate) const BASELINE_FILE: &str = "xtask/instructions-baseline.json";

/// How far above its baseline a figure may go, in percent.
pub(crate) const LIMIT_PERCENT: f64 = 3.0;

/// The gate's instruction figure, as the table names it.
pub(crate) const OUTSIDE_ALLOCATOR: &str = "instructions/call outside malloc/free";

/// The version of the file's layout, written as `"format"`.
const FORMAT: u64 = 1;

/// One workload's figures, measured or recorded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Figures {
    /// The bench's name for the workload (`seq`, `parked`, ...).
    pub(crate) name: String,
    /// Its base size: it runs at `n` and `2n`.
    pub(crate) n: u64,
    /// Instructions per call (median of the runs), recorded to be read,
    /// not compared; none for a memory workload.
    pub(crate) instructions: Option<f64>,
    /// Of those, the ones outside malloc/free (median over the runs of
    /// each run's difference): the figure the gate compares.
    pub(crate) outside_allocator: Option<f64>,
    /// Heap blocks allocated per call (per parked run for `parked`).
    pub(crate) allocations: f64,
    /// Bytes held per parked run (memory workloads only).
    pub(crate) bytes_held: Option<f64>,
}

impl Figures {
    /// `seq 400`.
    fn key(&self) -> String {
        format!("{} {}", self.name, self.n)
    }

    /// The figures the gate compares: (what, value).
    fn compared(&self) -> Vec<(&'static str, f64)> {
        let mut out = Vec::new();
        if let Some(instructions) = self.outside_allocator {
            out.push((OUTSIDE_ALLOCATOR, instructions));
        }
        if let Some(bytes) = self.bytes_held {
            out.push(("allocations/run", self.allocations));
            out.push(("bytes held/run", bytes));
        } else {
            out.push(("allocations/call", self.allocations));
        }
        out
    }
}

/// The baseline file: what the figures were recorded with, and them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Baseline {
    /// The day it was written (UTC), `YYYY-MM-DD`.
    pub(crate) recorded: String,
    /// The commit the measured code was built from (`+dirty` when the
    /// work tree had changes).
    pub(crate) commit: String,
    /// `valgrind --version`.
    pub(crate) valgrind: String,
    /// `rustc --version`.
    pub(crate) rustc: String,
    /// Callgrind runs per sample (instructions are their median).
    pub(crate) runs: u32,
    pub(crate) workloads: Vec<Figures>,
}

/// `x` rounded to two decimals: per-call figures are differences divided
/// by `n`, and more digits are noise in a diff.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A JSON number for `x` (`37`, `20194.25`).
fn number(x: f64) -> String {
    let x = round2(x);
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// A JSON string literal for `s`.
fn string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

impl Baseline {
    /// The file's text: fixed key order, one workload a line.
    pub(crate) fn to_json(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{{");
        let _ = writeln!(out, "  \"format\": {FORMAT},");
        let _ = writeln!(out, "  \"recorded\": {},", string(&self.recorded));
        let _ = writeln!(out, "  \"commit\": {},", string(&self.commit));
        let _ = writeln!(out, "  \"valgrind\": {},", string(&self.valgrind));
        let _ = writeln!(out, "  \"rustc\": {},", string(&self.rustc));
        let _ = writeln!(out, "  \"runs\": {},", self.runs);
        let _ = writeln!(out, "  \"workloads\": [");
        for (i, w) in self.workloads.iter().enumerate() {
            let mut line = format!("    {{\"name\": {}, \"n\": {}", string(&w.name), w.n);
            if let Some(instructions) = w.instructions {
                let _ = write!(
                    line,
                    ", \"instructions_per_call\": {}",
                    number(instructions)
                );
            }
            if let Some(outside) = w.outside_allocator {
                let _ = write!(line, ", \"outside_malloc_per_call\": {}", number(outside));
            }
            let _ = write!(
                line,
                ", \"allocations_per_call\": {}",
                number(w.allocations)
            );
            if let Some(bytes) = w.bytes_held {
                let _ = write!(line, ", \"bytes_held_per_call\": {}", number(bytes));
            }
            line.push('}');
            if i + 1 < self.workloads.len() {
                line.push(',');
            }
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "  ]");
        let _ = writeln!(out, "}}");
        out
    }

    /// Reads the file's text; `Err` names what is missing or malformed.
    pub(crate) fn from_json(text: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let format = value.get("format").and_then(Value::as_u64);
        if format != Some(FORMAT) {
            return Err(format!(
                "\"format\" is {format:?}, this xtask reads format {FORMAT}"
            ));
        }
        let text_field = |key: &str| -> Result<String, String> {
            value
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("\"{key}\" is missing or not a string"))
        };
        let runs = value
            .get("runs")
            .and_then(Value::as_u64)
            .and_then(|r| u32::try_from(r).ok())
            .ok_or("\"runs\" is missing or not a number")?;
        let list = value
            .get("workloads")
            .and_then(Value::as_array)
            .ok_or("\"workloads\" is missing or not a list")?;
        let mut workloads = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            let name = entry
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("workload {i}: \"name\" is missing"))?;
            let n = entry
                .get("n")
                .and_then(Value::as_u64)
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!("workload {i} ({name}): \"n\" is missing or not positive")
                })?;
            let figure = |key: &str| entry.get(key).and_then(Value::as_f64);
            let allocations = figure("allocations_per_call").ok_or_else(|| {
                format!("workload {name} {n}: \"allocations_per_call\" is missing")
            })?;
            workloads.push(Figures {
                name: name.to_owned(),
                n,
                instructions: figure("instructions_per_call"),
                outside_allocator: figure("outside_malloc_per_call"),
                allocations,
                bytes_held: figure("bytes_held_per_call"),
            });
        }
        Ok(Self {
            recorded: text_field("recorded")?,
            commit: text_field("commit")?,
            valgrind: text_field("valgrind")?,
            rustc: text_field("rustc")?,
            runs,
            workloads,
        })
    }

    fn find(&self, name: &str, n: u64) -> Option<&Figures> {
        self.workloads.iter().find(|w| w.name == name && w.n == n)
    }
}

/// Where a figure stands against its baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the limit.
    Pass,
    /// More than [`LIMIT_PERCENT`] below the baseline: passes, and the
    /// baseline should be lowered.
    Improved,
    /// Above the limit.
    Fail,
}

/// One figure of one workload against its baseline.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Line {
    /// `seq 400`.
    pub(crate) workload: String,
    /// `instructions/call outside malloc/free`, `allocations/call`, or for
    /// a memory workload `allocations/run` and `bytes held/run`.
    pub(crate) figure: &'static str,
    pub(crate) baseline: f64,
    pub(crate) measured: f64,
    /// The most that passes: the baseline + [`LIMIT_PERCENT`].
    pub(crate) limit: f64,
    pub(crate) verdict: Verdict,
}

impl Line {
    /// measured − baseline, in percent of the baseline (none when the
    /// baseline is 0).
    fn change(&self) -> Option<f64> {
        (self.baseline != 0.0).then(|| (self.measured - self.baseline) / self.baseline * 100.0)
    }
}

/// What the check found.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Report {
    pub(crate) lines: Vec<Line>,
    /// Measured workloads (`seq 400`) the baseline has no entry for.
    pub(crate) missing: Vec<String>,
    /// Figures measured that the baseline lacks, and other differences of
    /// shape (a memory workload recorded with instructions, ...).
    pub(crate) unmatched: Vec<String>,
    /// Baseline workloads that were not measured this time.
    pub(crate) not_measured: Vec<String>,
    /// Differences of valgrind or rustc from the baseline's.
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// Whether the gate passes: no figure above its limit, nothing missing.
    pub(crate) fn passed(&self) -> bool {
        self.missing.is_empty()
            && self.unmatched.is_empty()
            && self.lines.iter().all(|l| l.verdict != Verdict::Fail)
    }

    /// The table, then what failed, what improved and the notes.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n| workload | figure | baseline | measured | change | limit (+{LIMIT_PERCENT:.0} %) | verdict |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---|");
        for line in &self.lines {
            let value = |x: f64| {
                if line.figure.starts_with("allocations") {
                    format!("{:.2}", round2(x))
                } else {
                    crate::instr::thousands(x)
                }
            };
            let change = line
                .change()
                .map_or_else(|| "-".to_owned(), |c| format!("{c:+.2} %"));
            let verdict = match line.verdict {
                Verdict::Pass => "pass",
                Verdict::Improved => "pass (improved: lower the baseline)",
                Verdict::Fail => "FAIL",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {change} | {} | {verdict} |",
                line.workload,
                line.figure,
                value(line.baseline),
                value(line.measured),
                value(line.limit)
            );
        }
        for name in &self.missing {
            let _ = writeln!(
                out,
                "| {name} | - | missing | - | - | - | FAIL: not in the baseline |"
            );
        }
        let failed: Vec<&Line> = self
            .lines
            .iter()
            .filter(|l| l.verdict == Verdict::Fail)
            .collect();
        let improved: Vec<&Line> = self
            .lines
            .iter()
            .filter(|l| l.verdict == Verdict::Improved)
            .collect();
        let describe = |l: &&Line| {
            format!(
                "{} {} {}",
                l.workload,
                l.figure,
                l.change()
                    .map_or_else(|| "(baseline 0)".to_owned(), |c| format!("{c:+.2} %"))
            )
        };
        if !failed.is_empty() {
            let _ = writeln!(
                out,
                "\nabove the limit (baseline + {LIMIT_PERCENT:.0} %): {}",
                failed.iter().map(describe).collect::<Vec<_>>().join("; ")
            );
        }
        if !self.missing.is_empty() {
            let _ = writeln!(
                out,
                "\nnot in the baseline ({BASELINE_FILE}): {}; a new workload enters the gate \
                 with a new baseline (`cargo xtask bench --instructions --write-baseline`)",
                self.missing.join(", ")
            );
        }
        for what in &self.unmatched {
            let _ = writeln!(out, "\n{what}");
        }
        if !improved.is_empty() {
            let _ = writeln!(
                out,
                "\nnote: more than {LIMIT_PERCENT:.0} % better than the baseline: {}. Lower the \
                 baseline to lock the gain in (`cargo xtask bench --instructions \
                 --write-baseline`, then commit {BASELINE_FILE})",
                improved.iter().map(describe).collect::<Vec<_>>().join("; ")
            );
        }
        if !self.not_measured.is_empty() {
            let _ = writeln!(
                out,
                "\n{} baseline workload{} not measured this time: {}",
                self.not_measured.len(),
                if self.not_measured.len() == 1 {
                    ""
                } else {
                    "s"
                },
                self.not_measured.join(", ")
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "\nnote: {note}");
        }
        out
    }
}

/// A figure against its baseline value.
fn judge(baseline: f64, measured: f64) -> (f64, Verdict) {
    let limit = baseline * (1.0 + LIMIT_PERCENT / 100.0);
    let floor = baseline * (1.0 - LIMIT_PERCENT / 100.0);
    let verdict = if measured > limit {
        Verdict::Fail
    } else if measured < floor {
        Verdict::Improved
    } else {
        Verdict::Pass
    };
    (limit, verdict)
}

/// Compares `measured` with `baseline`, measured with `valgrind` and
/// `rustc` (their `--version` lines).
pub(crate) fn compare(
    baseline: &Baseline,
    measured: &[Figures],
    valgrind: &str,
    rustc: &str,
) -> Report {
    let mut report = Report::default();
    for m in measured {
        let Some(b) = baseline.find(&m.name, m.n) else {
            let others: Vec<String> = baseline
                .workloads
                .iter()
                .filter(|b| b.name == m.name)
                .map(|b| b.n.to_string())
                .collect();
            report.missing.push(if others.is_empty() {
                m.key()
            } else {
                format!("{} (the baseline has n = {})", m.key(), others.join(", "))
            });
            continue;
        };
        let recorded = b.compared();
        for (figure, value) in m.compared() {
            match recorded.iter().find(|(f, _)| *f == figure) {
                Some(&(_, base)) => {
                    let (limit, verdict) = judge(base, value);
                    report.lines.push(Line {
                        workload: m.key(),
                        figure,
                        baseline: base,
                        measured: value,
                        limit,
                        verdict,
                    });
                }
                None => report.unmatched.push(format!(
                    "{} {figure}: measured, but the baseline records none for it; rewrite the \
                     baseline",
                    m.key()
                )),
            }
        }
    }
    report.not_measured = baseline
        .workloads
        .iter()
        .filter(|b| !measured.iter().any(|m| m.name == b.name && m.n == b.n))
        .map(Figures::key)
        .collect();
    for (tool, recorded, now) in [
        ("valgrind", baseline.valgrind.as_str(), valgrind),
        ("rustc", baseline.rustc.as_str(), rustc),
    ] {
        if recorded != now {
            report.notes.push(format!(
                "the baseline was recorded with {recorded}, this is {now}: {tool}'s version \
                 moves the counts; if that is the cause of a change, rewrite the baseline"
            ));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workload whose instructions outside the allocator are `outside`
    /// (and a total a third more, which the gate does not compare).
    fn figures(name: &str, n: u64, outside: f64, allocations: f64) -> Figures {
        Figures {
            name: name.to_owned(),
            n,
            instructions: Some(round2(outside * 4.0 / 3.0)),
            outside_allocator: Some(outside),
            allocations,
            bytes_held: None,
        }
    }

    fn baseline(workloads: Vec<Figures>) -> Baseline {
        Baseline {
            recorded: "2026-12-05".to_owned(),
            commit: "d0692dc".to_owned(),
            valgrind: "valgrind-3.19.0".to_owned(),
            rustc: "rustc 1.95.0".to_owned(),
            runs: 3,
            workloads,
        }
    }

    fn check(base: &[Figures], measured: &[Figures]) -> Report {
        compare(
            &baseline(base.to_vec()),
            measured,
            "valgrind-3.19.0",
            "rustc 1.95.0",
        )
    }

    #[test]
    fn three_point_one_percent_more_fails() {
        let report = check(
            &[figures("seq", 400, 20_000.0, 37.0)],
            &[figures("seq", 400, 20_620.0, 37.0)],
        );
        assert!(!report.passed());
        assert_eq!(report.lines[0].verdict, Verdict::Fail);
        assert_eq!(report.lines[1].verdict, Verdict::Pass);
        let table = report.render();
        assert!(
            table.contains(
                "| seq 400 | instructions/call outside malloc/free | 20,000 | 20,620 | +3.10 % | 20,600 | FAIL |"
            ),
            "{table}"
        );
        assert!(
            table.contains("above the limit (baseline + 3 %): seq 400 instructions/call outside malloc/free +3.10 %"),
            "{table}"
        );
    }

    #[test]
    fn two_point_nine_percent_more_passes() {
        let report = check(
            &[figures("seq", 400, 20_000.0, 37.0)],
            &[figures("seq", 400, 20_580.0, 37.0)],
        );
        assert!(report.passed(), "{}", report.render());
        assert!(report.lines.iter().all(|l| l.verdict == Verdict::Pass));
        assert!(report.render().contains("| +2.90 % | 20,600 | pass |"));
    }

    #[test]
    fn one_more_allocation_fails_on_a_small_count() {
        // 10 → 10.3 is the limit: 10.25 passes, 11 fails.
        let base = [figures("par", 1000, 16_000.0, 10.0)];
        assert!(check(&base, &[figures("par", 1000, 16_000.0, 10.25)]).passed());
        let report = check(&base, &[figures("par", 1000, 16_000.0, 11.0)]);
        assert!(!report.passed());
        assert_eq!(report.lines[1].figure, "allocations/call");
        assert_eq!(report.lines[1].verdict, Verdict::Fail);
        assert!(
            report.render().contains(
                "| par 1000 | allocations/call | 10.00 | 11.00 | +10.00 % | 10.30 | FAIL |"
            ),
            "{}",
            report.render()
        );
    }

    #[test]
    fn a_workload_missing_from_the_baseline_fails_naming_it() {
        let report = check(
            &[
                figures("seq", 400, 20_000.0, 37.0),
                figures("seq-ledger", 50, 24_000.0, 40.0),
            ],
            &[
                figures("seq", 400, 20_000.0, 37.0),
                figures("nested", 1000, 19_000.0, 19.0),
                figures("seq-ledger", 1000, 24_000.0, 40.0),
            ],
        );
        assert!(!report.passed());
        assert_eq!(
            report.missing,
            ["nested 1000", "seq-ledger 1000 (the baseline has n = 50)"]
        );
        let table = report.render();
        assert!(
            table.contains("| nested 1000 | - | missing | - | - | - | FAIL: not in the baseline |"),
            "{table}"
        );
        assert!(
            table.contains("not in the baseline (xtask/instructions-baseline.json): nested 1000")
        );
        assert_eq!(report.not_measured, ["seq-ledger 50"]);
    }

    #[test]
    fn a_better_figure_passes_with_a_note() {
        let report = check(
            &[figures("seq", 400, 20_000.0, 37.0)],
            &[figures("seq", 400, 15_000.0, 30.0)],
        );
        assert!(report.passed());
        assert!(report.lines.iter().all(|l| l.verdict == Verdict::Improved));
        let table = report.render();
        assert!(table.contains("| -25.00 % |"), "{table}");
        assert!(
            table.contains(
                "note: more than 3 % better than the baseline: seq 400 instructions/call outside malloc/free -25.00 %"
            ),
            "{table}"
        );
        assert!(table.contains("Lower the baseline to lock the gain in"));
        // Within 3 % below: a plain pass, no note.
        let report = check(
            &[figures("seq", 400, 20_000.0, 37.0)],
            &[figures("seq", 400, 19_500.0, 37.0)],
        );
        assert!(report.lines.iter().all(|l| l.verdict == Verdict::Pass));
        assert!(!report.render().contains("better than the baseline"));
    }

    #[test]
    fn other_tool_versions_are_a_note_not_a_failure() {
        let report = compare(
            &baseline(vec![figures("seq", 400, 20_000.0, 37.0)]),
            &[figures("seq", 400, 20_000.0, 37.0)],
            "valgrind-3.22.0",
            "rustc 1.95.0",
        );
        assert!(report.passed());
        assert_eq!(report.notes.len(), 1);
        assert!(report.render().contains(
            "note: the baseline was recorded with valgrind-3.19.0, this is valgrind-3.22.0"
        ));
    }

    #[test]
    fn the_memory_workload_is_checked_on_allocations_and_bytes_held() {
        let parked = |bytes| Figures {
            name: "parked".to_owned(),
            n: 1000,
            instructions: None,
            outside_allocator: None,
            allocations: 20.0,
            bytes_held: Some(bytes),
        };
        let report = check(&[parked(6_000.0)], &[parked(6_400.0)]);
        assert!(!report.passed());
        assert_eq!(
            report
                .lines
                .iter()
                .map(|l| (l.figure, l.verdict))
                .collect::<Vec<_>>(),
            [
                ("allocations/run", Verdict::Pass),
                ("bytes held/run", Verdict::Fail)
            ]
        );
        // Measured per call where the baseline has it per run: both fail.
        let report = check(&[parked(6_000.0)], &[figures("parked", 1000, 1.0, 20.0)]);
        assert!(!report.passed());
        assert_eq!(report.unmatched.len(), 2);
    }

    #[test]
    fn the_baseline_file_round_trips() {
        let recorded = Baseline {
            workloads: vec![
                figures("floor", 1000, 1435.0, 4.0),
                figures("seq", 400, 12_727.5, 19.0),
                figures("seq-ledger", 50, 40_863.14, 48.28),
                Figures {
                    name: "parked".to_owned(),
                    n: 1000,
                    instructions: None,
                    outside_allocator: None,
                    allocations: 20.0,
                    bytes_held: Some(6_473.22),
                },
            ],
            ..baseline(Vec::new())
        };
        let text = recorded.to_json();
        assert!(
            text.contains(
                "    {\"name\": \"seq\", \"n\": 400, \"instructions_per_call\": 16970, \
             \"outside_malloc_per_call\": 12727.5, \"allocations_per_call\": 19},\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "    {\"name\": \"parked\", \"n\": 1000, \"allocations_per_call\": 20, \"bytes_held_per_call\": 6473.22}\n"
        ), "{text}");
        assert_eq!(Baseline::from_json(&text), Ok(recorded.clone()));
        // What the check reads is what was written, so it passes on itself.
        assert!(
            compare(
                &recorded,
                &recorded.workloads,
                &recorded.valgrind,
                &recorded.rustc
            )
            .passed()
        );
        assert!(Baseline::from_json("{").is_err());
        let other = text.replace("\"format\": 1", "\"format\": 2");
        assert!(
            Baseline::from_json(&other)
                .err()
                .is_some_and(|e| e.contains("format"))
        );
        let broken = text.replace("\"allocations_per_call\": 19", "\"allocs\": 19");
        assert!(
            Baseline::from_json(&broken)
                .err()
                .is_some_and(|e| e.contains("seq 400"))
        );
    }
}
