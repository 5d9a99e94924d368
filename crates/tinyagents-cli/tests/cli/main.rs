//! The `tinyagents` binary, run as a user runs it: agents files over the
//! real `server-everything`, runs that wait for approval and are approved
//! and resumed in other processes, a killed run recovered, bad files, the
//! JSON lines, sessions, Ctrl-C, the live view in a real terminal (tmux),
//! the run store's approvals, seals and crash campaign, prices and
//! `max_cost` (each run's and turn's tokens and cost in the tree and
//! `show`), the command line on PostgreSQL (`--db`, `queue`, `worker`),
//! and the web console in a real browser (`console`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod approval;
mod console_browser;
mod console_postgres;
mod crash;
mod decisions;
mod files;
mod interrupt;
mod mcp_lock;
mod postgres;
mod recover;
mod run;
mod sessions;
mod spend;
mod support;
mod tamper;
mod telemetry;
mod terminal;
