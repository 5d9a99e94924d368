//! A readable account of a history: what it was drawn to do, what each
//! segment did (ledger writes, events), what the tools did, and what broke.

use std::fmt::Write as _;

use tinyagents::prelude::*;

use crate::check::Violation;
use crate::drive::{Observation, SegmentEnd};
use crate::plan::History;

/// The account of `history`, observed as `seen`, with its violations.
pub fn account(history: &History, seen: &Observation, violations: &[Violation]) -> String {
    let mut out = String::new();
    let json = |value: &dyn erased::Json| value.text();
    let _ = writeln!(out, "history of seed {}:", history.seed);
    for tool in &history.tools {
        let _ = writeln!(out, "  tool {}", json(tool));
    }
    for (i, helper) in history.helpers.iter().enumerate() {
        let _ = writeln!(out, "  helper {} {}", History::helper_name(i), json(helper));
    }
    let _ = writeln!(out, "  policies {}", json(&history.policies));
    let _ = writeln!(out, "  limits {}", json(&history.limits));
    let _ = writeln!(
        out,
        "  capture {}, ledger {:?}, secret {}, reader {:?}",
        history.capture,
        history.ledger,
        history.secret.as_deref().unwrap_or("none"),
        history.reader
    );
    for (i, turn) in history.turns.iter().enumerate() {
        let _ = writeln!(out, "  turn {}: {}", i + 1, json(turn));
    }
    let _ = writeln!(out, "  faults {}", json(&history.faults));
    for (n, segment) in seen.segments.iter().enumerate() {
        let end = match &segment.end {
            SegmentEnd::Finished {
                status,
                suspended,
                budget,
                ..
            } => format!(
                "finished {status:?}{}, spent {} model-issued and {} nested tool calls, {} model calls",
                if suspended.is_some() {
                    " (suspended)"
                } else {
                    ""
                },
                budget.tool_calls,
                budget.nested_tool_calls,
                budget.model_calls
            ),
            SegmentEnd::Failed(error) => format!("failed: {error}"),
            SegmentEnd::Crashed => "the process died".to_owned(),
            SegmentEnd::Panicked(why) => format!("PANICKED: {why}"),
            SegmentEnd::Hung => "HUNG".to_owned(),
        };
        let _ = writeln!(
            out,
            "segment {n} ({:?}): {end}; {} events read, {} dropped",
            segment.kind,
            segment.events.len(),
            segment.dropped
        );
        for write in &segment.writes {
            let _ = writeln!(out, "    ledger {write}");
        }
        for event in &segment.events {
            let _ = writeln!(out, "    {}", event_line(event));
        }
    }
    for effect in &seen.effects {
        let _ = writeln!(
            out,
            "  executed {} {} {} ({}, depth {})",
            effect.run, effect.call, effect.tool, effect.tag, effect.depth
        );
    }
    for row in &seen.rows {
        let _ = writeln!(
            out,
            "  row {} {} {} {:?}",
            row.run_id, row.call_id, row.tool_name, row.status
        );
    }
    for (run, call) in &seen.in_doubt {
        let _ = writeln!(out, "  in doubt {run} {call}");
    }
    for violation in violations {
        let _ = writeln!(out, "VIOLATION {violation}");
    }
    out
}

/// One event on one line.
fn event_line(event: &AgentEvent) -> String {
    match event {
        AgentEvent::Delegated {
            parent_call_id,
            event,
            ..
        } => format!("[{parent_call_id}] {}", event_line(event)),
        AgentEvent::ToolStarted {
            call_id,
            parent_call_id,
            name,
            ..
        } => format!("ToolStarted {call_id} {name} parent={parent_call_id:?}"),
        AgentEvent::ToolCompleted {
            call_id,
            is_error,
            result,
            ..
        } => format!(
            "ToolCompleted {call_id} error={is_error} {}",
            result.as_deref().map(clip).unwrap_or_default()
        ),
        AgentEvent::ToolFailed { call_id, error, .. } => {
            format!("ToolFailed {call_id} {}", clip(error))
        }
        other => clip(&serde_json::to_string(other).unwrap_or_default()),
    }
}

fn clip(text: &str) -> String {
    if text.len() > 160 {
        format!("{}…", &text[..text.floor_char_boundary(160)])
    } else {
        text.to_owned()
    }
}

/// JSON text of the plan's parts, without naming each type.
mod erased {
    pub(super) trait Json {
        fn text(&self) -> String;
    }

    impl<T: serde::Serialize> Json for T {
        fn text(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}
