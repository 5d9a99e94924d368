//! A model-issued call in doubt after a crash: its tool's reconciliation
//! decides how recovery answers it (issue 18, "Reconciliation").

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinyagents::ledger::{Effect, ResolvedBy};
use tinyagents::prelude::*;
use tinyagents::{ledger::CallStatus, ledger::EffectLedger, ledger::MemoryLedger};
use tinyagents_tests::{assert_transcript_paired, call_answer};

use super::bank::{Answer, Bank, Pay, Stall, crash_when, harness, harness_redacting};
use super::{in_doubt, listed, pay_turn, recover, row};

#[tokio::test]
async fn i18_2_done_answers_a_call_in_doubt_with_the_result_its_tool_found() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let model = vec![pay_turn("ann"), ChatResponse::text("unreachable")];
    let first = harness(model, ledger.clone(), vec![pay.clone()]);
    crash_when(&first, "done", &pay.stalled()).await;
    assert_eq!(
        in_doubt(&ledger, "done").await,
        ["p1"],
        "in doubt after the crash"
    );

    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        vec![pay.clone()],
    );
    let (run, events) = recover(&second, "done").await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_transcript_paired(&run.messages);
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("paid (found by its key)".to_owned(), false)),
        "answered with what the reconciliation found"
    );
    assert_eq!(pay.calls.load(Ordering::SeqCst), 1, "not paid again");
    assert_eq!(pay.asked.load(Ordering::SeqCst), 1);
    assert_eq!(bank.payments(), 1);
    let paid = row(&ledger, "done", "p1").await;
    assert_eq!(paid.status, CallStatus::Completed);
    assert_eq!(paid.result.unwrap().content, "paid (found by its key)");
    let resolution = paid
        .resolution
        .expect("the decision is recorded on the row");
    assert_eq!(
        (resolution.effect, resolution.by),
        (Effect::Happened, ResolvedBy::Reconcile)
    );
    assert!(
        resolution
            .note
            .unwrap()
            .contains("found that the effect happened"),
        "its source is named"
    );
    assert!(in_doubt(&ledger, "done").await.is_empty());
    assert!(!listed(&ledger, "done").await, "finished, nothing in doubt");
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::Warning { message } if message.starts_with("call p1 (pay) was in doubt after a crash"))));
}

#[tokio::test]
async fn i18_2_not_done_lets_the_call_run_once_now() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::BeforePaying);
    let model = vec![pay_turn("ann"), ChatResponse::text("unreachable")];
    let first = harness(model, ledger.clone(), vec![pay.clone()]);
    crash_when(&first, "not-done", &pay.stalled()).await;
    assert_eq!(bank.payments(), 0, "it died before paying");

    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        vec![pay.clone()],
    );
    let (run, _) = recover(&second, "not-done").await;
    assert_eq!(
        call_answer(&run.messages, "p1"),
        Some(("paid ann".to_owned(), false))
    );
    assert_eq!(bank.payments(), 1, "paid once, now");
    assert!(bank.repeated().is_empty());
    let paid = row(&ledger, "not-done", "p1").await;
    assert_eq!((paid.status, paid.attempts), (CallStatus::Completed, 2));
    assert_eq!(
        paid.resolution.map(|r| (r.effect, r.by)),
        Some((Effect::NotHappened, ResolvedBy::Reconcile)),
        "why it ran again"
    );
    assert!(!listed(&ledger, "not-done").await);
}

/// An `Unknown` answer, an error, a panic and a timeout of the
/// reconciliation all keep today's answer, say which it was, and leave the
/// call in view.
#[tokio::test]
async fn i18_2_unknown_an_error_a_panic_and_a_timeout_keep_the_interrupted_answer() {
    let cases = [
        (Answer::Unknown, "could not tell"),
        (Answer::Fail, "failed: the bank's API answered 503"),
        (Answer::Panic, "panicked: the bank's client panicked"),
        (Answer::Hang, "did not answer within 200 ms"),
    ];
    for (answer, cause) in cases {
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
        let bank = Bank::new();
        let pay = Pay::new(&bank, answer, Stall::AfterPaying);
        let model = vec![pay_turn("ann"), ChatResponse::text("unreachable")];
        let first = harness(model, ledger.clone(), vec![pay.clone()]);
        crash_when(&first, "unknown", &pay.stalled()).await;
        let second = harness(
            vec![ChatResponse::text("told")],
            ledger.clone(),
            vec![pay.clone()],
        );
        let (run, _) = recover(&second, "unknown").await;
        assert_eq!(run.status, RunStatus::Completed, "{cause}");
        let (content, is_error) = call_answer(&run.messages, "p1").unwrap();
        assert!(is_error, "{cause}");
        assert!(
            content.starts_with("interrupted, outcome unknown") && content.contains(cause),
            "{cause}: {content}"
        );
        assert_eq!(
            pay.calls.load(Ordering::SeqCst),
            1,
            "{cause}: never repeated"
        );
        let paid = row(&ledger, "unknown", "p1").await;
        assert_eq!(paid.status, CallStatus::Interrupted, "{cause}");
        let resolution = paid.resolution.clone().expect("recorded");
        assert_eq!(
            (resolution.effect, resolution.by),
            (Effect::Unknown, ResolvedBy::Reconcile)
        );
        assert!(resolution.note.unwrap().contains(cause), "{cause}");
        assert!(paid.is_unresolved(), "{cause}");
        assert_eq!(in_doubt(&ledger, "unknown").await, ["p1"], "{cause}");
        assert!(
            listed(&ledger, "unknown").await,
            "{cause}: the run stays in view"
        );
    }
}

/// A call whose arguments held a secret that redaction kept out of the
/// checkpoint cannot run again after a crash; its tool is still asked
/// (it needs no arguments): found paid, it is answered with the result;
/// found unpaid, it is refused (it never acted, and cannot be replayed),
/// and its row says it did not act.
#[tokio::test]
async fn i18_2_a_call_that_cannot_be_replayed_is_still_reconciled() {
    const SECRET: &str = "ACCT-SECRET-0042";
    for (stall, paid) in [(Stall::AfterPaying, true), (Stall::BeforePaying, false)] {
        let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
        let bank = Bank::new();
        let pay = Pay::new(&bank, Answer::Lookup, stall);
        let model = vec![pay_turn(SECRET), ChatResponse::text("unreachable")];
        let first = harness_redacting(model, ledger.clone(), vec![pay.clone()], Some(SECRET));
        crash_when(&first, "secret", &pay.stalled()).await;
        let second = harness_redacting(
            vec![ChatResponse::text("told")],
            ledger.clone(),
            vec![pay.clone()],
            Some(SECRET),
        );
        let (run, _) = recover(&second, "secret").await;
        let (answer, is_error) = call_answer(&run.messages, "p1").unwrap();
        let row = row(&ledger, "secret", "p1").await;
        if paid {
            assert_eq!(
                (answer.as_str(), is_error),
                ("paid (found by its key)", false)
            );
            assert_eq!(row.status, CallStatus::Completed);
        } else {
            assert!(
                is_error
                    && answer.contains("it never acted")
                    && answer.contains("cannot be replayed"),
                "{answer}"
            );
            assert_eq!(row.status, CallStatus::Deferred, "it did not act");
        }
        assert_eq!(pay.calls.load(Ordering::SeqCst), 1, "never run again");
        assert_eq!(bank.payments(), usize::from(paid));
        assert!(in_doubt(&ledger, "secret").await.is_empty());
    }
}
