//! A finished run whose calls are still in doubt: recovering it is refused,
//! `AgentHarness::reconcile` asks its tools again later, and a run that is
//! not finished is recovered, not reconciled. Issue 18.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tinyagents::ledger::{Effect, ResolvedBy};
use tinyagents::prelude::*;
use tinyagents::{core::RunId, ledger::EffectLedger, ledger::MemoryLedger};

use super::bank::{Answer, Bank, Pay, Stall, crash_when, harness};
use super::{in_doubt, listed, pay_turn, recover, row};

/// The bank's API was down during recovery (the reconciliation failed, the
/// call is answered "interrupted, outcome unknown"); later it is up, and
/// `reconcile` of the finished run finds the payment and records it: the
/// run drops out of view. Recovering the finished run is refused, naming
/// its call in doubt, and asks no model.
#[tokio::test]
async fn i18_2_a_finished_run_is_reconciled_later_and_not_recovered_again() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let down = Pay::new(&bank, Answer::Fail, Stall::AfterPaying);
    let model = vec![pay_turn("ann"), ChatResponse::text("unreachable")];
    let first = harness(model, ledger.clone(), vec![down.clone()]);
    crash_when(&first, "later", &down.stalled()).await;
    let second = harness(
        vec![ChatResponse::text("told")],
        ledger.clone(),
        vec![down.clone()],
    );
    recover(&second, "later").await;
    assert_eq!(in_doubt(&ledger, "later").await, ["p1"]);

    let up = Pay::new(&bank, Answer::Lookup, Stall::Never);
    let model = Arc::new(ScriptedModel::new(vec![ChatResponse::text("never asked")]));
    let mut builder = AgentHarness::builder(model.clone()).ledger(ledger.clone());
    builder.register(up.clone()).unwrap();
    let third = builder.build().unwrap();
    let run_id = RunId::from("later");
    let refused = third
        .recover(
            &run_id,
            tinyagents::harness::ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("has finished, so there is nothing to recover")
            && refused.contains("p1 (pay, interrupted)")
            && refused.contains("AgentHarness::reconcile"),
        "{refused}"
    );
    assert_eq!(model.calls(), 0);

    let reconciled = third.reconcile(&run_id).await.unwrap();
    assert_eq!(reconciled.len(), 1);
    assert_eq!(
        (
            reconciled[0].call_id.as_str(),
            reconciled[0].tool_name.as_str(),
            reconciled[0].effect
        ),
        ("p1", "pay", Effect::Happened)
    );
    assert_eq!(up.calls.load(Ordering::SeqCst), 0, "asked, never run");
    let paid = row(&ledger, "later", "p1").await;
    let resolution = paid.resolution.clone().unwrap();
    assert_eq!(
        (resolution.effect, resolution.by),
        (Effect::Happened, ResolvedBy::Reconcile)
    );
    assert!(!paid.is_unresolved());
    assert!(!listed(&ledger, "later").await, "resolved: out of view");
    assert!(
        third.reconcile(&run_id).await.unwrap().is_empty(),
        "nothing left to ask"
    );
}

/// `reconcile` is for finished runs: a run that may still go on is
/// recovered (which reconciles its calls as it meets them).
#[tokio::test]
async fn i18_reconcile_refuses_a_run_that_is_not_finished() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let bank = Bank::new();
    let pay = Pay::new(&bank, Answer::Lookup, Stall::AfterPaying);
    let model = vec![pay_turn("ann"), ChatResponse::text("unreachable")];
    let first = harness(model, ledger.clone(), vec![pay.clone()]);
    crash_when(&first, "open", &pay.stalled()).await;
    let refused = first
        .reconcile(&RunId::from("open"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("run open is not finished: recover it instead"),
        "{refused}"
    );
    assert_eq!(pay.asked.load(Ordering::SeqCst), 0);
    assert_eq!(
        in_doubt(&ledger, "open").await,
        ["p1"],
        "still in doubt, untouched"
    );
}
