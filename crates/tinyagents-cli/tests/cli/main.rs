//! The `tinyagents` binary, run as a user runs it: agents files over the
//! real `server-everything`, runs that wait for approval and are approved
//! and resumed in other processes, a killed run recovered, bad files, the
//! JSON lines, sessions, Ctrl-C, the live view in a real terminal (tmux),
//! and the PostgreSQL runs queue (`queue`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod approval;
mod files;
mod interrupt;
mod queue;
mod recover;
mod run;
mod sessions;
mod support;
mod telemetry;
mod terminal;
