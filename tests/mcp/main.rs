//! MCP both ways, against software no one here wrote: the official
//! `server-everything` and `server-filesystem` under our client, our
//! server under the official TypeScript SDK's client, and broken servers
//! (`js/broken.mjs`) for the faults. `cargo xtask ci` installs the pinned
//! npm packages into `.tools/mcp`. `budgets`: a served agent's tokens and
//! money in its tinyagents caller's tree, both ways over the wire.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod support;

mod approvals;
mod budgets;
mod faults;
mod peers;
mod seams;
mod served;
mod trust;
