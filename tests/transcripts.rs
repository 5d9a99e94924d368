//! Continuing an earlier run's transcript (`RunRequest::with_transcript`,
//! issue 11 item 7): the run reuses the transcript it is handed, standing
//! instruction first, and runs exactly as it would on the same conversation
//! given as history: the same transcript, the same call ids. The leading
//! instruction is checked, never trusted.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents_tests::*;

const PROMPT: &str = "You add.";

fn adds(n: usize) -> ChatResponse {
    ScriptedModel::tool_calls((0..n).map(|i| ("add", json!({"a": i, "b": 1}))))
}

fn harness(prompt: Option<&str>, model: Arc<ScriptedModel>) -> AgentHarness {
    let builder = AgentHarness::builder(model).tool(add_tool());
    match prompt {
        Some(prompt) => builder.system_prompt(prompt),
        None => builder,
    }
    .build()
    .unwrap()
}

/// The transcript of a first run that issued two calls (`p1`, `p2`).
async fn earlier(prompt: Option<&str>) -> Vec<Message> {
    let model = Arc::new(ScriptedModel::new([adds(2), ChatResponse::text("first")]));
    harness(prompt, model).run("go").await.unwrap().messages
}

/// A second run (one call, then an answer) on `request`: its transcript and
/// every request its model saw.
async fn second(prompt: Option<&str>, request: RunRequest) -> (Vec<Message>, Vec<Vec<Message>>) {
    let model = Arc::new(ScriptedModel::new([adds(1), ChatResponse::text("second")]).recording());
    let run = harness(prompt, Arc::clone(&model))
        .run_with(request, &EventSink::none())
        .await
        .unwrap();
    assert_transcript_paired(&run.messages);
    let seen = model.requests().into_iter().map(|r| r.messages).collect();
    (run.messages, seen)
}

fn call_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect()
}

fn system_positions(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::System { .. }))
        .map(|(i, _)| i)
        .collect()
}

fn without_instructions(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .cloned()
        .collect()
}

/// What a run given the conversation of `transcript` as history does.
async fn as_history(
    prompt: Option<&str>,
    transcript: &[Message],
) -> (Vec<Message>, Vec<Vec<Message>>) {
    let request = RunRequest::new("again").with_history(without_instructions(transcript));
    second(prompt, request).await
}

#[tokio::test]
async fn i11_7_a_continued_transcript_runs_as_its_conversation_given_as_history() {
    let earlier = earlier(Some(PROMPT)).await;
    assert_eq!(earlier[0], Message::system(PROMPT));
    let expected = as_history(Some(PROMPT), &earlier).await;
    let continued = second(
        Some(PROMPT),
        RunRequest::new("again").with_transcript(earlier.clone()),
    )
    .await;
    assert_eq!(continued, expected);
    let (messages, seen) = continued;
    assert_eq!(messages[..earlier.len()], earlier[..]);
    assert_eq!(system_positions(&messages), [0]);
    assert_eq!(system_positions(&seen[0]), [0]);
    // The earlier calls keep their ids; this run's number on after them.
    assert_eq!(call_ids(&messages), ["p1", "p2", "p3"]);
}

#[tokio::test]
async fn i11_7_a_continued_transcript_with_room_is_grown_in_place() {
    let mut earlier = earlier(Some(PROMPT)).await;
    earlier.reserve(16);
    let at = earlier.as_ptr();
    let (messages, _) = second(
        Some(PROMPT),
        RunRequest::new("again").with_transcript(earlier),
    )
    .await;
    assert_eq!(messages.as_ptr(), at, "the transcript was not copied");
}

#[tokio::test]
async fn i11_7_a_leading_instruction_that_is_not_the_system_prompt_is_replaced() {
    let earlier = earlier(Some(PROMPT)).await;
    let expected = as_history(Some(PROMPT), &earlier).await;
    let mut stale = earlier.clone();
    stale[0] = Message::system("You used to subtract.");
    let (messages, seen) = second(
        Some(PROMPT),
        RunRequest::new("again").with_transcript(stale),
    )
    .await;
    assert_eq!((messages.clone(), seen.clone()), expected);
    for transcript in [&messages, &seen[0], &seen[1]] {
        assert_eq!(system_positions(transcript), [0]);
        assert_eq!(transcript[0], Message::system(PROMPT));
    }
    assert_eq!(call_ids(&messages), ["p1", "p2", "p3"]);
}

#[tokio::test]
async fn i11_7_a_transcript_without_a_leading_instruction_is_all_conversation() {
    let earlier = earlier(Some(PROMPT)).await;
    let expected = as_history(Some(PROMPT), &earlier).await;
    let conversation = without_instructions(&earlier);
    let continued = second(
        Some(PROMPT),
        RunRequest::new("again").with_transcript(conversation.clone()),
    )
    .await;
    assert_eq!(continued, expected);
    assert_eq!(continued.0[1..=conversation.len()], conversation[..]);
    // `with_history` after `with_transcript` takes the messages as
    // conversation: a leading system message stays where it is.
    let (messages, _) = second(
        Some(PROMPT),
        RunRequest::new("again")
            .with_transcript(Vec::new())
            .with_history(earlier.clone()),
    )
    .await;
    assert_eq!(system_positions(&messages), [0, 1]);
    assert_eq!(messages[1..=earlier.len()], earlier[..]);
}

#[tokio::test]
async fn i11_7_a_harness_without_a_system_prompt_needs_no_leading_instruction() {
    let earlier = earlier(None).await;
    assert!(system_positions(&earlier).is_empty());
    let expected = as_history(None, &earlier).await;
    let continued = second(
        None,
        RunRequest::new("again").with_transcript(earlier.clone()),
    )
    .await;
    assert_eq!(continued, expected);
    assert_eq!(continued.0[..earlier.len()], earlier[..]);
    assert_eq!(call_ids(&continued.0), ["p1", "p2", "p3"]);
    // Another harness's instruction leading the transcript is dropped.
    let mut led = earlier.clone();
    led.insert(0, Message::system(PROMPT));
    let (messages, seen) = second(None, RunRequest::new("again").with_transcript(led)).await;
    assert_eq!((messages.clone(), seen), expected);
    assert!(system_positions(&messages).is_empty());
}
