//! `cargo xtask sim` (the deterministic simulator, crates/tinyagents-sim)
//! and `cargo xtask fuzz` (the cargo-fuzz targets in fuzz/), and the
//! simulator's share of the CI gate.

use std::process::ExitCode;

use crate::{Cmd, Step, Tool, cargo};

/// Seeds the CI gate runs: about half a minute in a debug build here.
pub(crate) const CI_SEEDS: &str = "3000";

/// The gate's step: a fixed run of seeds, then the simulator's own tests
/// with the mutations planted (each must be caught by some seed).
pub(crate) fn ci_step() -> Step {
    Step::new(
        "sim",
        vec![
            cargo([
                "run",
                "-q",
                "-p",
                "tinyagents-sim",
                "--",
                "--seeds",
                CI_SEEDS,
            ]),
            cargo([
                "clippy",
                "-p",
                "tinyagents-sim",
                "--all-targets",
                "--features",
                "mutations",
                "--",
                "-D",
                "warnings",
            ]),
            cargo([
                "test",
                "-p",
                "tinyagents-sim",
                "--features",
                "mutations",
                "--test",
                "mutations",
                "--",
                "--nocapture",
            ]),
        ],
    )
}

/// `cargo xtask sim [--release] [--mutation NAME] [SIMULATOR ARGS]`: the
/// simulator's arguments (`--seeds N`, `--from S`, `--seed S`, `--for
/// DURATION`, `--verbose`) pass through.
pub(crate) fn sim(args: &[String]) -> ExitCode {
    let mut cmd = cargo(["run", "-q", "-p", "tinyagents-sim"]);
    let mut pass = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--release" => cmd.args.push("--release".into()),
            other => pass.push(other.to_owned()),
        }
    }
    if pass.iter().any(|a| a == "--mutation") {
        cmd.args.extend(["--features".into(), "mutations".into()]);
    }
    cmd.args.push("--".into());
    cmd.args.extend(pass.into_iter().map(Into::into));
    run(&cmd, "sim")
}

/// The fuzz targets (fuzz/fuzz_targets).
const TARGETS: [&str; 5] = [
    "parsers",
    "suspended_run",
    "checkpoint",
    "ledger_rows",
    "prepare_arguments",
];

/// `cargo xtask fuzz TARGET [SECONDS]`: writes the first corpus, then runs
/// the target under libFuzzer with AddressSanitizer for SECONDS (600).
/// cargo-fuzz needs nightly flags; the pinned stable toolchain accepts them
/// with `RUSTC_BOOTSTRAP=1` (no other toolchain can be fetched here).
pub(crate) fn fuzz(args: &[String]) -> ExitCode {
    let (Some(target), seconds) = (args.first(), args.get(1).map_or("600", String::as_str)) else {
        eprintln!("xtask fuzz: name a target ({})", TARGETS.join(", "));
        return ExitCode::from(2);
    };
    if !TARGETS.contains(&target.as_str()) || seconds.parse::<u64>().is_err() {
        eprintln!(
            "xtask fuzz: expected TARGET ({}) and SECONDS, got `{}`",
            TARGETS.join(", "),
            args.join(" ")
        );
        return ExitCode::from(2);
    }
    let tool = Tool {
        subcommand: "fuzz",
        krate: "cargo-fuzz",
        version: Some("0.13.2"),
    };
    if let Err(why) = tool.ensure() {
        println!("xtask fuzz: {why}");
        return ExitCode::FAILURE;
    }
    let target_dir = crate::root()
        .join("target/fuzz")
        .to_string_lossy()
        .into_owned();
    let seeds = cargo([
        "run",
        "--release",
        "--manifest-path",
        "fuzz/Cargo.toml",
        "--bin",
        "seeds",
    ])
    .env("CARGO_TARGET_DIR", target_dir);
    if run(&seeds, "fuzz") != ExitCode::SUCCESS {
        return ExitCode::FAILURE;
    }
    let limit = format!("-max_total_time={seconds}");
    let mut fuzz = cargo([
        "fuzz",
        "run",
        "--fuzz-dir",
        "fuzz",
        target.as_str(),
        "--",
        limit.as_str(),
        "-print_final_stats=1",
    ])
    .env("RUSTC_BOOTSTRAP", "1");
    if target == "ledger_rows" {
        // The SQLite ledger's writer thread is still exiting when an input
        // ends (its shutdown answers before the thread is gone), and
        // LeakSanitizer counts that thread's locals as leaked.
        fuzz.args.push("-detect_leaks=0".into());
    }
    run(&fuzz, "fuzz")
}

fn run(cmd: &Cmd, name: &str) -> ExitCode {
    println!("$ {cmd}");
    match cmd.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            println!("xtask {name}: {why}");
            ExitCode::FAILURE
        }
    }
}
