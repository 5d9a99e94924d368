//! Nested calls in doubt: under a parent that does not run again (they are
//! settled, listed in its answer, and stay in view while their effect is
//! unknown), and under a parent that runs again (each is reconciled as it
//! is met). Issue 18, items 1 and 2.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinyagents::ledger::{Effect, Timestamp};
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::RunId, core::ToolReplay, ledger::CallStatus, ledger::EffectLedger,
    ledger::Found, ledger::MemoryLedger, ledger::Resolve, ledger::RunState, tools::Reconciled,
};
use tinyagents_tests::{Behaviour, ProbeTool, call_answer};

use super::bank::{Answer, Bank, Batch, Pay, Stall, crash_when, harness};
use super::{batch_turn, in_doubt, listed, recover, row};

fn tools(batch: &Arc<Batch>, pay: &Arc<Pay>) -> Vec<Arc<dyn Tool>> {
    vec![batch.clone(), pay.clone()]
}

/// The reproduction of issue 18, item 1: a `Never` parent in doubt is
/// answered "interrupted, outcome unknown"; its nested payment, left
/// started, is settled too (its tool could not tell), named in the answer,
/// and keeps the finished run in `unfinished_runs` and `in_doubt`; pruning
/// keeps it until a person resolves both.
#[tokio::test]
async fn i18_1_nested_rows_under_an_interrupted_parent_are_settled_listed_and_never_pruned() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Unknown, Stall::AfterPaying);
    let batch = Batch::new(ToolReplay::Never, None);
    let model = vec![
        batch_turn(&["ann", "bob"]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness(model, ledger.clone(), tools(&batch, &pay));
    crash_when(&first, "item-1", &pay.stalled()).await;
    assert_eq!(in_doubt(&ledger, "item-1").await, ["p1", "p1/1"]);

    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        tools(&batch, &pay),
    );
    let (run, _) = recover(&second, "item-1").await;
    assert_eq!(run.status, RunStatus::Completed);
    let (answer, is_error) = call_answer(&run.messages, "p1").unwrap();
    assert!(is_error);
    assert!(
        answer.starts_with("interrupted, outcome unknown")
            && answer.contains("its nested calls: p1/1 (pay): the outcome is still unknown"),
        "{answer}"
    );
    assert_eq!(
        batch.calls.load(Ordering::SeqCst),
        1,
        "the parent did not run again"
    );
    assert_eq!(bank.payments(), 1, "nothing paid twice, bob never paid");
    let nested = row(&ledger, "item-1", "p1/1").await;
    assert_eq!(
        nested.status,
        CallStatus::Interrupted,
        "settled, not left started"
    );
    assert!(
        nested
            .resolution
            .unwrap()
            .note
            .unwrap()
            .contains("its parent p1 was not run again"),
        "why"
    );

    let run_id = RunId::from("item-1");
    assert_eq!(ledger.run_state(&run_id).await.unwrap(), RunState::Finished);
    assert!(
        listed(&ledger, "item-1").await,
        "finished, but its effects are unknown"
    );
    let listed_rows = ledger.in_doubt().await.unwrap();
    let ours: Vec<_> = listed_rows
        .iter()
        .filter(|d| d.row.run_id == run_id)
        .collect();
    assert_eq!(ours.len(), 2);
    assert!(ours.iter().all(|d| d.run_finished));
    assert_eq!(ours[1].idempotency_key.call_id, CallId::new("p1/1"));
    let pruned = ledger.prune_finished(Timestamp::MAX).await.unwrap();
    assert_eq!(pruned.kept_unresolved, 1);
    assert_eq!(
        ledger.rows(&run_id).await.unwrap().len(),
        2,
        "nothing pruned"
    );

    // A person checks the bank: ann was paid, bob was not (so the batch as
    // a whole did happen, in part).
    let ann = Resolve::by_person("ops@example", Found::Happened(ToolResult::text("paid ann")));
    ledger
        .resolve(&run_id, &CallId::new("p1/1"), &ann)
        .await
        .unwrap();
    assert!(
        listed(&ledger, "item-1").await,
        "the batch is still unknown"
    );
    let batch_found =
        Resolve::by_person("ops@example", Found::Happened(ToolResult::text("ann only")))
            .with_note("bob never paid");
    ledger
        .resolve(&run_id, &CallId::new("p1"), &batch_found)
        .await
        .unwrap();
    assert!(!listed(&ledger, "item-1").await);
    assert!(in_doubt(&ledger, "item-1").await.is_empty());
    let pruned = ledger.prune_finished(Timestamp::MAX).await.unwrap();
    assert_eq!((pruned.runs, pruned.kept_unresolved), (1, 0));
}

/// Under an interrupted parent, a nested payment whose tool can look it up
/// is settled with what it found, and the answer says so.
#[tokio::test]
async fn i18_2_a_nested_call_under_an_interrupted_parent_is_reconciled() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let batch = Batch::new(ToolReplay::Never, None);
    let model = vec![
        batch_turn(&["ann", "bob"]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness(model, ledger.clone(), tools(&batch, &pay));
    crash_when(&first, "under-interrupted", &pay.stalled()).await;
    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        tools(&batch, &pay),
    );
    let (run, _) = recover(&second, "under-interrupted").await;
    let (answer, _) = call_answer(&run.messages, "p1").unwrap();
    assert!(
        answer.contains("its nested calls: p1/1 (pay): the effect happened"),
        "{answer}"
    );
    let nested = row(&ledger, "under-interrupted", "p1/1").await;
    assert_eq!(nested.status, CallStatus::Completed);
    assert_eq!(nested.resolution.unwrap().effect, Effect::Happened);
    assert_eq!(
        in_doubt(&ledger, "under-interrupted").await,
        ["p1"],
        "only the parent, which could not tell, is left"
    );
}

/// A replay-safe parent runs again: its nested payment in doubt is met
/// again under the same id and reconciled (found paid), the next one runs;
/// every payment happens exactly once.
#[tokio::test]
async fn i18_2_a_nested_call_met_again_under_a_rerun_parent_is_reconciled() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let batch = Batch::new(ToolReplay::Safe, None);
    let model = vec![
        batch_turn(&["ann", "bob"]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness(model, ledger.clone(), tools(&batch, &pay));
    crash_when(&first, "rerun", &pay.stalled()).await;
    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        tools(&batch, &pay),
    );
    let (run, _) = recover(&second, "rerun").await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("paid (found by its key) | paid bob".to_owned(), false))
    );
    assert_eq!(bank.payments(), 2);
    assert!(bank.repeated().is_empty());
    assert_eq!(pay.asked.load(Ordering::SeqCst), 1);
    assert!(in_doubt(&ledger, "rerun").await.is_empty());
    assert!(!listed(&ledger, "rerun").await);
}

/// A `Never` parent with no effect of its own says `NotDone`: it runs
/// again, and each of its nested payments is reconciled as it is met, so
/// the batch completes with every payment made once.
#[tokio::test]
async fn i18_2_a_parent_that_reconciles_not_done_runs_again_and_its_nested_calls_are_reconciled() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let batch = Batch::new(ToolReplay::Never, Some(Reconciled::NotDone));
    let model = vec![
        batch_turn(&["ann", "bob"]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness(model, ledger.clone(), tools(&batch, &pay));
    crash_when(&first, "not-done-parent", &pay.stalled()).await;
    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        tools(&batch, &pay),
    );
    let (run, _) = recover(&second, "not-done-parent").await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("paid (found by its key) | paid bob".to_owned(), false))
    );
    assert_eq!(batch.calls.load(Ordering::SeqCst), 2);
    assert_eq!(bank.payments(), 2);
    assert!(bank.repeated().is_empty());
    let parent = row(&ledger, "not-done-parent", "p1").await;
    assert_eq!((parent.status, parent.attempts), (CallStatus::Completed, 2));
    assert!(!listed(&ledger, "not-done-parent").await);
}

/// A replay-safe nested call left started under a parent that does not run
/// again is settled interrupted without asking its tool (running it again
/// would be harmless), is not in doubt, and the answer says so.
#[tokio::test]
async fn i18_1_a_replay_safe_nested_call_under_an_interrupted_parent_is_settled_not_in_doubt() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let read = ProbeTool::new("read", true, Behaviour::BlockOnce(started.clone()))
        .with_spec(|s| s.replay(ToolReplay::Safe));
    let batch = Batch::calling("read", ToolReplay::Never, None);
    let tools = || -> Vec<Arc<dyn Tool>> { vec![batch.clone(), read.clone()] };
    let model = vec![batch_turn(&["ann"]), ChatResponse::text("unreachable")];
    let first = harness(model, ledger.clone(), tools());
    crash_when(&first, "safe-orphan", &started).await;
    let second = harness(vec![ChatResponse::text("told")], ledger.clone(), tools());
    let (run, _) = recover(&second, "safe-orphan").await;
    let (answer, _) = call_answer(&run.messages, "p1").unwrap();
    assert!(
        answer.contains("its nested calls: p1/1 (read): not run again (replay-safe)"),
        "{answer}"
    );
    let nested = row(&ledger, "safe-orphan", "p1/1").await;
    assert_eq!(nested.status, CallStatus::Interrupted);
    assert!(!nested.is_unresolved());
    assert_eq!(read.calls.load(Ordering::SeqCst), 1, "not run again");
    assert_eq!(in_doubt(&ledger, "safe-orphan").await, ["p1"]);
}

/// Every answer of a nested call's reconciliation, met again under a
/// replay-safe parent that runs again: `NotDone` runs it once now; `Unknown`,
/// an error, a panic and a timeout answer the parent's nested call
/// "interrupted, outcome unknown" (naming the cause) and leave it in doubt.
#[tokio::test]
async fn i18_2_every_reconciliation_answer_of_a_nested_call_under_a_rerun_parent() {
    let cases = [
        (Answer::Lookup, Stall::BeforePaying, None),
        (Answer::Unknown, Stall::AfterPaying, Some("could not tell")),
        (
            Answer::Fail,
            Stall::AfterPaying,
            Some("failed: the bank's API answered 503"),
        ),
        (
            Answer::Panic,
            Stall::AfterPaying,
            Some("panicked: the bank's client panicked"),
        ),
        (
            Answer::Hang,
            Stall::AfterPaying,
            Some("did not answer within 200 ms"),
        ),
    ];
    for (answer, stall, cause) in cases {
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
        let bank = Bank::new();
        let pay = Pay::new(&bank, answer, stall);
        let batch = Batch::new(ToolReplay::Safe, None);
        let model = vec![batch_turn(&["ann"]), ChatResponse::text("unreachable")];
        let first = harness(model, ledger.clone(), tools(&batch, &pay));
        crash_when(&first, "nested-answers", &pay.stalled()).await;
        let second = harness(
            vec![ChatResponse::text("told")],
            ledger.clone(),
            tools(&batch, &pay),
        );
        let (run, _) = recover(&second, "nested-answers").await;
        let (said, _) = call_answer(&run.messages, "p1").unwrap();
        let nested = row(&ledger, "nested-answers", "p1/1").await;
        assert_eq!(bank.payments(), 1, "{cause:?}: paid once");
        match cause {
            None => {
                assert_eq!(said, "paid ann", "not done, so it ran once now");
                assert_eq!((nested.status, nested.attempts), (CallStatus::Completed, 2));
                assert_eq!(nested.resolution.unwrap().effect, Effect::NotHappened);
                assert!(in_doubt(&ledger, "nested-answers").await.is_empty());
            }
            Some(cause) => {
                assert!(
                    said.starts_with("refused:")
                        && said.contains("interrupted, outcome unknown")
                        && said.contains(cause),
                    "{cause}: {said}"
                );
                assert_eq!(nested.status, CallStatus::Interrupted, "{cause}");
                assert!(nested.is_unresolved(), "{cause}");
                assert_eq!(
                    in_doubt(&ledger, "nested-answers").await,
                    ["p1/1"],
                    "{cause}"
                );
                assert_eq!(
                    pay.calls.load(Ordering::SeqCst),
                    1,
                    "{cause}: never repeated"
                );
            }
        }
    }
}
