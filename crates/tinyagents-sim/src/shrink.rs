//! Shrinks a failing history: removes turns, calls (at any depth) and
//! faults one at a time, keeping each removal after which the history
//! still breaks the same invariant, until none helps.

use crate::plan::{ArgsPlan, CallPlan, History, Reader, TurnPlan};

/// How many histories a shrink may run.
const BUDGET: usize = 400;

/// The smallest history found that still breaks `invariant`, with the
/// number of histories run to find it. `fails` runs a history and says
/// whether it still breaks it.
pub fn shrink(history: &History, mut fails: impl FnMut(&History) -> bool) -> (History, usize) {
    let mut best = history.clone();
    let mut runs = 0;
    'smaller: loop {
        for candidate in candidates(&best) {
            if runs >= BUDGET {
                break 'smaller;
            }
            runs += 1;
            if fails(&candidate) {
                best = candidate;
                continue 'smaller;
            }
        }
        break;
    }
    (best, runs)
}

/// Every history one step smaller than `h`.
fn candidates(h: &History) -> Vec<History> {
    let mut out = Vec::new();
    for i in 0..h.turns.len() {
        let mut c = h.clone();
        c.turns.remove(i);
        out.push(c);
    }
    let calls = count_calls(&h.turns);
    for k in 0..calls {
        let mut c = h.clone();
        let mut at = k;
        if remove_call(&mut c.turns, &mut at) {
            out.push(c);
        }
    }
    let mut fault = |change: fn(&mut History)| {
        let mut c = h.clone();
        change(&mut c);
        if c != *h {
            out.push(c);
        }
    };
    fault(|c| c.faults.crash_at = None);
    fault(|c| c.faults.failing_writes.clear());
    fault(|c| c.faults.cancel_at_ms = None);
    fault(|c| c.faults.resume_twice = false);
    fault(|c| c.faults.crash_before_resume = false);
    fault(|c| c.reader = Reader::Eager);
    fault(|c| c.limits.wall_ms = None);
    fault(|c| c.secret = None);
    out
}

fn count_calls(turns: &[TurnPlan]) -> usize {
    turns
        .iter()
        .map(|t| match t {
            TurnPlan::Calls(calls) => calls.iter().map(count_in_call).sum(),
            TurnPlan::Fails => 0,
        })
        .sum()
}

fn count_in_call(call: &CallPlan) -> usize {
    1 + match &call.args {
        ArgsPlan::Act(act) => act.nest.iter().map(count_in_call).sum(),
        ArgsPlan::Query(turns) => count_calls(turns),
        ArgsPlan::Mistyped | ArgsPlan::NotJson => 0,
    }
}

/// Removes the `at`-th call in preorder; `true` when it was found.
fn remove_call(turns: &mut [TurnPlan], at: &mut usize) -> bool {
    turns.iter_mut().any(|turn| match turn {
        TurnPlan::Calls(calls) => remove_in(calls, at),
        TurnPlan::Fails => false,
    })
}

fn remove_in(calls: &mut Vec<CallPlan>, at: &mut usize) -> bool {
    let mut i = 0;
    while i < calls.len() {
        if *at == 0 {
            calls.remove(i);
            return true;
        }
        *at -= 1;
        let found = match &mut calls[i].args {
            ArgsPlan::Act(act) => remove_in(&mut act.nest, at),
            ArgsPlan::Query(turns) => remove_call(turns, at),
            ArgsPlan::Mistyped | ArgsPlan::NotJson => false,
        };
        if found {
            return true;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_keeps_only_what_the_failure_needs() {
        // A "failure" that needs one particular nested call: shrinking
        // removes everything else it can.
        let history = (0..500)
            .map(crate::draw)
            .find(|h| count_calls(&h.turns) > 6 && h.faults.crash_at.is_some())
            .expect("some seed draws a history with many calls");
        let needle = |h: &History| {
            let text = serde_json::to_string(&h.turns).unwrap_or_default();
            text.contains("\"tag\":\"c1\"")
        };
        let (small, runs) = shrink(&history, needle);
        assert!(needle(&small));
        assert!(runs > 0);
        assert!(count_calls(&small.turns) <= 3, "{:?}", small.turns);
        assert_eq!(small.faults.crash_at, None);
    }
}
