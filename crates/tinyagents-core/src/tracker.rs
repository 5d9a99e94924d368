//! The shared budget of a run.
//!
//! `tool_calls` (model-issued) and `nested_tool_calls` are packed in one
//! atomic word, low and high 32 bits, so a reservation against their sum is a
//! single compare-and-swap: concurrent callers never overspend the cap and are
//! never refused while a slot is free.
//!
//! Tokens and money are not counted here: they are the tree's
//! ([`Spend`](crate::Spend)), reserved before a model call.

use serde::{Deserialize, Serialize};

use crate::error::TinyAgentsError;
use crate::limits::{LimitKind, RunLimits};
use crate::spend::Spent;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const NESTED_ONE: u64 = 1 << 32;
const LOW_MASK: u64 = u32::MAX as u64;

/// What a run has spent, as persisted with its state: its tool-call budget
/// ([`LimitTracker::counts`]) and the tokens and money of it and every run
/// it delegated to ([`RunContext::budget`](crate::RunContext::budget)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetCounts {
    /// Model-issued tool calls.
    pub tool_calls: u32,
    /// Nested tool calls.
    pub nested_tool_calls: u32,
    /// Model calls.
    pub model_calls: u32,
    /// Tokens: `spent.usage.total()` (kept for states written before
    /// `spent`).
    pub tokens: u64,
    /// Tokens and money of the run and every run under it.
    #[serde(default)]
    pub spent: Spent,
}

impl BudgetCounts {
    /// What `spent` holds, or, for a state written before it, the total of
    /// `tokens` as input tokens.
    pub fn spent(&self) -> Spent {
        if self.spent == Spent::default() && self.tokens > 0 {
            return Spent {
                usage: crate::limits::Usage::new(self.tokens, 0),
                ..Spent::default()
            };
        }
        self.spent
    }
}

/// The counters of one run, shared by everything that spends from it.
#[derive(Debug)]
pub struct LimitTracker {
    /// Low 32 bits: model-issued tool calls; high 32 bits: nested tool calls.
    calls: AtomicU64,
    model_calls: AtomicU32,
    max_tool_calls: u32,
    max_model_calls: u32,
}

fn split(word: u64) -> (u32, u32) {
    // Each half is masked to 32 bits, so the conversions cannot fail.
    let low = u32::try_from(word & LOW_MASK).unwrap_or(u32::MAX);
    let high = u32::try_from(word >> 32).unwrap_or(u32::MAX);
    (low, high)
}

impl LimitTracker {
    /// A fresh budget for `limits`.
    pub fn new(limits: &RunLimits) -> Self {
        Self::restore(limits, BudgetCounts::default())
    }

    /// A budget that has already spent `counts` (a resumed run).
    pub fn restore(limits: &RunLimits, counts: BudgetCounts) -> Self {
        let word = u64::from(counts.tool_calls) | (u64::from(counts.nested_tool_calls) << 32);
        Self {
            calls: AtomicU64::new(word),
            model_calls: AtomicU32::new(counts.model_calls),
            max_tool_calls: limits.max_tool_calls,
            max_model_calls: limits.max_model_calls,
        }
    }

    /// The calls spent (the tokens and money fields left empty: they are
    /// the tree's, see [`RunContext::budget`](crate::RunContext::budget)).
    pub fn counts(&self) -> BudgetCounts {
        let (tool_calls, nested_tool_calls) = split(self.calls.load(Ordering::Acquire));
        BudgetCounts {
            tool_calls,
            nested_tool_calls,
            model_calls: self.model_calls.load(Ordering::Acquire),
            ..BudgetCounts::default()
        }
    }

    /// Model-issued tool calls admitted so far (nested calls not included).
    pub fn tool_calls(&self) -> u32 {
        split(self.calls.load(Ordering::Acquire)).0
    }

    /// Nested tool calls holding a slot.
    pub fn nested_tool_calls(&self) -> u32 {
        split(self.calls.load(Ordering::Acquire)).1
    }

    /// Both kinds together: what counts against `max_tool_calls`.
    pub fn total_tool_calls(&self) -> u32 {
        let (model, nested) = split(self.calls.load(Ordering::Acquire));
        model.saturating_add(nested)
    }

    /// The cap on tool calls.
    pub fn max_tool_calls(&self) -> u32 {
        self.max_tool_calls
    }

    fn reserve_call(&self, one: u64) -> Result<(), TinyAgentsError> {
        let mut word = self.calls.load(Ordering::Acquire);
        loop {
            let (model, nested) = split(word);
            let used = u64::from(model) + u64::from(nested);
            if used >= u64::from(self.max_tool_calls) {
                return Err(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::ToolCalls,
                    limit: u64::from(self.max_tool_calls),
                    used,
                });
            }
            // used < max_tool_calls <= u32::MAX, so neither half can overflow.
            match self.calls.compare_exchange_weak(
                word,
                word + one,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Raises the spent counts to at least `tool_calls` model-issued and
    /// `nested_tool_calls` nested calls (a recovered run charging what its
    /// ledger rows show it spent); never lowers them, and may leave the run
    /// over its cap, so that every later reservation fails.
    pub fn charge_at_least(&self, tool_calls: u32, nested_tool_calls: u32) {
        let mut word = self.calls.load(Ordering::Acquire);
        loop {
            let (model, nested) = split(word);
            let raised =
                u64::from(model.max(tool_calls)) | (u64::from(nested.max(nested_tool_calls)) << 32);
            if raised == word {
                return;
            }
            match self.calls.compare_exchange_weak(
                word,
                raised,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Reserves a slot for a model-issued call: admission counts
    /// `tool_calls + nested_tool_calls` against `max_tool_calls`.
    pub fn try_reserve_tool_call(&self) -> Result<(), TinyAgentsError> {
        self.reserve_call(1)
    }

    /// Reserves a slot for a nested call. Takes `&self`, so a tool future that
    /// holds only `&RunContext` can spend from the run's budget.
    pub fn try_reserve_nested_tool_call(&self) -> Result<(), TinyAgentsError> {
        self.reserve_call(NESTED_ONE)
    }

    /// Gives back the slot of a nested call refused at admission. Call it
    /// only after a successful [`Self::try_reserve_nested_tool_call`].
    pub fn release_nested_tool_call(&self) {
        let mut word = self.calls.load(Ordering::Acquire);
        loop {
            if word >> 32 == 0 {
                // Nothing to release: a caller bug, but never underflow.
                return;
            }
            match self.calls.compare_exchange_weak(
                word,
                word - NESTED_ONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Gives back the slot of a model-issued call that did not run (a call
    /// that waits for a person: resuming reserves it again). Call it only
    /// after a successful [`Self::try_reserve_tool_call`].
    pub fn release_tool_call(&self) {
        let mut word = self.calls.load(Ordering::Acquire);
        loop {
            if word & LOW_MASK == 0 {
                // Nothing to release: a caller bug, but never underflow.
                return;
            }
            match self.calls.compare_exchange_weak(
                word,
                word - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Reserves a model call.
    pub fn try_reserve_model_call(&self) -> Result<(), TinyAgentsError> {
        let mut used = self.model_calls.load(Ordering::Acquire);
        loop {
            if used >= self.max_model_calls {
                return Err(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::ModelCalls,
                    limit: u64::from(self.max_model_calls),
                    used: u64::from(used),
                });
            }
            match self.model_calls.compare_exchange_weak(
                used,
                used + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => used = actual,
            }
        }
    }

    /// Model calls made.
    pub fn model_calls(&self) -> u32 {
        self.model_calls.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(tinyagents_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tracker(max: u32) -> LimitTracker {
        LimitTracker::new(&RunLimits::default().with_max_tool_calls(max))
    }

    #[test]
    fn cap_is_inclusive_and_shared() {
        let t = tracker(3);
        t.try_reserve_tool_call().unwrap();
        t.try_reserve_nested_tool_call().unwrap();
        t.try_reserve_nested_tool_call().unwrap();
        let err = t.try_reserve_tool_call().unwrap_err();
        assert_eq!(
            err,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::ToolCalls,
                limit: 3,
                used: 3
            }
        );
        assert_eq!(t.tool_calls(), 1);
        assert_eq!(t.nested_tool_calls(), 2);
        t.release_nested_tool_call();
        t.try_reserve_tool_call().unwrap();
        assert_eq!(t.tool_calls(), 2);
    }

    #[test]
    fn release_never_underflows() {
        let t = tracker(2);
        t.release_nested_tool_call();
        assert_eq!(t.counts(), BudgetCounts::default());
    }

    #[test]
    fn concurrent_reservations_fill_the_cap_exactly() {
        let t = std::sync::Arc::new(tracker(1000));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let mut won = 0;
                    for _ in 0..400 {
                        let ok = if i % 2 == 0 {
                            t.try_reserve_tool_call().is_ok()
                        } else {
                            t.try_reserve_nested_tool_call().is_ok()
                        };
                        won += u32::from(ok);
                    }
                    won
                })
            })
            .collect();
        let won: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(won, 1000);
        assert_eq!(t.total_tool_calls(), 1000);
    }

    proptest! {
        /// Any sequence of reserve/release operations keeps the sum within the
        /// cap and matches a sequential model.
        #[test]
        fn matches_a_sequential_model(cap in 0u32..20, ops in proptest::collection::vec(0u8..3, 0..100)) {
            let t = tracker(cap);
            let (mut model, mut nested) = (0u32, 0u32);
            for op in ops {
                match op {
                    0 => {
                        let ok = t.try_reserve_tool_call().is_ok();
                        prop_assert_eq!(ok, model + nested < cap);
                        if ok { model += 1; }
                    }
                    1 => {
                        let ok = t.try_reserve_nested_tool_call().is_ok();
                        prop_assert_eq!(ok, model + nested < cap);
                        if ok { nested += 1; }
                    }
                    _ => {
                        t.release_nested_tool_call();
                        nested = nested.saturating_sub(1);
                    }
                }
                prop_assert_eq!(t.tool_calls(), model);
                prop_assert_eq!(t.nested_tool_calls(), nested);
                prop_assert!(t.total_tool_calls() <= cap);
            }
        }
    }
}
