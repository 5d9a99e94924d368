//! Model-checks the shared budget, [`tinyagents_core::LimitTracker`], and
//! the spend tree's reservations, [`tinyagents_core::Spend`], with loom.
//!
//! Under `--cfg tinyagents_loom` the tracker's atomics are loom's, so every
//! interleaving of the compare-and-swap loops below is explored:
//!
//! ```text
//! RUSTFLAGS="--cfg tinyagents_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p tinyagents-core --release --test loom
//! ```
//!
//! (`cargo xtask ci` runs it.) A custom cfg name, not `loom`, so that tokio
//! and its relatives are built as usual.
#![cfg(tinyagents_loom)]

use loom::sync::Arc;
use loom::thread;
use tinyagents_core::{Cost, LimitTracker, RunId, RunLimits, Spend, SpendCaps, Spent, Usage};

const CAP: u32 = 2;

#[derive(Clone, Copy)]
enum Op {
    /// `try_reserve_tool_call`.
    Model,
    /// `try_reserve_nested_tool_call`.
    Nested,
    /// `try_reserve_nested_tool_call`, then, if it succeeded,
    /// `release_nested_tool_call` (a nested call refused at admission).
    NestedThenRelease,
}

/// What one actor did: (reservations that succeeded, slots released).
fn act(tracker: &LimitTracker, op: Op) -> (u32, u32) {
    let ok = match op {
        Op::Model => tracker.try_reserve_tool_call().is_ok(),
        Op::Nested | Op::NestedThenRelease => tracker.try_reserve_nested_tool_call().is_ok(),
    };
    // Whatever the others are doing, the sum never passes the cap.
    assert!(tracker.total_tool_calls() <= CAP, "budget overspent");
    let released = matches!(op, Op::NestedThenRelease) && ok;
    if released {
        tracker.release_nested_tool_call();
        assert!(tracker.total_tool_calls() <= CAP, "budget overspent");
    }
    (u32::from(ok), u32::from(released))
}

/// Three actors (two spawned threads and the model's main thread) against a
/// cap of 2; returns (successes, releases, final total).
fn run(ops: [Op; 3]) -> (u32, u32, u32) {
    let tracker = Arc::new(LimitTracker::new(
        &RunLimits::default().with_max_tool_calls(CAP),
    ));
    let spawned: Vec<_> = ops[..2]
        .iter()
        .map(|&op| {
            let tracker = Arc::clone(&tracker);
            thread::spawn(move || act(&tracker, op))
        })
        .collect();
    let mut outcome = act(&tracker, ops[2]);
    for handle in spawned {
        let Ok((ok, released)) = handle.join() else {
            panic!("an actor panicked");
        };
        outcome.0 += ok;
        outcome.1 += released;
    }
    let counts = tracker.counts();
    assert_eq!(
        counts.tool_calls + counts.nested_tool_calls,
        tracker.total_tool_calls()
    );
    (outcome.0, outcome.1, tracker.total_tool_calls())
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Small by default; LOOM_MAX_PREEMPTIONS overrides.
    builder.preemption_bound.get_or_insert(5);
    builder.check(f);
}

#[test]
fn reservations_fill_the_cap_exactly() {
    model(|| {
        let (won, released, total) = run([Op::Model, Op::Nested, Op::Model]);
        assert_eq!(released, 0);
        // Exactly min(cap, attempts): never over, never refused while free.
        assert_eq!(won, CAP.min(3));
        assert_eq!(total, CAP);
    });
}

#[test]
fn nested_reservations_fill_the_cap_exactly() {
    model(|| {
        let (won, _, total) = run([Op::Nested, Op::Nested, Op::Model]);
        assert_eq!(won, CAP);
        assert_eq!(total, CAP);
    });
}

#[test]
fn a_released_slot_is_reusable_and_never_overspent() {
    model(|| {
        let (won, released, total) = run([Op::NestedThenRelease, Op::Model, Op::Nested]);
        // Each refusal saw a full budget, so at least min(cap, attempts) won;
        // a third can win only through the released slot.
        assert!(won >= CAP.min(3));
        assert!(won <= CAP + released);
        assert_eq!(total, won - released);
        assert!(total <= CAP);
    });
}

/// Three runs of one tree (the root and two delegated children) each
/// reserve a model call of 4 tokens and spend them all against a root cap
/// of 10: in every interleaving exactly two calls are made, and the tree
/// never holds or spends past its cap.
#[test]
fn a_tree_s_reservations_never_pass_its_cap() {
    model(|| {
        let caps = SpendCaps {
            max_tokens: Some(10),
            max_cost: None,
        };
        let root = Spend::root(RunId::new("r"), None, caps, Spent::default(), None);
        let spawned: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let child = root.child(RunId::new(name), None, SpendCaps::default());
                thread::spawn(move || call(&child))
            })
            .collect();
        let mut made = call(&root);
        for handle in spawned {
            let Ok(one) = handle.join() else {
                panic!("an actor panicked");
            };
            made += one;
        }
        assert_eq!(made, 2);
        assert_eq!(root.total().usage.total(), 8);
    });
}

fn call(run: &Spend) -> u32 {
    let Ok(held) = run.reserve(4, Cost::ZERO) else {
        return 0;
    };
    held.settle(&Spent::call(Usage::new(4, 0), None));
    u32::from(run.tree_total().usage.total() <= 10)
}
