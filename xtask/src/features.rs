//! The cargo features of the facade (`openai`, `anthropic`, `sqlite`,
//! `orchestrator`, `mcp`, `otel`, `postgres`, `console`): the gate's check that every feature set compiles, and
//! `cargo xtask build-times`, which measures what the default and the
//! minimal facade cost to build from clean.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::{Step, cargo, cargo_command, secs};

/// The facade's features. The gate checks each alone on top of the
/// minimal build (`--no-default-features`); the default build (the first
/// four) is the clippy step's, whose `--workspace` also builds the crates
/// of the others.
pub(crate) const FEATURES: [&str; 8] = [
    "openai",
    "anthropic",
    "sqlite",
    "orchestrator",
    "mcp",
    "otel",
    "postgres",
    "console",
];

/// The crates whose own features the facade's forward to.
const FEATURED_CRATES: [&str; 3] = [
    "tinyagents-models",
    "tinyagents-ledger",
    "tinyagents-orchestrator",
];

/// The gate's step: clippy (a check build, no code generated) with
/// warnings denied, so that code a feature leaves unused fails too, over
/// the minimal facade, the facade with each feature alone, and the featured
/// crates without their features, their tests and benches included.
pub(crate) fn ci_step() -> Step {
    let deny = ["--", "-D", "warnings"];
    let mut minimal_crates = vec!["clippy"];
    for krate in FEATURED_CRATES {
        minimal_crates.extend(["-p", krate]);
    }
    minimal_crates.extend(["--no-default-features", "--all-targets"]);
    minimal_crates.extend(deny);
    let mut commands = vec![
        cargo(minimal_crates),
        cargo(
            ["clippy", "-p", "tinyagents", "--no-default-features"]
                .into_iter()
                .chain(deny),
        ),
    ];
    for feature in FEATURES {
        commands.push(cargo(
            [
                "clippy",
                "-p",
                "tinyagents",
                "--no-default-features",
                "--features",
                feature,
            ]
            .into_iter()
            .chain(deny),
        ));
    }
    Step::new("features", commands)
}

/// Where `build-times` builds unless told otherwise.
const DEFAULT_TARGET_DIR: &str = "/tmp/tinyagents-build-times";

/// `cargo xtask build-times [--target-dir DIR]`: for the default and the
/// minimal facade, the crates in its normal dependency tree, then a build
/// from clean (`cargo build -p tinyagents`, dev profile) in `DIR/default`
/// and `DIR/minimal`, timed, counting the packages compiled. Each of those
/// directories is emptied first (only if it is a cargo target directory),
/// and the workspace's own target directory is never touched.
pub(crate) fn build_times(args: &[String]) -> ExitCode {
    let base = match args {
        [] => PathBuf::from(DEFAULT_TARGET_DIR),
        [flag, dir] if flag == "--target-dir" => PathBuf::from(dir),
        _ => {
            eprintln!("usage: cargo xtask build-times [--target-dir DIR]");
            return ExitCode::from(2);
        }
    };
    let configs: [(&str, &[&str]); 2] = [("default", &[]), ("minimal", &["--no-default-features"])];
    let mut rows = Vec::new();
    for (label, flags) in configs {
        println!(
            "\n==> {label} (cargo build -p tinyagents {})",
            flags.join(" ")
        );
        match measure(&base.join(label), flags) {
            Ok(row) => rows.push((label, row)),
            Err(why) => {
                eprintln!("xtask build-times: {label}: {why}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("\nbuild     crates in tree  packages compiled  clean build");
    for (label, row) in rows {
        println!(
            "{label:<9} {:>14}  {:>17}  {:>11}",
            row.tree_crates,
            row.compiled,
            secs(row.time)
        );
    }
    ExitCode::SUCCESS
}

/// What one feature set costs.
struct Measured {
    /// Distinct crates (name and version) in `cargo tree -e normal`.
    tree_crates: usize,
    /// `Compiling` lines of the clean build (build scripts' and proc
    /// macros' dependencies included).
    compiled: usize,
    /// Wall time of the clean build.
    time: Duration,
}

fn measure(target_dir: &Path, flags: &[&str]) -> Result<Measured, String> {
    let tree_crates = tree_crates(flags)?;
    println!("crates in the normal dependency tree: {tree_crates}");
    if target_dir.exists() {
        if !target_dir.join("CACHEDIR.TAG").exists() {
            return Err(format!(
                "{} exists and is not a cargo target directory: refusing to empty it",
                target_dir.display()
            ));
        }
        fs::remove_dir_all(target_dir)
            .map_err(|e| format!("cannot empty {}: {e}", target_dir.display()))?;
    }
    let mut build = cargo_command();
    build
        .args(["build", "-p", "tinyagents"])
        .args(flags)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    println!(
        "$ CARGO_TARGET_DIR={} cargo build -p tinyagents {}",
        target_dir.display(),
        flags.join(" ")
    );
    let started = Instant::now();
    let output = build
        .output()
        .map_err(|e| format!("cargo build could not start: {e}"))?;
    let time = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("cargo build failed ({}):\n{stderr}", output.status));
    }
    let compiled = stderr
        .lines()
        .filter(|line| line.trim_start().starts_with("Compiling "))
        .count();
    println!("compiled {compiled} packages in {}", secs(time));
    Ok(Measured {
        tree_crates,
        compiled,
        time,
    })
}

/// The distinct crates of `cargo tree -p tinyagents -e normal --prefix none`
/// (a crate seen again is marked `(*)`: counted once).
fn tree_crates(flags: &[&str]) -> Result<usize, String> {
    let output = cargo_command()
        .args([
            "tree",
            "-p",
            "tinyagents",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(flags)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo tree could not start: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo tree failed ({})", output.status));
    }
    let crates: BTreeSet<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(format!("{} {}", words.next()?, words.next()?))
        })
        .collect();
    Ok(crates.len())
}
