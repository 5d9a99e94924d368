//! NT-26..NT-28: ids, events and the transcript.

use super::*;

/// rule NT-26: a nested call's id is `<parent>/<n>`, n counting from 1 per
/// parent (a refused call takes its number too); nested-of-nested ids
/// extend the path.
#[tokio::test]
async fn nt_26_ids_extend_the_parents_path() {
    let node = Node::plain();
    let leaf = new_leaf();
    let model = one_turn(&[
        (
            "node",
            plan(vec![
                child("leaf", json!({})),
                child("ghost", json!({})),
                child(
                    "node",
                    plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
                ),
            ]),
        ),
        ("node", plan(vec![child("leaf", json!({}))])),
    ]);
    let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| b);
    let (_, events) = run_checked(&harness).await;
    let mut starts = nested_starts(&events);
    starts.sort();
    assert_eq!(starts, ["p1/1", "p1/2", "p1/3", "p1/3/1", "p1/3/2", "p2/1"]);
    let mut ran = leaf.ids();
    ran.sort();
    assert_eq!(ran, ["p1/1", "p1/3/1", "p1/3/2", "p2/1"]);
}

/// rule NT-27: `ToolStarted`, `ToolCompleted` and `ToolFailed` carry
/// `parent_call_id` naming the immediate parent; it is omitted from the
/// serialized event when there is none.
#[tokio::test]
async fn nt_27_events_name_the_immediate_parent_and_omit_none() {
    let node = Node::plain();
    let tree = plan(vec![child(
        "node",
        plan(vec![child("leaf", json!({})), child("ghost", json!({}))]),
    )]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b,
    );
    let (_, events) = run_checked(&harness).await;
    let parent_of = |id: &str, terminal_kind: bool| {
        events
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolStarted {
                    call_id,
                    parent_call_id,
                    ..
                } if !terminal_kind && call_id.as_str() == id => Some(parent_call_id.clone()),
                AgentEvent::ToolCompleted {
                    call_id,
                    parent_call_id,
                    ..
                }
                | AgentEvent::ToolFailed {
                    call_id,
                    parent_call_id,
                    ..
                } if terminal_kind && call_id.as_str() == id => Some(parent_call_id.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no event for {id}"))
    };
    for terminal_kind in [false, true] {
        assert_eq!(parent_of("p1", terminal_kind), None);
        assert_eq!(parent_of("p1/1", terminal_kind), Some(CallId::new("p1")));
        assert_eq!(
            parent_of("p1/1/1", terminal_kind),
            Some(CallId::new("p1/1")),
            "the immediate parent, not p1"
        );
        assert_eq!(
            parent_of("p1/1/2", terminal_kind),
            Some(CallId::new("p1/1"))
        );
    }
    for event in &events {
        let Some(id) = event.call_id() else { continue };
        let text = serde_json::to_value(event).unwrap();
        match id.parent() {
            None => assert!(
                text.get("parent_call_id").is_none(),
                "omitted when none: {text}"
            ),
            Some(parent) => assert_eq!(text["parent_call_id"], json!(parent.as_str()), "{text}"),
        }
        let back: AgentEvent = serde_json::from_value(text).unwrap();
        assert_eq!(&back, event);
    }
    let old: AgentEvent =
        serde_json::from_value(json!({"type": "tool_started", "call_id": "p1", "name": "node"}))
            .unwrap();
    assert!(
        matches!(
            old,
            AgentEvent::ToolStarted {
                parent_call_id: None,
                ..
            }
        ),
        "serde default"
    );
}

/// rule NT-28: nested calls add no transcript rows.
#[tokio::test]
async fn nt_28_nested_calls_add_no_transcript_rows() {
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("node", plan(vec![child("leaf", json!({}))])),
        child("ghost", json!({})),
    ]);
    let (harness, model) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(nested_starts(&events).len(), 4);
    let rows: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(rows, ["node"]);
    for message in run
        .messages
        .iter()
        .chain(model.requests().last().unwrap().messages.iter())
    {
        if let Message::Assistant { tool_calls, .. } = message {
            assert!(tool_calls.iter().all(|c| !c.id.is_nested()));
        }
        if let Message::Tool { call_id, .. } = message {
            assert!(!call_id.is_nested());
        }
    }
}
