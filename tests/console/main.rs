//! Issue 30: the web console through the facade (`tinyagents::console`),
//! over real SQLite stores and runs of a real harness, spoken to in plain
//! HTTP: safety, the approval inbox, the calls in doubt, the run's tree
//! and its live stream. The browser tests are the command line's
//! (`crates/tinyagents-cli/tests/cli/console_browser.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

mod approvals;
mod doubt;
mod fixture;
mod http;
mod postgres;
mod security;
mod tree;
