//! A randomized crash campaign of the project's own (issue 18): each trial
//! runs the 40-turn agent of `workload.rs` in a real process on a SQLite
//! ledger, kills it with SIGKILL at a seeded random moment, recovers it in
//! a new process (in a quarter of the trials that recovery is killed too,
//! and a third process recovers again), then checks, from the ledger and
//! the payment service's own record:
//!
//! - no `ToolReplay::Never` effect happened twice;
//! - every effect that happened is settled, reconciled or listed in doubt;
//! - nothing in doubt is missing from `unfinished_runs()` or `in_doubt()`;
//! - every run ended cleanly (finished, no row left started);
//! - with reconciliation on, no outcome is left unknown.
//!
//! Half the trials run without reconciliation, to measure how many
//! "interrupted, outcome unknown" answers were for payments that happened.
//! `TINYAGENTS_CAMPAIGN_TRIALS` sets the number of trials (default 24),
//! `TINYAGENTS_CAMPAIGN_SEED` the first seed, and
//! `TINYAGENTS_CAMPAIGN_DELAY_US` forces the kill delay (to replay one
//! trial from the seed and delay a failure prints). `cargo xtask crash
//! --trials N` runs more, in release.
#![cfg(unix)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

mod check;
mod workload;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinyagents::prelude::*;
use tinyagents::{
    core::RunId, harness::ResumeOptions, ledger::EffectLedger, ledger::RunState,
    ledger::SqliteLedger,
};

use check::{Tally, check_trial};
use workload::{RUN, harness};

const MODE: &str = "TINYAGENTS_CAMPAIGN_MODE";
const DIR: &str = "TINYAGENTS_CAMPAIGN_DIR";
const RECONCILE: &str = "TINYAGENTS_CAMPAIGN_RECONCILE";

/// A child process: `run` drives the agent, `recover` recovers every run
/// the ledger lists. Each writes `ready` once its ledger is open.
#[test]
#[ignore = "run by the campaign as a child process"]
fn campaign_child() {
    let (Ok(mode), Ok(dir)) = (std::env::var(MODE), std::env::var(DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let reconcile = std::env::var(RECONCILE).is_ok_and(|v| v == "1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let ledger: Arc<dyn EffectLedger> =
            Arc::new(SqliteLedger::open(dir.join("ledger.db")).await.unwrap());
        let harness = harness(&dir, ledger.clone(), reconcile);
        std::fs::write(dir.join(format!("ready-{mode}")), b"1").unwrap();
        match mode.as_str() {
            "run" => {
                let run = harness
                    .run_with(
                        RunRequest::new("pay everyone").with_run_id(RunId::from(RUN)),
                        &EventSink::none(),
                    )
                    .await
                    .unwrap();
                assert_eq!(run.status, RunStatus::Completed);
            }
            _ => {
                for run in ledger.unfinished_runs().await.unwrap() {
                    if ledger.run_state(&run).await.unwrap() == RunState::Finished {
                        if reconcile {
                            harness.reconcile(&run).await.unwrap();
                        }
                        continue;
                    }
                    match harness
                        .recover(&run, ResumeOptions::default(), &EventSink::none())
                        .await
                    {
                        Ok(recovered) => assert_eq!(recovered.status, RunStatus::Completed),
                        // Killed before its first checkpoint was durable:
                        // nothing of it ran.
                        Err(TinyAgentsError::State(text)) if text.contains("has no checkpoint") => {
                        }
                        Err(error) => panic!("recovery failed: {error}"),
                    }
                }
            }
        }
        ledger.flush().await.unwrap();
    });
}

fn spawn(dir: &Path, mode: &str, reconcile: bool) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "campaign_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(MODE, mode)
        .env(DIR, dir)
        .env(RECONCILE, if reconcile { "1" } else { "0" })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the child's `ready` file; `None` when it ended first.
fn await_ready(child: &mut Child, dir: &Path, mode: &str) -> Option<()> {
    let ready = dir.join(format!("ready-{mode}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "the {mode} child never opened its ledger"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    std::fs::remove_file(ready).unwrap();
    Some(())
}

/// Runs `mode` and SIGKILLs it `delay` after its ledger is open (if it is
/// still running then). Whether it was killed.
fn kill_after(dir: &Path, mode: &str, reconcile: bool, delay: Duration) -> bool {
    let mut child = spawn(dir, mode, reconcile);
    if await_ready(&mut child, dir, mode).is_none() {
        finish(child, mode);
        return false;
    }
    std::thread::sleep(delay);
    let killed = child.try_wait().unwrap().is_none();
    if killed {
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    } else {
        finish(child, mode);
    }
    killed
}

/// Waits for a child that must end cleanly.
fn finish(child: Child, mode: &str) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {mode} child failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A seeded generator (splitmix64): everything random in a trial.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// One trial: run, kill, (kill a recovery,) recover, check.
fn trial(seed: u64, reconcile: bool, span: Duration, tally: &mut Tally) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Seeded(seed);
    let span_us = u64::try_from(span.as_micros()).unwrap_or(u64::MAX);
    let delay = env_u64("TINYAGENTS_CAMPAIGN_DELAY_US").unwrap_or_else(|| rng.below(span_us));
    let crashed = kill_after(dir.path(), "run", reconcile, Duration::from_micros(delay));
    let twice = rng.below(4) == 0;
    let mut recoveries = 0;
    if twice {
        let again = Duration::from_micros(rng.below(span_us / 2));
        kill_after(dir.path(), "recover", reconcile, again);
        recoveries += 1;
    }
    let child = spawn(dir.path(), "recover", reconcile);
    finish(child, "recover");
    recoveries += 1;
    let context = format!(
        "seed {seed:#x}, kill after {delay} µs, reconcile {reconcile}, recovery killed {twice} \
         (replay: TINYAGENTS_CAMPAIGN_SEED={seed} TINYAGENTS_CAMPAIGN_TRIALS=1 \
         TINYAGENTS_CAMPAIGN_DELAY_US={delay})"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(check_trial(dir.path(), reconcile, &context, tally));
    tally.trials += 1;
    tally.crashed += u64::from(crashed);
    tally.recoveries += recoveries;
}

/// How long an uninterrupted run takes here, from its ledger being open.
fn measure_span(reconcile: bool) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(dir.path(), "run", reconcile);
    await_ready(&mut child, dir.path(), "run").expect("the run child opened its ledger");
    let started = Instant::now();
    finish(child, "run");
    started.elapsed()
}

#[test]
fn crash_campaign_never_repeats_an_effect_and_keeps_every_doubt_in_view() {
    let trials = env_u64("TINYAGENTS_CAMPAIGN_TRIALS").unwrap_or(24);
    let first = env_u64("TINYAGENTS_CAMPAIGN_SEED").unwrap_or(0x5eed_0018);
    let span = measure_span(true);
    let mut without = Tally::default();
    let mut with = Tally::default();
    let started = Instant::now();
    for n in 0..trials {
        let seed = first.wrapping_add(n);
        // Alternate: the same seeds' delays with and without reconciliation.
        if n % 2 == 0 {
            trial(seed, false, span, &mut without);
        } else {
            trial(seed, true, span, &mut with);
        }
    }
    println!(
        "crash campaign: {trials} trials in {:.1} s (an uninterrupted run takes {} ms here)",
        started.elapsed().as_secs_f64(),
        span.as_millis()
    );
    println!("without reconciliation: {}", without.report());
    println!("with reconciliation:    {}", with.report());
    assert_eq!(
        with.unknown, 0,
        "a tool that reconciles leaves no outcome unknown"
    );
    assert!(
        without.crashed + with.crashed > 0,
        "no trial was killed mid-run: the campaign tested nothing"
    );
}
