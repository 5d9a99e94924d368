//! Items 1 and 6: with payload capture off and a `RedactionMiddleware`
//! that knows a secret, a call's raised error and its result (content,
//! metadata) carry the secret into no event and no ledger row, whatever
//! the call's origin.

use std::sync::Arc;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::RunId, ledger::CallStatus, ledger::EffectLedger, ledger::LedgerRow,
    ledger::MemoryLedger, middleware::RedactionMiddleware, middleware::Redactor,
    orchestrator::child_run_id,
};
use tinyagents_tests::{assert_one_terminal_per_start, events_text};

use crate::{
    Counted, Origin, coordinator, counted, delegated_events, harness, one_turn, run,
    run_coordinator, spec, t,
};

/// A secret only the host's redactor knows (no built-in pattern finds it).
const SECRET: &str = "tenant-42-private-zebra";

fn redaction() -> Arc<dyn Middleware> {
    Arc::new(RedactionMiddleware::with_redactor(
        Redactor::new().with_secret(SECRET),
    ))
}

/// `leak_raise`: raises an error whose text holds the secret.
fn leak_raise() -> Arc<Counted> {
    counted(spec("leak_raise"), |_| {
        Err(anyhow::anyhow!("vault refused the lookup of {SECRET}"))
    })
}

/// `leak_meta`: answers `ok` with metadata holding the secret.
fn leak_meta() -> Arc<Counted> {
    counted(spec("leak_meta"), |_| {
        Ok(ToolResult::text("ok").with_metadata(json!({"note": format!("served {SECRET}")})))
    })
}

/// `leak_result`: answers with content and metadata holding the secret.
fn leak_result() -> Arc<Counted> {
    counted(spec("leak_result"), |_| {
        Ok(ToolResult::text(format!("found {SECRET}"))
            .with_metadata(json!({"note": format!("served {SECRET}")})))
    })
}

/// The `ToolFailed.error` of `id`.
fn failed(events: &[AgentEvent], id: &str) -> String {
    crate::failed_error(events, id).unwrap_or_else(|| panic!("{id} did not fail: {events:#?}"))
}

/// The `ToolCompleted.metadata` of `id`.
fn completed_metadata(events: &[AgentEvent], id: &str) -> Value {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolCompleted {
                call_id, metadata, ..
            } if call_id.as_str() == id => Some(metadata.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{id} did not complete: {events:#?}"))
        .unwrap_or_else(|| panic!("{id} completed without metadata"))
}

/// Asserts that the raised error of `raised` and the metadata of `served`
/// are in the events, scrubbed, and that no event holds the secret.
fn assert_scrubbed(events: &[AgentEvent], raised: &str, served: &str) {
    let error = failed(events, raised);
    assert!(
        !error.contains(SECRET),
        "ToolFailed.error of {raised}: {error}"
    );
    assert!(
        error.contains("vault refused the lookup of"),
        "the rest of the error stays: {error}"
    );
    let metadata = completed_metadata(events, served);
    assert!(
        !metadata.to_string().contains(SECRET),
        "ToolCompleted.metadata of {served}: {metadata}"
    );
    assert!(
        metadata["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("served ")),
        "the rest of the metadata stays: {metadata}"
    );
    let text = events_text(events);
    assert!(!text.contains(SECRET), "an event holds the secret: {text}");
}

/// Runs one turn calling `leak_raise` and `leak_meta` from `origin`, with
/// capture off and the redaction middleware, and checks the events.
async fn raised_error_and_metadata_are_scrubbed(origin: Origin) {
    let (raise, meta) = (leak_raise(), leak_meta());
    let harness = harness(
        one_turn(&[
            origin.call("leak_raise", json!({})),
            origin.call("leak_meta", json!({})),
        ]),
        vec![t(&raise), t(&meta)],
        // The raised error's own text (which the redaction scrubs) rides on
        // the event only when detailed errors are on.
        |b| b.middleware(redaction()).include_detailed_errors(true),
    );
    let (result, events) = run(&harness).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((raise.runs(), meta.runs()), (1, 1), "both ran");
    assert_one_terminal_per_start(&events);
    assert_scrubbed(&events, &origin.id_of(1), &origin.id_of(2));
}

/// Item 1 (control): a model-issued call's raised error (`ToolFailed.error`)
/// and result metadata (`ToolCompleted.metadata`) reach the events scrubbed
/// of the secret, with capture off.
#[tokio::test]
async fn i10_1_model_issued_raised_error_and_metadata_reach_events_redacted() {
    raised_error_and_metadata_are_scrubbed(Origin::Model).await;
}

/// Item 1: a nested call's (`p1/1`) raised error and result metadata reach
/// the events scrubbed of the secret, with capture off.
#[tokio::test]
async fn i10_1_nested_raised_error_and_metadata_reach_events_redacted() {
    raised_error_and_metadata_are_scrubbed(Origin::Nested).await;
}

/// Item 1: a nested-of-nested call's (`p1/1/1`) raised error and result
/// metadata reach the events scrubbed of the secret, with capture off.
#[tokio::test]
async fn i10_1_nested_of_nested_raised_error_and_metadata_reach_events_redacted() {
    raised_error_and_metadata_are_scrubbed(Origin::NestedOfNested).await;
}

/// Item 1: in a delegated agent whose host middleware (redaction) is on the
/// child, the forwarded (`Delegated`-wrapped) events of its model-issued,
/// nested and nested-of-nested calls hold the raised errors and metadata
/// scrubbed of the secret; no event of the coordinator's stream holds it.
#[tokio::test]
async fn i10_1_delegated_agents_forwarded_events_redact_errors_and_metadata_at_every_origin() {
    let (raise, meta) = (leak_raise(), leak_meta());
    let calls: Vec<(String, Value)> = Origin::ALL
        .iter()
        .flat_map(|origin| {
            [
                origin.call("leak_raise", json!({})),
                origin.call("leak_meta", json!({})),
            ]
        })
        .collect();
    let root = coordinator(
        vec![tinyagents_tests::turn(&calls), ChatResponse::text("helped")],
        vec![t(&raise), t(&meta)],
        vec![redaction()],
        None,
    )
    .await;
    let (result, events) = run_coordinator(&root, RunRequest::new("go")).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_eq!((raise.runs(), meta.runs()), (3, 3), "every call ran");
    let child = delegated_events(&events);
    assert_one_terminal_per_start(&child);
    // p1, p2 model-issued; p3/1, p4/1 nested; p5/1/1, p6/1/1 nested-of-nested.
    for (raised, served) in [("p1", "p2"), ("p3/1", "p4/1"), ("p5/1/1", "p6/1/1")] {
        assert_scrubbed(&child, raised, served);
    }
    let all = events_text(&events);
    assert!(!all.contains(SECRET), "{all}");
}

// ---------------------------------------------------------------------------
// Item 6: the ledger
// ---------------------------------------------------------------------------

/// The row of `id`, settled, as text: its `Debug` form and its stored
/// result serialised.
async fn settled_row(ledger: &MemoryLedger, run: &RunId, id: &str) -> (LedgerRow, String) {
    let row = ledger
        .get(run, &CallId::new(id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} has no row in {run}"));
    assert!(row.status.is_settled(), "{id}'s row settled: {row:?}");
    let text = format!("{row:?}\n{}", serde_json::to_string(&row.result).unwrap());
    (row, text)
}

/// Asserts that the rows of `returned` (completed, content and metadata) and
/// `raised` (failed) hold no secret while keeping the rest.
async fn assert_rows_scrubbed(ledger: &MemoryLedger, run: &RunId, returned: &str, raised: &str) {
    let (row, text) = settled_row(ledger, run, returned).await;
    assert_eq!(row.status, CallStatus::Completed);
    assert!(!text.contains(SECRET), "the row of {returned}: {text}");
    let stored = row.result.unwrap();
    assert!(stored.content.starts_with("found "), "{}", stored.content);
    assert!(stored.metadata.is_some(), "the metadata is kept");
    let (row, text) = settled_row(ledger, run, raised).await;
    assert_eq!(row.status, CallStatus::Failed);
    assert!(!text.contains(SECRET), "the row of {raised}: {text}");
}

async fn results_are_scrubbed_in_the_ledger(origin: Origin) {
    let (result_tool, raise) = (leak_result(), leak_raise());
    let ledger = Arc::new(MemoryLedger::new());
    let harness = harness(
        one_turn(&[
            origin.call("leak_result", json!({})),
            origin.call("leak_raise", json!({})),
        ]),
        vec![t(&result_tool), t(&raise)],
        |b| {
            b.middleware(redaction())
                .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
        },
    );
    let run_id = RunId::new("ledgered");
    let (result, _) = tinyagents_tests::run_collecting(
        &harness,
        RunRequest::new("go").with_run_id(run_id.clone()),
    )
    .await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_eq!((result_tool.runs(), raise.runs()), (1, 1));
    assert_rows_scrubbed(&ledger, &run_id, &origin.id_of(1), &origin.id_of(2)).await;
}

/// Item 6 (control): a model-issued call's settled ledger row (its result's
/// content and metadata, and a raised error) holds no secret.
#[tokio::test]
async fn i10_6_model_issued_settled_rows_are_redacted() {
    results_are_scrubbed_in_the_ledger(Origin::Model).await;
}

/// Item 6: a nested call's (`p1/1`) settled ledger row (its result's
/// content and metadata, and a raised error) holds no secret.
#[tokio::test]
async fn i10_6_nested_settled_rows_are_redacted() {
    results_are_scrubbed_in_the_ledger(Origin::Nested).await;
}

/// Item 6: a nested-of-nested call's (`p1/1/1`) settled ledger row holds no
/// secret.
#[tokio::test]
async fn i10_6_nested_of_nested_settled_rows_are_redacted() {
    results_are_scrubbed_in_the_ledger(Origin::NestedOfNested).await;
}

/// Item 6: in a delegated agent (its rows keyed by the child run id), the
/// settled rows of its model-issued, nested and nested-of-nested calls hold
/// no secret.
#[tokio::test]
async fn i10_6_delegated_agents_settled_rows_are_redacted_at_every_origin() {
    let (result_tool, raise) = (leak_result(), leak_raise());
    let calls: Vec<(String, Value)> = Origin::ALL
        .iter()
        .flat_map(|origin| {
            [
                origin.call("leak_result", json!({})),
                origin.call("leak_raise", json!({})),
            ]
        })
        .collect();
    let ledger = Arc::new(MemoryLedger::new());
    let root = coordinator(
        vec![tinyagents_tests::turn(&calls), ChatResponse::text("helped")],
        vec![t(&result_tool), t(&raise)],
        vec![redaction()],
        Some(Arc::clone(&ledger) as Arc<dyn EffectLedger>),
    )
    .await;
    let top = RunId::new("top");
    let (result, _) = run_coordinator(&root, RunRequest::new("go").with_run_id(top.clone())).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    let child = child_run_id(&top, &CallId::model(1));
    for (returned, raised) in [("p1", "p2"), ("p3/1", "p4/1"), ("p5/1/1", "p6/1/1")] {
        assert_rows_scrubbed(&ledger, &child, returned, raised).await;
    }
}

/// Item 1, with capture on: the model's answer captured on
/// `ModelCompleted` is scrubbed like every captured payload (an answer
/// may quote a secret a tool returned), while the run's own answer, for
/// the host, is the model's text as it was.
#[tokio::test]
async fn i10_1_a_captured_model_answer_reaches_events_redacted() {
    let answer = format!("the key is {SECRET}");
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new([ChatResponse::text(
        answer.clone(),
    )])))
    .middleware(redaction())
    .payload_capture(PayloadCapture::all())
    .build()
    .unwrap();
    let (result, events) =
        tinyagents_tests::run_collecting(&harness, RunRequest::new("what is the key?")).await;
    assert_eq!(result.unwrap().final_text, answer);
    let content = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ModelCompleted { content, .. } => content.clone(),
            _ => None,
        })
        .expect("captured content");
    assert!(!content.contains(SECRET), "{content}");
    assert!(content.starts_with("the key is "), "{content}");
    assert!(!events_text(&events).contains(SECRET));
}
