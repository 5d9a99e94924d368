//! The `tinyagents` command line: run the agents an agents file (TOML)
//! declares, watch their call tree live, answer approvals, resume and
//! recover runs from the ledger in another process, list runs and
//! sessions, and queue runs for PostgreSQL workers and decide those that
//! wait (`queue`). See docs/cli.md.
//!
//! It is a program over the facade: everything it does goes through
//! `tinyagents` (agents, MCP tools, the SQLite ledger and session store,
//! the PostgreSQL runs queue), so a run started here is governed like any
//! other. It is not a library
//! for embedding: programs use the facade directly.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod build;
mod cli;
mod command;
pub mod exit;
mod file;
mod script;
mod signal;
mod startup;
mod store;
mod telemetry;
mod view;

use clap::Parser as _;

/// Runs the command line with this process's arguments.
pub fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return std::process::ExitCode::from(exit::FAILED);
        }
    };
    let code = runtime.block_on(command::dispatch(cli));
    // A prompt may still hold a thread reading standard input.
    runtime.shutdown_background();
    std::process::ExitCode::from(code)
}
