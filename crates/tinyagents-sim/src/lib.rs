//! A deterministic simulator of the whole tinyagents harness, in the
//! manner of TigerBeetle's VOPR and FoundationDB's simulator: each seed
//! draws a whole history (tools, policies, limits, a ledger, agents as
//! tools, the models' scripts, and faults: tool errors, panics and hangs,
//! failing hooks and gates, model errors, failing ledger writes,
//! cancellation, slow or stalled event readers, a crash at a ledger write
//! followed by recovery in a fresh process, suspensions stored as JSON and
//! resumed once or twice), drives it through the `tinyagents` facade on a
//! current-thread runtime with tokio's paused clock, and checks seven
//! invariants against the events, the ledger, the tools' own effect log
//! and what was persisted. A failing seed replays exactly, and is shrunk
//! to a smaller history that still fails.
//!
//! It is not a test of single rules (the conformance suites in `tests/`
//! are), nor a benchmark. `cargo xtask sim` runs it; docs/simulation.md
//! says what it covers and what it found.

mod account;
mod check;
pub mod cli;
mod draw;
mod drive;
mod ledger;
mod model;
pub mod mutation;
mod observe;
pub mod plan;
mod policies;
mod rng;
mod shrink;
mod tools;

pub use account::account;
pub use check::{INVARIANTS, Violation, check};
pub use draw::draw;
pub use drive::{Observation, Segment, SegmentEnd, SegmentKind, simulate};
pub use plan::History;
pub use shrink::shrink;
pub use tools::Effect;

/// Draws, runs and checks the history of `seed`.
pub fn run_seed(seed: u64) -> (History, Observation, Vec<Violation>) {
    let history = draw(seed);
    let (seen, violations) = run_history(&history);
    (history, seen, violations)
}

/// Runs and checks `history`. A history that could not be set up is a
/// violation too: the simulator must never pass by not running.
pub fn run_history(history: &History) -> (Observation, Vec<Violation>) {
    let seen = simulate(history);
    let mut violations = check(history, &seen);
    if let Some(error) = &seen.setup_error {
        violations.push(Violation {
            invariant: 0,
            what: format!("the history could not be set up: {error}"),
        });
    }
    (seen, violations)
}
