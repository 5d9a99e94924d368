//! Issue 13: seams of nested calls the simulator found (docs/simulation.md,
//! "What it found"), each fixed with its regression here.

use super::*;

/// Found by seed 558: when a parent times out, the nested calls it leaves
/// in flight end deepest first (a grandchild before the child that made
/// it), in a fixed order, so the tree of calls closes from its leaves.
#[tokio::test(start_paused = true)]
async fn i13_calls_a_timed_out_parent_leaves_end_deepest_first() {
    let node = Node::new(spec("node").timeout(Duration::from_millis(50)));
    let hang = plan(vec![child("node", json!({"sleep_ms": 10_000}))]);
    let args = plan(vec![child("node", hang)]);
    let (harness, _) = build(one_turn(&[("node", args)]), vec![node.tool()], |b| b);
    let (_, events) = run_checked(&harness).await;
    let ends: Vec<String> = events
        .iter()
        .filter(|e| e.is_tool_terminal())
        .filter_map(|e| e.call_id().map(ToString::to_string))
        .collect();
    assert_eq!(ends, ["p1/1/1", "p1/1", "p1"], "{events:#?}");
}

/// Found by seed 6707: a nested request its parent stopped waiting for
/// before the loop got to it (the parent timed out at the same instant)
/// never starts: no `ToolStarted` under a parent that already ended.
#[tokio::test(start_paused = true)]
async fn i13_a_nested_request_whose_parent_timed_out_meanwhile_never_starts() {
    let outer = Node::new(spec("outer"));
    let node = Node::new(spec("node").timeout(Duration::from_millis(20)));
    let leaf = new_leaf();
    let inner = with(plan(vec![child("leaf", json!({}))]), "sleep_ms", json!(20));
    let args = plan(vec![child("node", inner)]);
    let (harness, _) = build(
        one_turn(&[("outer", args)]),
        vec![outer.tool(), node.tool(), t(&leaf)],
        |b| b,
    );
    let (_, events) = run_checked(&harness).await;
    let position = |id: &str, start: bool| {
        events.iter().position(|e| match e {
            AgentEvent::ToolStarted { call_id, .. } => start && call_id.as_str() == id,
            e if e.is_tool_terminal() => !start && e.call_id().is_some_and(|c| c.as_str() == id),
            _ => false,
        })
    };
    let parent_end = position("p1/1", false).expect("the timed-out parent ends");
    assert!(
        position("p1/1/1", true).is_none_or(|start| start < parent_end),
        "p1/1/1 started after its parent ended: {events:#?}"
    );
    assert_eq!(leaf.calls(), 0, "the leaf never ran");
}
