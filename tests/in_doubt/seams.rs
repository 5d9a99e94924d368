//! Calls in doubt at the seams: a nested-of-nested call under a parent
//! that does not run again, a resumed approved call cut short by a crash
//! and resumed again, a ledger that cannot record a finding (fail closed),
//! and a found result holding a secret, with payload capture on and off.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinyagents::ledger::Effect;
use tinyagents::prelude::*;
use tinyagents::{
    core::RunId, core::ToolReplay, harness::ResumeOptions, harness::SuspendedRun,
    ledger::CallStatus, ledger::EffectLedger, ledger::LedgerError, ledger::MemoryLedger,
    middleware::HumanApprovalMiddleware, middleware::RedactionMiddleware, middleware::Redactor,
};
use tinyagents_tests::{HookedLedger, LedgerWrite, Verdict, call_answer, collector, events_text};

use super::bank::{Answer, Bank, Batch, Pay, Stall, crash_when, harness};
use super::{in_doubt, pay_turn, recover, row};

/// A parent that does not run again has its grandchildren in doubt settled
/// too, each by its own tool, and its answer lists the whole tree.
#[tokio::test]
async fn i18_1_a_nested_of_nested_call_under_an_interrupted_parent_is_settled_and_listed() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let outer = Batch::named("outer", "batch", ToolReplay::Never, None);
    let inner = Batch::new(ToolReplay::Never, None);
    let tools = || -> Vec<Arc<dyn Tool>> { vec![outer.clone(), inner.clone(), pay.clone()] };
    let model = vec![
        ScriptedModel::tool_calls([("outer", serde_json::json!({"to": ["ann"]}))]),
        ChatResponse::text("unreachable"),
    ];
    let first = harness(model, ledger.clone(), tools());
    crash_when(&first, "deep", &pay.stalled()).await;
    assert_eq!(in_doubt(&ledger, "deep").await, ["p1", "p1/1", "p1/1/1"]);
    let second = harness(vec![ChatResponse::text("told")], ledger.clone(), tools());
    let (run, _) = recover(&second, "deep").await;
    let (answer, _) = call_answer(&run.messages, "p1").unwrap();
    assert!(
        answer.contains(
            "its nested calls: p1/1 (batch): the outcome is still unknown; p1/1/1 (pay): the effect happened"
        ),
        "{answer}"
    );
    assert_eq!(
        row(&ledger, "deep", "p1/1/1").await.status,
        CallStatus::Completed
    );
    assert_eq!(
        row(&ledger, "deep", "p1/1").await.status,
        CallStatus::Interrupted
    );
    assert_eq!(in_doubt(&ledger, "deep").await, ["p1", "p1/1"]);
    assert_eq!(bank.payments(), 1);
}

fn approving(
    ledger: &Arc<dyn EffectLedger>,
    model: Vec<ChatResponse>,
    pay: &Arc<Pay>,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
        .ledger(Arc::clone(ledger))
        .middleware(Arc::new(HumanApprovalMiddleware::new().require("pay")));
    builder.register(Arc::clone(pay) as Arc<dyn Tool>).unwrap();
    builder.build().unwrap()
}

/// An approved call cut short by a crash in its resume: resuming the same
/// stored state again meets its row in doubt, and its tool's finding (paid)
/// answers it: the approval is used once, the payment made once.
#[tokio::test]
async fn i18_2_an_approved_call_cut_short_in_its_resume_is_reconciled_when_resumed_again() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let first = approving(&ledger, vec![pay_turn("ann")], &pay);
    let run = first
        .run_with(
            RunRequest::new("go").with_run_id(RunId::from("approved")),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let stored = serde_json::to_string(&run.suspended.expect("pay waits for a person")).unwrap();
    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let decisions: Vec<_> = suspended.pending().map(|p| p.approve()).collect();
    let second = approving(&ledger, vec![ChatResponse::text("unreachable")], &pay);
    let none = EventSink::none();
    let stalled = pay.stalled();
    let resumed = second.resume(suspended, &decisions, ResumeOptions::default(), &none);
    tokio::select! {
        _ = resumed => panic!("the resume was meant to die while pay ran"),
        () = stalled.notified() => {}
    }
    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let third = approving(&ledger, vec![ChatResponse::text("told")], &pay);
    let run = third
        .resume(
            suspended,
            &decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("paid (found by its key)".to_owned(), false))
    );
    assert_eq!(
        pay.calls.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    assert_eq!(bank.payments(), 1);
    assert_eq!(
        row(&ledger, "approved", "p1")
            .await
            .resolution
            .unwrap()
            .effect,
        Effect::Happened
    );
}

/// A finding that cannot be recorded runs nothing: found unpaid, the call
/// does not run (the ledger would not know why it ran again); found paid,
/// the call is still answered "interrupted, outcome unknown".
#[tokio::test]
async fn i18_2_a_finding_the_ledger_cannot_record_fails_closed() {
    for (stall, paid) in [(Stall::BeforePaying, 0), (Stall::AfterPaying, 1)] {
        let ledger: Arc<dyn EffectLedger> = Arc::new(HookedLedger::new(|write| match write {
            LedgerWrite::Resolve(_) => Verdict::Fail(LedgerError::Closed {
                detail: "disk on fire".into(),
            }),
            _ => Verdict::Pass,
        }));
        let bank = Bank::new();
        let pay = Pay::new(&bank, Answer::Lookup, stall);
        let first = harness(vec![pay_turn("ann")], ledger.clone(), vec![pay.clone()]);
        crash_when(&first, "closed", &pay.stalled()).await;
        let second = harness(
            vec![ChatResponse::text("told")],
            ledger.clone(),
            vec![pay.clone()],
        );
        let (run, _) = recover(&second, "closed").await;
        let (answer, is_error) = call_answer(&run.messages, "p1").unwrap();
        assert!(
            is_error
                && answer.starts_with("interrupted, outcome unknown")
                && answer.contains("it could not be recorded, so the call was not run"),
            "{answer}"
        );
        assert_eq!(pay.calls.load(Ordering::SeqCst), 1, "never run again");
        assert_eq!(bank.payments(), paid);
        assert_eq!(
            row(&ledger, "closed", "p1").await.status,
            CallStatus::Interrupted
        );
    }
}

/// A found result that holds a secret reaches no event and no ledger row
/// unredacted, with payload capture off and on; under capture the event
/// carries it redacted.
#[tokio::test]
async fn i18_2_a_found_result_is_redacted_in_events_and_rows_with_capture_on_and_off() {
    const SECRET: &str = "receipt-SECRET-9931";
    for capture in [PayloadCapture::default(), PayloadCapture::all()] {
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
        let bank = Bank::new();
        let pay = Pay::new(
            &bank,
            Answer::LookupSaying("paid, receipt receipt-SECRET-9931"),
            Stall::AfterPaying,
        );
        let build = |model: Vec<ChatResponse>| {
            let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
                .ledger(Arc::clone(&ledger))
                .payload_capture(capture)
                .middleware(Arc::new(RedactionMiddleware::with_redactor(
                    Redactor::new().with_secret(SECRET),
                )));
            builder.register(Arc::clone(&pay) as Arc<dyn Tool>).unwrap();
            builder.build().unwrap()
        };
        let first = build(vec![pay_turn("ann")]);
        crash_when(&first, "receipt", &pay.stalled()).await;
        let second = build(vec![ChatResponse::text("told")]);
        let (sink, collected) = collector();
        second
            .recover(&RunId::from("receipt"), ResumeOptions::default(), &sink)
            .await
            .unwrap();
        drop(sink);
        let events = collected.await.unwrap();
        let text = events_text(&events);
        assert!(!text.contains(SECRET), "{capture:?}: {text}");
        let completed = events.iter().any(|e| matches!(e,
            AgentEvent::ToolCompleted { result: Some(result), .. } if result.contains("paid, receipt")));
        assert_eq!(
            completed, capture.tool_io,
            "{capture:?}: the result rides only under capture"
        );
        let stored = row(&ledger, "receipt", "p1").await;
        let content = stored.result.unwrap().content;
        assert!(
            content.starts_with("paid, receipt") && !content.contains(SECRET),
            "{content}"
        );
    }
}
