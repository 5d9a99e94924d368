//! Items 4 and 5: argument values the harness refuses stay out of what it
//! emits and persists. With payload capture off, a planted value inside
//! malformed or schema-breaking arguments reaches no event, while the
//! refusal still names the tool (and, for a schema violation, the JSON
//! pointer and the schema keyword). A secret inside malformed arguments is
//! not persisted verbatim in the transcript, the checkpoint or a suspended
//! run.

use std::sync::Arc;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::ModelToolCall, core::RunId, ledger::EffectLedger, ledger::MemoryLedger,
    middleware::HumanApprovalMiddleware, middleware::RedactionMiddleware, middleware::Redactor,
};
use tinyagents_tests::{assert_one_terminal_per_start, events_text};

use crate::{
    Origin, add, coordinator, delegated_events, failed_error, harness, plain, run, run_coordinator,
    t,
};

const PLANTED: &str = "PLANTED-7731";

/// Raw argument text that is not JSON, holding the planted value.
fn not_json() -> String {
    format!("{{\"a\": {PLANTED}, \"b\": 1}}")
}

/// JSON arguments whose `a` breaks `add`'s schema (a string where an
/// integer is expected) with the planted value.
fn breaks_schema() -> Value {
    json!({"a": PLANTED, "b": 1})
}

/// The model's turn: `add` with arguments that are not JSON, then `add`
/// with schema-breaking arguments, both from `origin`. A nested call cannot
/// send text that is not JSON (`call_tool` takes a value), so its
/// non-JSON case is the same text sent as a JSON string.
fn bad_turn(origin: Origin) -> ChatResponse {
    let first = match origin {
        Origin::Model => ModelToolCall::from_text(None, "add", &not_json()),
        _ => {
            let (name, args) = origin.call("add", Value::String(not_json()));
            ModelToolCall::new(None, name, args)
        }
    };
    assert!(
        origin != Origin::Model || first.raw_arguments.is_some(),
        "the model's text is not JSON"
    );
    let (name, args) = origin.call("add", breaks_schema());
    ChatResponse::tool_calls(vec![first, ModelToolCall::new(None, name, args)])
}

/// Asserts the events of a turn built by [`bad_turn`] (ids `malformed` and
/// `invalid`): no event holds the planted value; both calls failed naming
/// the tool, the schema violation also the pointer and the keyword.
fn assert_value_free(events: &[AgentEvent], malformed: &str, invalid: &str) {
    let text = events_text(events);
    assert!(
        !text.contains(PLANTED),
        "an event holds the planted value: {text}"
    );
    assert!(!text.contains("7731"), "{text}");
    let error = failed_error(events, malformed).unwrap_or_else(|| panic!("{malformed} failed"));
    assert!(error.contains("'add'"), "names the tool: {error}");
    let error = failed_error(events, invalid).unwrap_or_else(|| panic!("{invalid} failed"));
    assert!(error.contains("'add'"), "names the tool: {error}");
    assert!(error.contains("'/a'"), "names the pointer: {error}");
    assert!(error.contains("'type'"), "names the keyword: {error}");
}

async fn refused_arguments_reach_no_event(origin: Origin) {
    let harness = harness(
        vec![bad_turn(origin), ChatResponse::text("done")],
        vec![add()],
        |b| b.payload_capture(PayloadCapture::default()),
    );
    let (result, events) = run(&harness).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_one_terminal_per_start(&events);
    assert_value_free(&events, &origin.id_of(1), &origin.id_of(2));
}

/// Item 4: with capture off, a model-issued call whose arguments are not
/// JSON and one whose JSON breaks the schema put the planted value in no
/// event; the `ToolFailed.error`s name the tool, and the schema one the
/// pointer `/a` and the keyword `type`.
#[tokio::test]
async fn i10_4_model_issued_malformed_and_schema_breaking_arguments_reach_no_event_and_errors_name_tool_pointer_keyword()
 {
    refused_arguments_reach_no_event(Origin::Model).await;
}

/// Item 4: the same for nested calls (`p1/1`, `p2/1`).
#[tokio::test]
async fn i10_4_nested_malformed_and_schema_breaking_arguments_reach_no_event_and_errors_name_tool_pointer_keyword()
 {
    refused_arguments_reach_no_event(Origin::Nested).await;
}

/// Item 4: the same for nested-of-nested calls (`p1/1/1`, `p2/1/1`).
#[tokio::test]
async fn i10_4_nested_of_nested_malformed_and_schema_breaking_arguments_reach_no_event_and_errors_name_tool_pointer_keyword()
 {
    refused_arguments_reach_no_event(Origin::NestedOfNested).await;
}

/// Item 4: the same inside a delegated agent, at every origin: its
/// forwarded events, and the coordinator's whole stream, hold no planted
/// value.
#[tokio::test]
async fn i10_4_delegated_malformed_and_schema_breaking_arguments_reach_no_forwarded_event() {
    let mut calls = Vec::new();
    for origin in Origin::ALL {
        calls.extend(bad_turn(origin).tool_calls);
    }
    let root = coordinator(
        vec![
            ChatResponse::tool_calls(calls),
            ChatResponse::text("helped"),
        ],
        vec![add()],
        Vec::new(),
        None,
    )
    .await;
    let (result, events) = run_coordinator(&root, RunRequest::new("go")).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    let child = delegated_events(&events);
    assert_one_terminal_per_start(&child);
    for (malformed, invalid) in [("p1", "p2"), ("p3/1", "p4/1"), ("p5/1/1", "p6/1/1")] {
        assert_value_free(&child, malformed, invalid);
    }
    let all = events_text(&events);
    assert!(!all.contains(PLANTED), "{all}");
}

// ---------------------------------------------------------------------------
// Item 5
// ---------------------------------------------------------------------------

const SECRET: &str = "tenant-42-private-zebra";

/// Item 5: a model-issued call whose raw (non-JSON) arguments hold a secret
/// the redactor knows, in a turn that also holds a deferred call (so the
/// run suspends): the secret is in none of the serialised transcript
/// (`AgentRun.messages`, the assistant message included), the ledger's
/// checkpoint bytes, or the serialised `SuspendedRun`.
#[tokio::test]
async fn i10_5_a_secret_in_malformed_model_arguments_is_in_no_transcript_checkpoint_or_suspended_run()
 {
    let deploy = plain("deploy");
    let ledger = Arc::new(MemoryLedger::new());
    let raw = format!("{{\"a\": 1, \"note\": \"{SECRET}\", ");
    let turn = ChatResponse::tool_calls(vec![
        ModelToolCall::from_text(None, "add", &raw),
        ModelToolCall::new(None, "deploy", json!({"env": "prod"})),
    ]);
    assert!(turn.tool_calls[0].raw_arguments.is_some(), "not JSON");
    let harness = harness(
        vec![turn, ChatResponse::text("done")],
        vec![add(), t(&deploy)],
        |b| {
            b.middleware(Arc::new(RedactionMiddleware::with_redactor(
                Redactor::new().with_secret(SECRET),
            )))
            .middleware(Arc::new(HumanApprovalMiddleware::new().require("deploy")))
            .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
        },
    );
    let run_id = RunId::new("suspends");
    let (result, _) = tinyagents_tests::run_collecting(
        &harness,
        RunRequest::new("go").with_run_id(run_id.clone()),
    )
    .await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    assert_eq!(deploy.runs(), 0);
    assert!(
        run.messages.iter().any(|m| matches!(
            m,
            Message::Assistant { tool_calls, .. } if tool_calls.len() == 2
        )),
        "the assistant message is in the transcript"
    );

    let transcript = serde_json::to_string(&run.messages).unwrap();
    let checkpoint = ledger
        .load_checkpoint(&run_id)
        .await
        .unwrap()
        .expect("the turn was checkpointed");
    let checkpoint = String::from_utf8_lossy(&checkpoint.data).into_owned();
    let suspended = serde_json::to_string(run.suspended.as_ref().expect("suspended")).unwrap();
    let leaks: Vec<(&str, &String)> = [
        ("AgentRun.messages", &transcript),
        ("the ledger checkpoint", &checkpoint),
        ("the SuspendedRun", &suspended),
    ]
    .into_iter()
    .filter(|(_, text)| text.contains(SECRET))
    .collect();
    assert!(leaks.is_empty(), "the secret is persisted in: {leaks:#?}");
}
