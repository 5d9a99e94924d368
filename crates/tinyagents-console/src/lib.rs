//! The tinyagents web console: one screen from a run to its steps to a
//! call's input and output, an approval inbox across runs, the calls in
//! doubt after a crash, and the sessions, served over the run store
//! (`tinyagents-runs`), the effect ledger and the session store.
//!
//! It shows what no other agent console shows because it reads the
//! governed call path's own records: why a call was refused (the rule's
//! words), what a waiting call waits for and what binds a decision to it
//! (run, call, tool, arguments' hash), which calls' effects are unknown
//! and under what idempotency key.
//!
//! - [`Console`]: the console over a [`ConsoleStores`], as an
//!   [`axum::Router`] a host mounts in its own server
//!   ([`Console::router`]) or served on its own ([`Console::serve`]).
//! - Pages are HTML rendered on the server, with one small script (live
//!   updates of a run's tree over server-sent events). Nothing to build,
//!   nothing fetched from elsewhere; the pages work without the script.
//! - Safety: a token on every request (a cookie set from the URL printed
//!   at start, or `Authorization: Bearer`), the `Host` checked against the
//!   console's own names, the `Origin` of every request that carries one
//!   checked, and a state-changing form refused without the page's own
//!   form token. Arguments and results are shown only from the run's
//!   journal, which holds them only when the run captured tool payloads:
//!   what the capture setting withholds is never in what the console has.
//! - Actions: approve or deny waiting calls (one or several, with a
//!   reason), record what a person found of a call in doubt; resuming and
//!   recovering a run are the host's ([`ConsoleHost`]): the command line
//!   runs `tinyagents resume` or `recover` for them.
//!
//! What it is not: a scheduler (workers run queued runs), an editor of
//! agents files, or a store: every console over the same stores sees the
//! same state, and keeps none of its own.

mod auth;
mod console;
mod host;
mod html;
mod live;
mod pages;
mod tree;

pub use console::{Console, ConsoleError, ConsoleOptions, ConsoleStores};
pub use host::{ConsoleHost, HostError};
pub use tree::{CallTree, Node, NodeKind, NodeState};
