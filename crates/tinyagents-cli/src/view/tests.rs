//! The tree built from events, and its rendering.

use std::time::Instant;

use serde_json::json;
use tinyagents::prelude::AgentEvent;

use super::{Tree, lines, spend_lines};

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

/// Events of a priced run: the lead's turn (cached and reasoning tokens),
/// its delegated helper's unpriced turn, the lead's second turn, the end
/// with the tree's totals.
fn priced_run(currency: Option<&str>) -> Tree {
    let mut tree = Tree::new();
    tree.currency = currency.map(str::to_owned);
    let now = Instant::now();
    for value in [
        json!({"type": "run_started", "run_id": "r", "agent_id": "lead"}),
        json!({"type": "model_started", "turn": 1}),
        json!({"type": "model_completed", "turn": 1, "usage": {"input_tokens": 1000, "output_tokens": 200, "cached_input_tokens": 400, "reasoning_tokens": 50}, "cost": "0.28", "duration_ms": 3, "tool_calls": 1}),
        json!({"type": "tool_started", "call_id": "p1", "name": "helper"}),
        delegated(
            "p1",
            json!({"type": "run_started", "run_id": "r::p1", "agent_id": "helper"}),
        ),
        delegated("p1", json!({"type": "model_started", "turn": 1})),
        delegated(
            "p1",
            json!({"type": "model_completed", "turn": 1, "usage": {"input_tokens": 10, "output_tokens": 5}, "duration_ms": 1, "tool_calls": 0}),
        ),
        delegated(
            "p1",
            json!({"type": "run_completed", "status": {"status": "completed"}, "usage": {"input_tokens": 10, "output_tokens": 5},
                   "spent": {"usage": {"input_tokens": 10, "output_tokens": 5}, "cost": "0", "model_calls": 1, "unpriced_calls": 1}}),
        ),
        json!({"type": "tool_completed", "call_id": "p1", "name": "helper", "duration_ms": 2, "is_error": false}),
        json!({"type": "model_started", "turn": 2}),
        json!({"type": "model_completed", "turn": 2, "usage": {"input_tokens": 1000, "output_tokens": 200}, "cost": "0.3", "duration_ms": 3, "tool_calls": 0}),
        json!({"type": "run_completed", "status": {"status": "completed"}, "usage": {"input_tokens": 2000, "output_tokens": 400, "cached_input_tokens": 400, "reasoning_tokens": 50},
               "spent": {"usage": {"input_tokens": 2010, "output_tokens": 405, "cached_input_tokens": 400, "reasoning_tokens": 50}, "cost": "0.58", "model_calls": 3, "unpriced_calls": 1}}),
    ] {
        tree.apply(&event(value), now);
    }
    tree
}

#[test]
fn runs_and_turns_show_their_tokens_and_cost_and_a_run_its_trees_totals() {
    let tree = priced_run(Some("USD"));
    let text = lines(&tree, Instant::now(), None);
    assert_eq!(
        text,
        [
            "✓ agent lead · run r · 2400 tokens (2000 in, 400 out; 400 cached, 50 reasoning) · cost 0.58 USD \
             · tree 2415 tokens (2010 in, 405 out; 400 cached, 50 reasoning), cost 0.58 USD · 1 call unpriced · 0ms",
            "  ✓ turn 1 · 1200 tokens (1000 in, 200 out; 400 cached, 50 reasoning) · cost 0.28 USD · 3ms",
            "    ✓ p1 helper · 2ms",
            "      ✓ agent helper · run r::p1 · 15 tokens (10 in, 5 out) · 1 call unpriced · 0ms",
            "        ✓ turn 1 · 15 tokens (10 in, 5 out) · unpriced · 1ms",
            "  ✓ turn 2 · 1200 tokens (1000 in, 200 out) · cost 0.3 USD · 3ms",
        ]
    );
    // `show`: runs and turns only, a delegated run under the turn whose
    // call started it.
    assert_eq!(
        spend_lines(&tree),
        [
            "agent lead · run r · 2400 tokens (2000 in, 400 out; 400 cached, 50 reasoning) · cost 0.58 USD \
             · tree 2415 tokens (2010 in, 405 out; 400 cached, 50 reasoning), cost 0.58 USD · 1 call unpriced",
            "  turn 1 · 1200 tokens (1000 in, 200 out; 400 cached, 50 reasoning) · cost 0.28 USD",
            "    agent helper · run r::p1 · 15 tokens (10 in, 5 out) · 1 call unpriced",
            "      turn 1 · 15 tokens (10 in, 5 out) · unpriced",
            "  turn 2 · 1200 tokens (1000 in, 200 out) · cost 0.3 USD",
        ]
    );
}

#[test]
fn without_prices_no_money_is_shown_and_the_tree_total_is_tokens() {
    let tree = priced_run(None);
    let text = lines(&tree, Instant::now(), None);
    assert_eq!(
        text[0],
        "✓ agent lead · run r · 2400 tokens (2000 in, 400 out; 400 cached, 50 reasoning) \
         · tree 2415 tokens (2010 in, 405 out; 400 cached, 50 reasoning) · 0ms"
    );
    assert_eq!(text[4], "        ✓ turn 1 · 15 tokens (10 in, 5 out) · 1ms");
}

#[test]
fn a_run_stopped_by_max_cost_says_the_cap_and_what_was_spent() {
    let mut tree = Tree::new();
    tree.currency = Some("EUR".to_owned());
    let now = Instant::now();
    for value in [
        json!({"type": "run_started", "run_id": "r"}),
        json!({"type": "limit_reached", "kind": "cost", "limit": 4_500_000_000_u64, "used": 560_000_000}),
        json!({"type": "run_completed", "status": {"status": "limit_reached", "detail": "cost"}, "usage": {"input_tokens": 0, "output_tokens": 0}}),
    ] {
        tree.apply(&event(value), now);
    }
    assert_eq!(
        lines(&tree, now, None)[0],
        "■ agent agent · run r · 0ms · limit reached: max_cost 4.5 EUR (0.56 EUR spent or held)"
    );
}
