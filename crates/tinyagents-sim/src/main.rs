//! `tinyagents-sim [--seeds N] [--from S] [--seed S] [--for DURATION]
//! [--mutation NAME] [--verbose]`: runs seeded histories of the whole
//! harness and checks every invariant; a failing seed prints its account,
//! shrunk, and how to replay it. `cargo xtask sim` runs it.

use std::process::ExitCode;

fn main() -> ExitCode {
    match tinyagents_sim::cli::main(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(why) => {
            eprintln!("tinyagents-sim: {why}");
            eprintln!("{}", tinyagents_sim::cli::USAGE);
            ExitCode::from(2)
        }
    }
}
