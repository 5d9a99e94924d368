//! The invariants, held after every history against what was observed:
//! the events, the ledger's rows, the tools' own effect log and what was
//! persisted. What must be refused is computed from the history alone
//! ([`statically_refused`]), never from what the harness said.

use std::collections::{HashMap, HashSet};

use tinyagents::prelude::*;
use tinyagents::{core::CallId, core::RunId, ledger::CallStatus};

use crate::drive::{Observation, RUN, SegmentEnd, SegmentKind};
use crate::plan::History;
use crate::policies::{callback_approves, needs_approval, statically_refused};

/// The invariants, numbered as docs/simulation.md numbers them.
pub const INVARIANTS: [&str; 7] = [
    "a call any installed policy refuses never reaches its tool's execute",
    "the budget is never exceeded; every reserved slot is spent or given back",
    "every ToolStarted has exactly one terminal event, and parent ids are consistent",
    "every segment ends, with exactly one RunCompleted or RunFailed, and no panic reaches the caller",
    "no ToolReplay::Never effect happens twice; an approved call runs at most once, a refused or unapproved one never",
    "no planted secret appears in events, transcripts, the ledger, checkpoints or stored states",
    "after recovery every started row is settled or listed in doubt",
];

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which (1 to 7).
    pub invariant: usize,
    /// What broke it.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = INVARIANTS
            .get(self.invariant.wrapping_sub(1))
            .copied()
            .unwrap_or("?");
        write!(f, "invariant {} ({name}): {}", self.invariant, self.what)
    }
}

/// Every violation of `seen`, a run of `history`.
pub fn check(history: &History, seen: &Observation) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut fail = |invariant: usize, what: String| out.push(Violation { invariant, what });
    refused_never_run(history, seen, &mut fail);
    budget(history, seen, &mut fail);
    terminals(seen, &mut fail);
    ends(seen, &mut fail);
    effects_once(history, seen, &mut fail);
    secrets(history, seen, &mut fail);
    settled_after_recovery(seen, &mut fail);
    out
}

type Fail<'a> = dyn FnMut(usize, String) + 'a;

fn refused_never_run(history: &History, seen: &Observation, fail: &mut Fail<'_>) {
    for e in &seen.effects {
        let nested = e.call.is_nested();
        if let Some(why) = statically_refused(history, &e.tool, nested, e.depth) {
            fail(
                1,
                format!("{} {} ({}, {}) ran: {why}", e.run, e.call, e.tool, e.tag),
            );
        }
        let person = seen
            .approved
            .iter()
            .any(|(r, c)| *r == e.run && *c == e.call);
        let def = history.tool(&e.tool);
        let spec_flagged = def.is_some_and(|d| d.approval_required || d.external);
        if nested && spec_flagged {
            fail(
                1,
                format!(
                    "nested {} {} ({}) ran though its spec needs approval",
                    e.run, e.call, e.tool
                ),
            );
        }
        if !nested
            && e.depth == 0
            && needs_approval(history, &e.tool)
            && !person
            && !callback_approves(history, &e.tool)
        {
            fail(
                1,
                format!(
                    "{} {} ({}, {}) ran without anyone's approval",
                    e.run, e.call, e.tool, e.tag
                ),
            );
        }
    }
}

fn budget(history: &History, seen: &Observation, fail: &mut Fail<'_>) {
    let limit = history.limits.tool_calls;
    let mut per_run: HashMap<&RunId, HashSet<&CallId>> = HashMap::new();
    for e in &seen.effects {
        per_run.entry(&e.run).or_default().insert(&e.call);
    }
    for (run, calls) in per_run {
        if calls.len() > limit as usize {
            fail(
                2,
                format!(
                    "run {run} executed {} distinct calls, its limit is {limit}",
                    calls.len()
                ),
            );
        }
    }
    for segment in &seen.segments {
        if let SegmentEnd::Finished { budget, .. } = &segment.end {
            let spent = budget.tool_calls + budget.nested_tool_calls;
            if spent > limit {
                fail(
                    2,
                    format!("a run reports {spent} tool calls spent, its limit is {limit}"),
                );
            }
        }
    }
    // One segment, a ledger: every nested slot the root run kept is a
    // nested call it admitted, which has its started row (a call whose
    // admission was dropped after its row was written gives its slot
    // back), and every nested call that ran holds one.
    if let [segment] = seen.segments.as_slice()
        && let SegmentEnd::Finished {
            budget,
            suspended: None,
            ..
        } = &segment.end
        && history.ledger != crate::plan::LedgerKind::None
    {
        let rows = seen
            .rows
            .iter()
            .filter(|r| r.run_id.as_str() == RUN && r.call_id.is_nested())
            .count();
        let ran: HashSet<&CallId> = seen
            .effects
            .iter()
            .filter(|e| e.run.as_str() == RUN && e.call.is_nested())
            .map(|e| &e.call)
            .collect();
        let kept = budget.nested_tool_calls as usize;
        if kept > rows || kept < ran.len() {
            fail(
                2,
                format!(
                    "the run kept {kept} nested slots for {rows} admitted nested calls, {} of which ran",
                    ran.len()
                ),
            );
        }
    }
}

/// A call in a stream: its delegation path and id.
type Key = (Vec<CallId>, CallId);

/// Every event with the path of delegated calls it came through.
fn flatten(events: &[AgentEvent]) -> Vec<(Vec<CallId>, &AgentEvent)> {
    fn walk<'a>(
        path: Vec<CallId>,
        event: &'a AgentEvent,
        out: &mut Vec<(Vec<CallId>, &'a AgentEvent)>,
    ) {
        match event {
            AgentEvent::Delegated {
                parent_call_id,
                event,
                ..
            } => {
                let mut path = path;
                path.push(parent_call_id.clone());
                walk(path, event, out);
            }
            other => out.push((path, other)),
        }
    }
    let mut out = Vec::new();
    for event in events {
        walk(Vec::new(), event, &mut out);
    }
    out
}

fn terminals(seen: &Observation, fail: &mut Fail<'_>) {
    for (n, segment) in seen.segments.iter().enumerate() {
        if !segment.read_all || segment.dropped > 0 {
            continue;
        }
        if !matches!(
            segment.end,
            SegmentEnd::Finished { .. } | SegmentEnd::Failed(_)
        ) {
            continue;
        }
        // Open calls: the parent each started under.
        let mut open: HashMap<Key, Option<CallId>> = HashMap::new();
        let mut ended: HashSet<Key> = HashSet::new();
        for (path, event) in flatten(&segment.events) {
            match event {
                AgentEvent::ToolStarted {
                    call_id,
                    parent_call_id,
                    ..
                } => {
                    let key = (path.clone(), call_id.clone());
                    if open.contains_key(&key) || ended.contains(&key) {
                        fail(3, format!("segment {n}: {call_id} started twice"));
                    }
                    if let Some(parent) = parent_call_id {
                        // Its parent started before it (under back-pressure, a
                        // start admitted while its parent ran may be delivered
                        // after the parent's end: docs/simulation.md).
                        let parent_key = (path.clone(), parent.clone());
                        if !open.contains_key(&parent_key) && !ended.contains(&parent_key) {
                            fail(
                                3,
                                format!(
                                    "segment {n}: {call_id} started under {parent}, which never started"
                                ),
                            );
                        }
                        if !call_id.as_str().starts_with(&format!("{parent}/")) {
                            fail(
                                3,
                                format!("segment {n}: {call_id} names {parent} as its parent"),
                            );
                        }
                    } else if call_id.is_nested() {
                        fail(
                            3,
                            format!("segment {n}: nested {call_id} started without a parent"),
                        );
                    }
                    open.insert(key, parent_call_id.clone());
                }
                AgentEvent::ToolCompleted {
                    call_id,
                    parent_call_id,
                    ..
                }
                | AgentEvent::ToolFailed {
                    call_id,
                    parent_call_id,
                    ..
                } => {
                    let key = (path.clone(), call_id.clone());
                    match open.remove(&key) {
                        Some(parent) => {
                            if parent != *parent_call_id {
                                fail(
                                    3,
                                    format!(
                                        "segment {n}: {call_id} started under {parent:?} and ended under {parent_call_id:?}"
                                    ),
                                );
                            }
                            ended.insert(key);
                        }
                        None if ended.contains(&key) => {
                            fail(
                                3,
                                format!("segment {n}: {call_id} has a second terminal event"),
                            );
                        }
                        None => fail(3, format!("segment {n}: {call_id} ended without a start")),
                    }
                }
                _ => {}
            }
        }
        for (path, call) in open.keys() {
            fail(
                3,
                format!("segment {n}: {call} (under {path:?}) has no terminal event"),
            );
        }
    }
}

fn ends(seen: &Observation, fail: &mut Fail<'_>) {
    for (n, segment) in seen.segments.iter().enumerate() {
        match &segment.end {
            SegmentEnd::Panicked(why) => {
                fail(4, format!("segment {n}: a panic reached the caller: {why}"))
            }
            SegmentEnd::Hung => fail(4, format!("segment {n} ({:?}) never ended", segment.kind)),
            SegmentEnd::Crashed => continue,
            SegmentEnd::Finished { .. } | SegmentEnd::Failed(_) => {}
        }
        if !segment.read_all || segment.dropped > 0 {
            continue;
        }
        let top: Vec<&AgentEvent> = segment
            .events
            .iter()
            .filter(|e| !matches!(e, AgentEvent::Delegated { .. }))
            .collect();
        let started = top
            .iter()
            .filter(|e| matches!(e, AgentEvent::RunStarted { .. }))
            .count();
        let finished = top
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. }
                )
            })
            .count();
        if !matches!(top.first(), Some(AgentEvent::RunStarted { .. })) {
            fail(
                4,
                format!(
                    "segment {n} ({:?}): its events do not open with RunStarted",
                    segment.kind
                ),
            );
        }
        if started != 1 || finished != 1 {
            fail(
                4,
                format!(
                    "segment {n} ({:?}): {started} RunStarted, {finished} RunCompleted or RunFailed",
                    segment.kind
                ),
            );
        }
        if finished == 1
            && !matches!(
                top.last(),
                Some(AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. })
            )
        {
            fail(4, format!("segment {n}: events follow the run's end"));
        }
        if let SegmentEnd::Failed(error) = &segment.end
            && !top
                .iter()
                .any(|e| matches!(e, AgentEvent::RunFailed { .. }))
        {
            fail(
                4,
                format!("segment {n}: the run failed ({error}) without RunFailed"),
            );
        }
    }
}

fn effects_once(history: &History, seen: &Observation, fail: &mut Fail<'_>) {
    let mut count: HashMap<(&RunId, &CallId), usize> = HashMap::new();
    for e in &seen.effects {
        *count.entry((&e.run, &e.call)).or_default() += 1;
    }
    for e in &seen.effects {
        let n = count.get(&(&e.run, &e.call)).copied().unwrap_or(0);
        if n < 2 {
            continue;
        }
        let def = history.tool(&e.tool);
        if def.is_some_and(|d| d.never) {
            fail(
                5,
                format!(
                    "{} {} ({}, never replayed) ran {n} times",
                    e.run, e.call, e.tool
                ),
            );
        } else if seen
            .approved
            .iter()
            .any(|(r, c)| *r == e.run && *c == e.call)
        {
            // A person's approval is used once; the host's approval callback
            // answers each admission, and a replay-safe call may run again
            // after a crash.
            fail(
                5,
                format!(
                    "{} {} ({}, approved by a person) ran {n} times",
                    e.run, e.call, e.tool
                ),
            );
        }
        count.insert((&e.run, &e.call), 0);
    }
    // A call a person denied never ran, unless a person approved it when
    // asked again (a crash before the denial was recorded asks again).
    for e in &seen.effects {
        let is = |(r, c): &(RunId, CallId)| *r == e.run && *c == e.call;
        if seen.denied.iter().any(is) && !seen.approved.iter().any(is) {
            fail(
                5,
                format!(
                    "{} {} ({}) ran though the person denied it",
                    e.run, e.call, e.tool
                ),
            );
        }
    }
}

fn secrets(history: &History, seen: &Observation, fail: &mut Fail<'_>) {
    let Some(secret) = &history.secret else {
        return;
    };
    for (n, segment) in seen.segments.iter().enumerate() {
        for event in &segment.events {
            let text = serde_json::to_string(event).unwrap_or_default();
            if text.contains(secret.as_str()) {
                fail(
                    6,
                    format!(
                        "segment {n}: an event holds the secret: {}",
                        clip(&text, secret)
                    ),
                );
            }
        }
        if let SegmentEnd::Finished { messages, .. } = &segment.end {
            let text = serde_json::to_string(messages).unwrap_or_default();
            if text.contains(secret.as_str()) {
                fail(
                    6,
                    format!(
                        "segment {n}: the transcript holds the secret: {}",
                        clip(&text, secret)
                    ),
                );
            }
        }
    }
    for (what, text) in &seen.persisted {
        if text.contains(secret.as_str()) {
            fail(
                6,
                format!("{what} holds the secret: {}", clip(text, secret)),
            );
        }
    }
}

/// The text around the first `needle`.
fn clip(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or(0);
    let start = text.floor_char_boundary(at.saturating_sub(60));
    let end = text.ceil_char_boundary((at + needle.len() + 40).min(text.len()));
    text[start..end].to_owned()
}

fn settled_after_recovery(seen: &Observation, fail: &mut Fail<'_>) {
    for row in &seen.rows {
        if row.status == CallStatus::Started
            && !seen
                .in_doubt
                .iter()
                .any(|(r, c)| *r == row.run_id && *c == row.call_id)
        {
            fail(
                7,
                format!(
                    "{} {} is started and not listed in doubt",
                    row.run_id, row.call_id
                ),
            );
        }
    }
    for (run, call) in &seen.in_doubt {
        if !seen.unfinished.contains(run) {
            fail(
                7,
                format!("{run} {call} is in doubt but its run is not listed unfinished"),
            );
        }
    }
    // A recovery that ran to its end settled every row its run had
    // started when the process died: nothing of the crashed turn is left
    // started (a row it starts later may stay started, in doubt, as any
    // call a timeout dropped).
    let recovered = seen.segments.iter().any(|segment| {
        segment.kind == SegmentKind::Recover
            && matches!(
                &segment.end,
                SegmentEnd::Finished {
                    suspended: None,
                    ..
                }
            )
    });
    if recovered {
        for call in &seen.started_at_crash {
            let row = seen
                .rows
                .iter()
                .find(|r| r.run_id.as_str() == RUN && r.call_id == *call);
            if row.is_some_and(|r| r.status == CallStatus::Started) {
                fail(
                    7,
                    format!(
                        "{call} was started when the process died and is still started after its run was recovered"
                    ),
                );
            }
        }
    }
}
