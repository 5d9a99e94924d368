//! The span tree: `invoke_agent` → `chat` and `execute_tool` for a
//! model-issued call; a nested call under its calling tool's span; a
//! delegated agent's run under the calling tool's span, its own chats and
//! tools below it; one trace for the whole tree.

use super::*;

#[tokio::test]
async fn model_issued_chats_and_calls_are_children_of_invoke_agent_in_one_trace() {
    let spans = Spans::capture();
    let run = team(PayloadCapture::default())
        .run("look r-1 up")
        .await
        .unwrap();
    assert_eq!(run.final_text, "done");
    let spans = spans.finished();
    let root = one(&spans, "invoke_agent coordinator");
    assert!(is_root(root));
    let chats: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "chat coordinator-model")
        .collect();
    assert_eq!(chats.len(), 3, "{:?}", names(&spans));
    assert!(chats.iter().all(|chat| is_child_of(chat, root)));
    for (tool, id) in [("lookup", "p1"), ("specialist", "p2")] {
        let call = tool_call(&spans, tool, id);
        assert_eq!(call.name, format!("execute_tool {tool}"));
        assert!(is_child_of(call, root), "{tool} under invoke_agent");
    }
    assert!(
        spans.iter().all(|s| trace(s) == trace(root)),
        "one trace id for the whole tree"
    );
    // Two runs, five chats, four tool calls (one nested).
    assert_eq!(spans.len(), 11, "{:?}", names(&spans));
}

#[tokio::test]
async fn a_nested_calls_execute_tool_is_the_child_of_its_calling_tools_execute_tool() {
    let spans = Spans::capture();
    team(PayloadCapture::default())
        .run("look r-1 up")
        .await
        .unwrap();
    let spans = spans.finished();
    let parent = tool_call(&spans, "lookup", "p1");
    let nested = tool_call(&spans, "fetch", "p1/1");
    assert!(is_child_of(nested, parent));
    assert_eq!(
        attr(nested, "tinyagents.call.parent_id").as_deref(),
        Some("p1")
    );
    assert_eq!(attr(parent, "tinyagents.call.parent_id"), None);
    // It ran inside its parent.
    assert!(nested.start_time >= parent.start_time && nested.end_time <= parent.end_time);
}

#[tokio::test]
async fn a_delegated_agents_run_is_the_child_of_the_calling_execute_tool_with_its_own_spans_below()
{
    let spans = Spans::capture();
    team(PayloadCapture::default())
        .run("look r-1 up")
        .await
        .unwrap();
    let spans = spans.finished();
    let caller = tool_call(&spans, "specialist", "p2");
    let delegated = one(&spans, "invoke_agent specialist");
    assert!(is_child_of(delegated, caller));
    assert_eq!(attr(delegated, "tinyagents.depth").as_deref(), Some("1"));
    let chats: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "chat specialist-model")
        .collect();
    assert_eq!(chats.len(), 2);
    assert!(chats.iter().all(|chat| is_child_of(chat, delegated)));
    let its_call = tool_call(&spans, "fetch", "p1");
    assert!(is_child_of(its_call, delegated));
    assert_ne!(
        attr(its_call, "tinyagents.run.id"),
        attr(caller, "tinyagents.run.id"),
        "the delegated run has its own run id"
    );
    assert_eq!(
        trace(delegated),
        trace(one(&spans, "invoke_agent coordinator"))
    );
}
