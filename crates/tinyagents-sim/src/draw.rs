//! Draws a [`History`] from a seed: a configuration, the models' scripts
//! and the faults. The proportions are chosen so that most histories reach
//! tool calls and most seams (nested calls, approvals, crashes) turn up in
//! a few percent of histories or more.

use crate::plan::{
    Act, ArgsPlan, CallPlan, Callback, End, Faults, GateMode, HelperDef, History, LedgerKind,
    Limits, Policies, Reader, ToolDef, TurnPlan,
};
use crate::rng::Rng;

/// How deep drawn nested calls go (the harness's own cap may be lower).
const MAX_DRAWN_NESTING: u32 = 3;

/// The history of `seed`.
pub fn draw(seed: u64) -> History {
    let mut rng = Rng::new(seed);
    let tools = draw_tools(&mut rng.fork(1));
    let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    let mut r = rng.fork(2);
    let helpers: Vec<HelperDef> = if r.chance(25) {
        let n = r.range(1, 2);
        (0..n)
            .map(|_| HelperDef {
                tools: subset(&mut r, &names, 60),
                calls: (0..n)
                    .filter(|_| r.chance(40))
                    .filter_map(|i| usize::try_from(i).ok())
                    .collect(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let policies = draw_policies(&mut rng.fork(3), &names);
    let mut limits = draw_limits(&mut rng.fork(4));
    let mut r = rng.fork(5);
    let capture = r.chance(50);
    let ledger = match r.below(100) {
        0..25 => LedgerKind::None,
        25..70 => LedgerKind::Memory,
        _ => LedgerKind::Sqlite,
    };
    let secret = r.chance(40).then(|| {
        let body: String = (0..20)
            .map(|_| char::from(b'a' + u8::try_from(r.below(26)).unwrap_or(0)))
            .collect();
        format!("sk-sim-{body}")
    });
    let mut scripts = Scripts {
        rng: rng.fork(6),
        tags: 0,
        names: &names,
        helpers: &helpers,
    };
    let turns = scripts.turns(1, 5, &names, &(0..helpers.len()).collect::<Vec<_>>(), 0);
    let faults = draw_faults(&mut rng.fork(7), ledger);
    let mut r = rng.fork(8);
    let reader = match r.below(100) {
        0..60 => Reader::Eager,
        60..75 => Reader::Slow(r.range(1, 5)),
        75..85 => Reader::Stalls(u32::try_from(r.below(20)).unwrap_or(0)),
        _ => Reader::Gone,
    };
    let session = rng.fork(9).chance(30);
    let mut history = History {
        seed,
        tools,
        policies,
        limits: limits.clone(),
        capture,
        ledger,
        secret,
        helpers,
        turns,
        faults,
        reader,
        session,
    };
    // Every history must be able to end: something bounds a call that
    // hangs, and a reader that stops reading holds the run back only until
    // its wall clock runs out.
    if history.may_hang() && limits.tool_timeout_ms.is_none() && limits.wall_ms.is_none() {
        limits.tool_timeout_ms = Some(100);
    }
    if matches!(reader, Reader::Stalls(_)) && limits.wall_ms.is_none() {
        limits.wall_ms = Some(200);
    }
    history.limits = limits;
    history
}

fn draw_tools(r: &mut Rng) -> Vec<ToolDef> {
    let n = r.range(2, 5);
    (0..n)
        .map(|i| {
            let read_only = r.chance(30);
            ToolDef {
                name: format!("t{i}"),
                read_only,
                concurrency_safe: !read_only && r.chance(20),
                never: !read_only && r.chance(55),
                approval_required: r.chance(10),
                external: r.chance(5),
                effects: if read_only || r.chance(55) {
                    0
                } else {
                    1 << r.below(8)
                },
                sandboxed: r.chance(10),
                timeout_ms: r.chance(20).then(|| r.range(5, 50)),
                reconciles: r.chance(50),
            }
        })
        .collect()
}

fn subset(r: &mut Rng, names: &[String], percent: u64) -> Vec<String> {
    names
        .iter()
        .filter(|_| r.chance(percent))
        .cloned()
        .collect()
}

fn draw_policies(r: &mut Rng, names: &[String]) -> Policies {
    let mode = |r: &mut Rng| match r.below(5) {
        0 => GateMode::Allow,
        1 => GateMode::Deny,
        2 => GateMode::Ask,
        3 => GateMode::Error,
        _ => GateMode::Panic,
    };
    let one = |r: &mut Rng| r.pick(names).cloned().unwrap_or_default();
    Policies {
        allow: r.chance(20).then(|| subset(r, names, 70)),
        deny_mask: r.chance(35).then(|| (1 << r.below(8)) | (1 << r.below(8))),
        sandbox: r.chance(50),
        policy_approval: if r.chance(10) {
            vec![one(r)]
        } else {
            Vec::new()
        },
        plan_mode: r.chance(8),
        human: r.chance(25).then(|| vec![one(r)]),
        callback: match r.below(4) {
            0 => Callback::None,
            1 => Callback::Approve,
            2 => Callback::Decline,
            _ => Callback::Panic,
        },
        gate: r.chance(30).then(|| {
            (0..r.range(1, 2))
                .map(|_| (one(r), mode(r)))
                .collect::<Vec<_>>()
        }),
        faulty_hook: if r.chance(10) {
            vec![(
                one(r),
                if r.chance(50) {
                    GateMode::Error
                } else {
                    GateMode::Panic
                },
            )]
        } else {
            Vec::new()
        },
        invalid_args_fail: r.chance(10),
    }
}

fn draw_limits(r: &mut Rng) -> Limits {
    Limits {
        tool_calls: if r.chance(70) {
            u32::try_from(r.range(12, 40)).unwrap_or(12)
        } else {
            u32::try_from(r.range(1, 6)).unwrap_or(1)
        },
        nested_depth: u32::try_from(r.below(4)).unwrap_or(0),
        model_calls: u32::try_from(r.range(2, 12)).unwrap_or(2),
        parallel: if r.chance(85) {
            u32::try_from(r.range(4, 8)).unwrap_or(4)
        } else {
            u32::try_from(r.range(1, 3)).unwrap_or(1)
        },
        wall_ms: r.chance(20).then(|| r.range(10, 300)),
        result_bytes: if r.chance(30) {
            usize::try_from(r.range(64, 512)).unwrap_or(64)
        } else {
            16 * 1024
        },
        tool_timeout_ms: r.chance(30).then(|| r.range(20, 200)),
        depth: u32::try_from(r.range(1, 3)).unwrap_or(1),
    }
}

fn draw_faults(r: &mut Rng, ledger: LedgerKind) -> Faults {
    let recorded = ledger != LedgerKind::None;
    Faults {
        crash_at: (recorded && r.chance(35)).then(|| u32::try_from(r.range(1, 40)).unwrap_or(1)),
        crash_after_write: r.chance(50),
        failing_writes: if recorded && r.chance(15) {
            (0..r.range(1, 2))
                .map(|_| u32::try_from(r.range(1, 30)).unwrap_or(1))
                .collect()
        } else {
            Vec::new()
        },
        cancel_at_ms: r.chance(10).then(|| r.below(100)),
        decisions: (0..6).map(|_| r.chance(60)).collect(),
        resume_twice: r.chance(25),
        crash_before_resume: recorded && r.chance(25),
    }
}

/// Draws scripts, numbering tags across the whole history.
struct Scripts<'a> {
    rng: Rng,
    tags: u32,
    names: &'a [String],
    helpers: &'a [HelperDef],
}

impl Scripts<'_> {
    /// A model's turns over `tools` and the helpers `helpers`.
    fn turns(
        &mut self,
        min: u64,
        max: u64,
        tools: &[String],
        helpers: &[usize],
        delegation: u32,
    ) -> Vec<TurnPlan> {
        let n = self.rng.range(min, max);
        (0..n)
            .map(|_| {
                if self.rng.chance(3) {
                    TurnPlan::Fails
                } else {
                    let calls = self.rng.range(1, 4);
                    TurnPlan::Calls(
                        (0..calls)
                            .map(|_| self.call(tools, helpers, 0, delegation))
                            .collect(),
                    )
                }
            })
            .collect()
    }

    fn call(
        &mut self,
        tools: &[String],
        helpers: &[usize],
        nesting: u32,
        delegation: u32,
    ) -> CallPlan {
        let provider_id = self
            .rng
            .chance(50)
            .then(|| format!("call_{}", self.rng.below(3)));
        let roll = self.rng.below(100);
        if roll < 12 && !helpers.is_empty() && delegation < 2 {
            let helper =
                helpers[usize::try_from(self.rng.below(helpers.len() as u64)).unwrap_or(0)];
            let def = &self.helpers[helper];
            let (own, calls) = (def.tools.clone(), def.calls.clone());
            return CallPlan {
                tool: History::helper_name(helper),
                provider_id,
                args: ArgsPlan::Query(self.turns(1, 2, &own, &calls, delegation + 1)),
            };
        }
        let tool = if roll < 17 || tools.is_empty() {
            // Unknown to the agent: a typo, or a host tool it lacks.
            if self.rng.chance(50) {
                "nope".to_owned()
            } else {
                self.rng.pick(self.names).cloned().unwrap_or_default()
            }
        } else {
            self.rng.pick(tools).cloned().unwrap_or_default()
        };
        let args = match self.rng.below(100) {
            0..6 => ArgsPlan::Mistyped,
            6..10 if nesting == 0 => ArgsPlan::NotJson,
            _ => ArgsPlan::Act(self.act(tools, nesting, delegation)),
        };
        CallPlan {
            tool,
            provider_id,
            args,
        }
    }

    fn act(&mut self, tools: &[String], nesting: u32, delegation: u32) -> Act {
        self.tags += 1;
        let r = &mut self.rng;
        let end = match r.below(100) {
            0..70 => End::Ok,
            70..80 => End::Err,
            80..85 => End::Panic,
            85..90 => End::Hang,
            _ => End::ErrorResult,
        };
        let ms = if r.chance(50) { 0 } else { r.range(1, 20) };
        let secret_in_args = r.chance(25);
        let secret_in_result = r.chance(25);
        let filler = if r.chance(10) {
            usize::try_from(r.range(500, 4000)).unwrap_or(0)
        } else {
            0
        };
        let nest_count = if nesting < MAX_DRAWN_NESTING && r.chance(22) {
            r.range(1, 3)
        } else {
            0
        };
        let nest_parallel = r.chance(50);
        let tag = format!("c{}", self.tags);
        let nest = (0..nest_count)
            .map(|_| self.call(tools, &[], nesting + 1, delegation))
            .collect();
        Act {
            tag,
            end,
            ms,
            secret_in_args,
            secret_in_result,
            nest,
            nest_parallel,
            filler,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_one_history_and_histories_differ() {
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn every_history_can_end() {
        for seed in 0..2000 {
            let h = draw(seed);
            if h.may_hang() {
                assert!(
                    h.limits.tool_timeout_ms.is_some() || h.limits.wall_ms.is_some(),
                    "seed {seed}"
                );
            }
            if matches!(h.reader, Reader::Stalls(_)) {
                assert!(h.limits.wall_ms.is_some(), "seed {seed}");
            }
        }
    }
}
