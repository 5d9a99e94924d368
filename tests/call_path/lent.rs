//! Issue 32, the transcript lends a turn's arguments: with no ledger, no
//! active redaction and no hook given the run's state, a model-issued call
//! whose arguments are ready as sent runs on the transcript's one copy of
//! them (its tool borrows them) and the fold gives them back. These tests
//! hold the transcript to the model's arguments however each call of the
//! turn ends: it ran, its tool was unknown, its arguments were refused,
//! it waits for a person, its tool asked for one while it ran, or its tool
//! panicked; in a turn of more calls than one word of marks (64); and with
//! payload capture on, every call's `ToolStarted` shows its arguments.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tinyagents::prelude::*;

use crate::{add, counted, harness, one_turn, spec, t};

/// The arguments of each call of the transcript's first assistant message,
/// by call id.
fn transcript_arguments(messages: &[Message]) -> Vec<(String, Value)> {
    messages
        .iter()
        .find_map(|message| match message {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(
                tool_calls
                    .iter()
                    .map(|call| (call.name.clone(), call.arguments.clone()))
                    .collect(),
            ),
            _ => None,
        })
        .expect("an assistant message with calls")
}

/// Runs `calls` in one turn on `harness` up to the one call that waits for
/// a person (its arguments `waiting`), checks the suspended transcript,
/// approves it and checks the resumed run's.
async fn approve_the_waiting_call(
    harness: &AgentHarness,
    calls: &[(String, Value)],
    waiting: &Value,
) {
    let (result, _) = crate::run(harness).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let pending = run.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(&pending[0].call.arguments, waiting);
    let suspended = run.suspended.clone().expect("a suspended run");
    assert_eq!(transcript_arguments(&suspended.state.messages), calls);
    let decisions = [pending[0].approve()];
    let (resumed, _) = tinyagents_tests::resume_collecting(harness, suspended, &decisions).await;
    let resumed = resumed.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(transcript_arguments(&resumed.messages), calls);
}

#[tokio::test]
async fn i32_every_call_of_a_turn_that_lent_its_arguments_gets_them_back_however_it_ended() {
    // 70 calls that run (past one word of marks), one of an unknown tool
    // and one whose arguments do not fit. (A call the budget refuses ends
    // the run with `LimitExceeded`, transcript and all.)
    let mut calls: Vec<(String, Value)> = (0..70)
        .map(|i| ("add".to_owned(), json!({"a": i, "b": 1})))
        .collect();
    calls.push(("missing".to_owned(), json!({"q": "where"})));
    calls.push(("add".to_owned(), json!({"a": "one", "b": 1})));
    let harness = harness(one_turn(&calls), vec![add()], |b| {
        b.limits(
            RunLimits::default()
                .with_max_nested_depth(3)
                .with_max_parallel_calls(100),
        )
    });
    let (result, _) = crate::run(&harness).await;
    let run = result.unwrap();
    assert_eq!(transcript_arguments(&run.messages), calls);
    // Each call has its answer: the sums, then the refusals.
    let answers: Vec<(String, bool)> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), calls.len());
    for (i, (content, is_error)) in answers[..70].iter().enumerate() {
        assert_eq!(
            (content.as_str(), *is_error),
            ((i + 1).to_string().as_str(), false)
        );
    }
    assert!(
        answers[70..].iter().all(|(_, is_error)| *is_error),
        "{answers:?}"
    );
}

#[tokio::test]
async fn i32_a_turn_that_waits_for_a_person_keeps_every_argument_before_and_after_its_resume() {
    let pay = counted(spec("pay").approval_required(), |_| {
        Ok(ToolResult::text("paid"))
    });
    let calls = vec![
        ("add".to_owned(), json!({"a": 1, "b": 2})),
        ("pay".to_owned(), json!({"cents": 100})),
        ("add".to_owned(), json!({"a": 3, "b": 4})),
    ];
    let harness = harness(one_turn(&calls), vec![add(), t(&pay)], |b| b);
    approve_the_waiting_call(&harness, &calls, &json!({"cents": 100})).await;
    assert_eq!(pay.runs(), 1);
}

#[tokio::test]
async fn i32_a_call_whose_tool_asks_for_a_person_while_it_runs_keeps_its_arguments_twice() {
    let asked = Arc::new(AtomicBool::new(false));
    let first = Arc::clone(&asked);
    let transfer = counted(spec("transfer"), move |_| {
        if first.swap(true, Ordering::SeqCst) {
            return Ok(ToolResult::text("sent"));
        }
        Err(anyhow::Error::new(TinyAgentsError::ApprovalRequired {
            tool: "transfer".to_owned(),
            reason: "a large amount".to_owned(),
        }))
    });
    let calls = vec![
        (
            "transfer".to_owned(),
            json!({"to": "acct-9", "cents": 90_000}),
        ),
        ("add".to_owned(), json!({"a": 5, "b": 6})),
    ];
    let harness = harness(one_turn(&calls), vec![add(), t(&transfer)], |b| b);
    let waiting = json!({"to": "acct-9", "cents": 90_000});
    approve_the_waiting_call(&harness, &calls, &waiting).await;
    assert_eq!(transfer.runs(), 2);
}

#[tokio::test]
async fn i32_a_lending_turn_with_capture_on_shows_every_argument_and_a_panicking_tool_gives_them_back()
 {
    let boom = counted(spec("boom"), |_| panic!("the tool broke"));
    let calls = vec![
        ("add".to_owned(), json!({"a": 1, "b": 2})),
        ("boom".to_owned(), json!({"why": "test"})),
        ("missing".to_owned(), json!({"q": 1})),
    ];
    let harness = harness(one_turn(&calls), vec![add(), t(&boom)], |b| {
        b.payload_capture(PayloadCapture::all())
    });
    let (result, events) = crate::run(&harness).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(boom.runs(), 1);
    assert_eq!(transcript_arguments(&run.messages), calls);
    // Every call's `ToolStarted` carries its arguments, lent or not (a
    // refused call's comes first, at admission).
    let mut started: Vec<(String, Option<Value>)> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolStarted {
                name, arguments, ..
            } => Some((name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    let mut expected: Vec<(String, Option<Value>)> = calls
        .iter()
        .map(|(name, args)| (name.clone(), Some(args.clone())))
        .collect();
    started.sort_by(|a, b| a.0.cmp(&b.0));
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(started, expected);
    tinyagents_tests::assert_one_terminal_per_start(&events);
}
