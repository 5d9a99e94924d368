//! The tree built from events, and its rendering.

use std::time::Instant;

use serde_json::json;
use tinyagents::prelude::AgentEvent;

use super::{Tree, lines};

fn event(value: serde_json::Value) -> AgentEvent {
    serde_json::from_value(value).unwrap()
}

fn delegated(call: &str, inner: serde_json::Value) -> serde_json::Value {
    json!({"type": "delegated", "parent_call_id": call, "agent_id": "child", "depth": 1, "event": inner})
}

#[test]
fn nested_calls_sit_under_their_parent_and_delegated_runs_under_their_call() {
    let mut tree = Tree::new();
    let now = Instant::now();
    for value in [
        json!({"type": "run_started", "run_id": "r", "agent_id": "top"}),
        json!({"type": "model_started", "turn": 1}),
        json!({"type": "model_completed", "turn": 1, "usage": {"input_tokens": 5, "output_tokens": 2}, "duration_ms": 3, "tool_calls": 2}),
        json!({"type": "tool_started", "call_id": "p1", "name": "outer"}),
        json!({"type": "tool_started", "call_id": "p1/1", "parent_call_id": "p1", "name": "inner"}),
        json!({"type": "tool_progress", "call_id": "p1/1", "fraction": 0.5, "message": "half"}),
        json!({"type": "tool_started", "call_id": "p2", "name": "child"}),
        delegated(
            "p2",
            json!({"type": "run_started", "run_id": "r::p2", "agent_id": "child"}),
        ),
        delegated("p2", json!({"type": "model_started", "turn": 1})),
        delegated(
            "p2",
            json!({"type": "tool_started", "call_id": "p1", "name": "leaf"}),
        ),
        delegated(
            "p2",
            json!({"type": "tool_failed", "call_id": "p1", "name": "leaf", "duration_ms": 1, "error": "boom\nmore"}),
        ),
        json!({"type": "tool_completed", "call_id": "p1/1", "parent_call_id": "p1", "name": "inner", "duration_ms": 4, "is_error": false}),
    ] {
        tree.apply(&event(value), now);
    }
    let text = lines(&tree, now, None);
    assert_eq!(
        text,
        [
            "… agent top · run r · 7 tokens (5 in, 2 out) · 0ms",
            "  ✓ turn 1 · 7 tokens (5 in, 2 out) · 3ms",
            "    … p1 outer · 0ms",
            "      ✓ p1/1 inner · 4ms",
            "    … p2 child · 0ms",
            "      … agent child · run r::p2 · 0ms",
            "        … turn 1 · 0ms",
            "          ✗ p1 leaf · 1ms · failed: boom…",
        ]
    );
}

#[test]
fn a_running_call_shows_its_progress_bar_and_a_turn_its_streamed_text() {
    let mut tree = Tree::new();
    let now = Instant::now();
    for value in [
        json!({"type": "run_started", "run_id": "r"}),
        json!({"type": "model_started", "turn": 1}),
        json!({"type": "model_delta", "turn": 1, "delta": {"kind": "text", "text": "Hello\nthere"}}),
    ] {
        tree.apply(&event(value), now);
    }
    let text = lines(&tree, now, Some(0));
    assert_eq!(text[1], "  ⠋ turn 1 · 0ms “Hello there”");
    tree.apply(&event(json!({"type": "model_completed", "turn": 1, "usage": {"input_tokens": 0, "output_tokens": 0}, "duration_ms": 1, "tool_calls": 1})), now);
    tree.apply(
        &event(json!({"type": "tool_started", "call_id": "p1", "name": "slow"})),
        now,
    );
    tree.apply(&event(json!({"type": "tool_progress", "call_id": "p1", "fraction": 0.25, "message": "1 of 4"})), now);
    let text = lines(&tree, now, Some(1));
    assert_eq!(
        text[2],
        "    ⠙ p1 slow · 0ms [#####---------------]  25% 1 of 4"
    );
}

#[test]
fn a_waiting_call_and_the_runs_end_are_marked() {
    let mut tree = Tree::new();
    let now = Instant::now();
    for value in [
        json!({"type": "run_started", "run_id": "r"}),
        json!({"type": "model_started", "turn": 1}),
        json!({"type": "approval_requested", "call_id": "p1", "tool": "deploy", "reason": "asked by policy"}),
        json!({"type": "run_completed", "status": {"status": "awaiting_approval"}, "usage": {"input_tokens": 1, "output_tokens": 1}}),
    ] {
        tree.apply(&event(value), now);
    }
    let text = lines(&tree, now, None);
    assert_eq!(
        text[0],
        "⏸ agent agent · run r · 2 tokens (1 in, 1 out) · 0ms · waits: awaiting approval"
    );
    assert_eq!(text[2], "    ⏸ p1 deploy · waits: asked by policy");
}
