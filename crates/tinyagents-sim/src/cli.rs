//! The command line of the simulator, as a function so tests can drive it.
#![allow(clippy::print_stdout)] // a command line: its output is the point

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::drive::{SegmentEnd, SegmentKind};
use crate::{Observation, account, run_history, run_seed, shrink};

/// How to call it.
pub const USAGE: &str = "usage: tinyagents-sim [--seeds N] [--from S] [--seed S] [--for DURATION (30s, 10m, 2h)] [--history FILE] [--save FILE] [--mutation NAME] [--verbose]";

/// What the simulator was asked to do.
#[derive(Debug, Default)]
struct Args {
    seeds: Option<u64>,
    from: u64,
    seed: Option<u64>,
    duration: Option<Duration>,
    mutation: Option<String>,
    verbose: bool,
    /// A saved history (JSON) to run instead of drawing one.
    history: Option<String>,
    /// Where to save the shrunk history of a failure.
    save: Option<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |what: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs {what}"))
        };
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("{arg} needs a number, got `{text}`"))
        };
        match arg.as_str() {
            "--seeds" => out.seeds = Some(number(value("a count")?)?),
            "--from" => out.from = number(value("a seed")?)?,
            "--seed" => out.seed = Some(number(value("a seed")?)?),
            "--for" => out.duration = Some(duration(&value("a duration")?)?),
            "--mutation" => out.mutation = Some(value("a mutation's name")?),
            "--verbose" => out.verbose = true,
            "--history" => out.history = Some(value("a file")?),
            "--save" => out.save = Some(value("a file")?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(out)
}

/// `30s`, `10m`, `2h` or a number of seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (30s, 10m, 2h)"))?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("`{text}` is not a duration (30s, 10m, 2h)")),
    };
    Ok(Duration::from_secs(seconds))
}

/// Silences the panics the simulator plants (the harness contains them;
/// the default hook would print each one), and prints every other.
pub fn quiet_planted_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let planted = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .is_some_and(|text| text.starts_with("sim: planted"));
        if !planted {
            default(info);
        }
    }));
}

/// What the histories covered, so a run shows that the seams were reached.
#[derive(Debug, Default)]
struct Coverage {
    histories: u64,
    segments: u64,
    crashes: u64,
    recoveries: u64,
    resumes: u64,
    executions: u64,
    nested: u64,
    delegated: u64,
    failed_runs: u64,
    sessions: u64,
    suspended: u64,
}

impl Coverage {
    fn add(&mut self, seen: &Observation) {
        self.histories += 1;
        for s in &seen.segments {
            self.segments += 1;
            match (&s.kind, &s.end) {
                (_, SegmentEnd::Crashed) => self.crashes += 1,
                (SegmentKind::Recover, _) => self.recoveries += 1,
                (SegmentKind::Resume | SegmentKind::ResumeAgain, _) => self.resumes += 1,
                _ => {}
            }
            if matches!(s.end, SegmentEnd::Failed(_)) {
                self.failed_runs += 1;
            }
        }
        for (what, _) in &seen.persisted {
            self.sessions += u64::from(what.starts_with("session "));
            self.suspended += u64::from(what == "suspended run");
        }
        for e in &seen.effects {
            self.executions += 1;
            self.nested += u64::from(e.call.is_nested());
            self.delegated += u64::from(e.depth > 0);
        }
    }
}

/// Runs the simulator with `args` (without the program's name).
pub fn main(args: Vec<String>) -> Result<ExitCode, String> {
    let args = parse(&args)?;
    quiet_planted_panics();
    if let Some(name) = &args.mutation {
        crate::mutation::plant(Some(name))?;
        println!("planted mutation `{name}`");
    }
    if let Some(file) = &args.history {
        return replay_saved(file);
    }
    let started = Instant::now();
    let seeds: Box<dyn Iterator<Item = u64>> = match (args.seed, args.seeds, args.duration) {
        (Some(seed), _, _) => Box::new(std::iter::once(seed)),
        (None, Some(n), _) => Box::new(args.from..args.from.saturating_add(n)),
        (None, None, Some(_)) => Box::new(args.from..),
        (None, None, None) => Box::new(args.from..args.from + 1000),
    };
    let mut coverage = Coverage::default();
    for seed in seeds {
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let (history, seen, violations) = run_seed(seed);
        coverage.add(&seen);
        if args.verbose || args.seed.is_some() {
            println!("{}", account(&history, &seen, &violations));
        }
        if let Some(first) = violations.first() {
            let invariant = first.invariant;
            println!("seed {seed} FAILS: {first}");
            let (small, runs) = shrink(&history, |candidate| {
                run_history(candidate)
                    .1
                    .iter()
                    .any(|v| v.invariant == invariant)
            });
            let (seen, violations) = run_history(&small);
            println!(
                "shrunk in {runs} runs; the smaller history:\n{}",
                account(&small, &seen, &violations)
            );
            if let Some(file) = &args.save {
                let text = serde_json::to_string_pretty(&small).map_err(|e| e.to_string())?;
                std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))?;
                println!("saved the shrunk history to {file}");
            }
            println!(
                "replay: cargo xtask sim --seed {seed}{}",
                args.mutation
                    .as_ref()
                    .map(|m| format!(" --mutation {m}"))
                    .unwrap_or_default()
            );
            return Ok(ExitCode::FAILURE);
        }
        if coverage.histories % 1000 == 0 {
            println!(
                "{} histories passed ({:.0?})",
                coverage.histories,
                started.elapsed()
            );
        }
    }
    println!(
        "tinyagents-sim: {} histories passed every invariant in {:.1?}: {} segments, {} crashes, {} recoveries, {} resumes of {} stored states, {} failed runs, {} stored sessions; {} tool executions ({} nested, {} in delegated agents)",
        coverage.histories,
        started.elapsed(),
        coverage.segments,
        coverage.crashes,
        coverage.recoveries,
        coverage.resumes,
        coverage.suspended,
        coverage.failed_runs,
        coverage.sessions,
        coverage.executions,
        coverage.nested,
        coverage.delegated
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs a saved history and prints its account.
fn replay_saved(file: &str) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let history: crate::History =
        serde_json::from_str(&text).map_err(|e| format!("{file} is not a history: {e}"))?;
    let (seen, violations) = run_history(&history);
    println!("{}", account(&history, &seen, &violations));
    Ok(if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_arguments_read_as_written() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(duration("ten").is_err());
        let args = parse(&["--seeds".into(), "5".into(), "--from".into(), "9".into()]).unwrap();
        assert_eq!((args.seeds, args.from), (Some(5), 9));
        assert!(
            parse(&["--seeds".into()])
                .unwrap_err()
                .contains("--seeds needs a count")
        );
        assert!(
            parse(&["--bogus".into()])
                .unwrap_err()
                .contains("unknown argument `--bogus`")
        );
    }
}
