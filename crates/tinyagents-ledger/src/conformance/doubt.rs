//! Conformance checks of calls in doubt: what `resolve` does in each state,
//! what keeps a run listed by `unfinished_runs` and out of reach of
//! `prune_finished`, and what `in_doubt` lists.

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};

use super::{fresh_run, ok, started};
use crate::{
    CallStatus, Effect, EffectLedger, Found, LedgerError, Outcome, Resolve, ResolvedBy, Timestamp,
};

async fn start(ledger: &dyn EffectLedger, run: &RunId, call: &str, replay: ToolReplay) {
    let row = started(run, call, "pay", replay);
    ok(ledger.record_started(row).await, "record_started");
}

/// `resolve` on a call still in doubt settles it as the finding says and
/// records who found it: `Happened` completes it with the result found,
/// `NotHappened` makes it deferred (it starts again, whatever its class, and
/// keeps the resolution), `Unknown` interrupts it and leaves it unresolved.
pub async fn resolve_settles_a_call_in_doubt_as_found(ledger: &dyn EffectLedger) {
    let run = fresh_run("resolve-started");
    for call in ["p1", "p2", "p3"] {
        start(ledger, &run, call, ToolReplay::Never).await;
    }
    let paid = ToolResult::text("paid, receipt 7");
    let happened = Resolve::by_reconcile(Found::Happened(paid.clone())).with_note("found by key");
    ok(
        ledger.resolve(&run, &CallId::new("p1"), &happened).await,
        "resolve p1",
    );
    let row = ok(ledger.get(&run, &CallId::new("p1")).await, "get").expect("p1");
    assert_eq!(row.status, CallStatus::Completed);
    assert!(!row.is_unresolved());
    assert_eq!(row.result.expect("a result").to_tool_result(), paid);
    let resolution = row.resolution.expect("a resolution");
    assert_eq!(
        (
            resolution.effect,
            &resolution.by,
            resolution.note.as_deref()
        ),
        (
            Effect::Happened,
            &ResolvedBy::Reconcile,
            Some("found by key")
        )
    );
    assert!(resolution.at >= row.started_at);

    let never = Resolve::by_person("alice", Found::NotHappened);
    ok(
        ledger.resolve(&run, &CallId::new("p2"), &never).await,
        "resolve p2",
    );
    let row = ok(ledger.get(&run, &CallId::new("p2")).await, "get").expect("p2");
    assert_eq!(row.status, CallStatus::Deferred);
    assert!(!row.is_unresolved());
    // It did not act: it may start again, once, although it is `Never`.
    start(ledger, &run, "p2", ToolReplay::Never).await;
    let row = ok(ledger.get(&run, &CallId::new("p2")).await, "get").expect("p2");
    assert_eq!((row.status, row.attempts), (CallStatus::Started, 2));
    assert_eq!(
        row.resolution.map(|r| (r.effect, r.by)),
        Some((Effect::NotHappened, ResolvedBy::Person("alice".into()))),
        "a restart keeps why the call ran again"
    );

    let unknown = Resolve::by_reconcile(Found::Unknown).with_note("the service timed out");
    ok(
        ledger.resolve(&run, &CallId::new("p3"), &unknown).await,
        "resolve p3",
    );
    let row = ok(ledger.get(&run, &CallId::new("p3")).await, "get").expect("p3");
    assert_eq!(row.status, CallStatus::Interrupted);
    let stored = row.result.clone().expect("a result");
    assert!(stored.is_error);
    assert_eq!(
        stored.content,
        "interrupted, outcome unknown: the service timed out"
    );
    assert!(row.is_unresolved(), "an unknown effect stays unresolved");
    let unresolved: Vec<String> = ok(ledger.unresolved(&run).await, "unresolved")
        .iter()
        .map(|r| r.call_id.to_string())
        .collect();
    assert_eq!(
        unresolved,
        ["p2", "p3"],
        "p2 started again, p3 still unknown"
    );
}

/// On an interrupted call a resolution is recorded and the row keeps its
/// status and result; an unknown one may be recorded again, a known one
/// only once. A call whose effect is known is not in doubt, and a call
/// without a row cannot be resolved.
pub async fn resolve_records_once_and_refuses_calls_not_in_doubt(ledger: &dyn EffectLedger) {
    let run = fresh_run("resolve-interrupted");
    start(ledger, &run, "p1", ToolReplay::Never).await;
    let interrupted = Outcome::Interrupted("interrupted, outcome unknown".into());
    ok(
        ledger
            .record_settled(&run, &CallId::new("p1"), &interrupted)
            .await,
        "record_settled",
    );
    let unknown = Resolve::by_reconcile(Found::Unknown);
    ok(
        ledger.resolve(&run, &CallId::new("p1"), &unknown).await,
        "unknown",
    );
    ok(
        ledger.resolve(&run, &CallId::new("p1"), &unknown).await,
        "unknown again",
    );
    let person = Resolve::by_person("bob", Found::Happened(ToolResult::text("paid")))
        .with_note("bank statement line 4");
    ok(
        ledger.resolve(&run, &CallId::new("p1"), &person).await,
        "happened",
    );
    let row = ok(ledger.get(&run, &CallId::new("p1")).await, "get").expect("p1");
    assert_eq!(
        row.status,
        CallStatus::Interrupted,
        "the model's answer stays"
    );
    assert_eq!(
        row.result.expect("a result").content,
        "interrupted, outcome unknown"
    );
    assert_eq!(
        row.resolution
            .as_ref()
            .map(|r| (r.effect, r.note.as_deref())),
        Some((Effect::Happened, Some("bank statement line 4")))
    );
    match ledger.resolve(&run, &CallId::new("p1"), &unknown).await {
        Err(LedgerError::AlreadyResolved { by, effect, .. }) => {
            assert_eq!(
                (by, effect),
                (ResolvedBy::Person("bob".into()), Effect::Happened)
            );
        }
        other => panic!("a second resolution of a known effect: {other:?}"),
    }

    start(ledger, &run, "p2", ToolReplay::Never).await;
    let done = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger.record_settled(&run, &CallId::new("p2"), &done).await,
        "settle p2",
    );
    start(ledger, &run, "p3", ToolReplay::Never).await;
    let deferred = Outcome::Deferred("needs approval".into());
    ok(
        ledger
            .record_settled(&run, &CallId::new("p3"), &deferred)
            .await,
        "defer p3",
    );
    for (call, status) in [("p2", CallStatus::Completed), ("p3", CallStatus::Deferred)] {
        match ledger.resolve(&run, &CallId::new(call), &unknown).await {
            Err(LedgerError::NotInDoubt { status: found, .. }) => assert_eq!(found, status),
            other => panic!("resolve of {call} ({status}): {other:?}"),
        }
    }
    assert!(matches!(
        ledger.resolve(&run, &CallId::new("p9"), &unknown).await,
        Err(LedgerError::NotStarted { .. })
    ));
}

/// A finished run that holds a call whose effect is unknown stays listed by
/// `unfinished_runs` and is never pruned, until the call is resolved; an
/// interrupted replay-safe call does not hold it (running it again is
/// harmless).
pub async fn unresolved_calls_keep_a_finished_run_listed_and_unpruned(ledger: &dyn EffectLedger) {
    let run = fresh_run("doubt-finished");
    let safe = fresh_run("doubt-safe");
    start(ledger, &run, "p1", ToolReplay::Never).await;
    let parent = Outcome::Interrupted("interrupted, outcome unknown".into());
    ok(
        ledger
            .record_settled(&run, &CallId::new("p1"), &parent)
            .await,
        "settle p1",
    );
    // Its nested call, left started by the crash.
    let mut nested = started(&run, "p1/1", "pay", ToolReplay::Never);
    nested.parent_call_id = Some(CallId::new("p1"));
    ok(ledger.record_started(nested).await, "record_started p1/1");
    ok(ledger.mark_run_finished(&run).await, "mark_run_finished");
    start(ledger, &safe, "p1", ToolReplay::Safe).await;
    ok(
        ledger
            .record_settled(&safe, &CallId::new("p1"), &parent)
            .await,
        "settle safe",
    );
    ok(
        ledger.mark_run_finished(&safe).await,
        "mark_run_finished safe",
    );

    let unfinished = ok(ledger.unfinished_runs().await, "unfinished_runs");
    assert!(
        unfinished.contains(&run),
        "a finished run with calls in doubt"
    );
    assert!(
        !unfinished.contains(&safe),
        "an interrupted replay-safe call"
    );
    let report = ok(ledger.prune_finished(Timestamp::MAX).await, "prune");
    assert!(report.kept_unresolved >= 1, "{report:?}");
    assert_eq!(
        ok(ledger.rows(&run).await, "rows").len(),
        2,
        "nothing of it pruned"
    );
    assert!(
        ok(ledger.rows(&safe).await, "rows").is_empty(),
        "the safe run is pruned"
    );

    let found = Resolve::by_person("ops", Found::NotHappened);
    ok(
        ledger.resolve(&run, &CallId::new("p1/1"), &found).await,
        "resolve p1/1",
    );
    assert!(
        ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run),
        "p1 is still unknown"
    );
    let found = Resolve::by_person("ops", Found::Happened(ToolResult::text("paid")));
    ok(
        ledger.resolve(&run, &CallId::new("p1"), &found).await,
        "resolve p1",
    );
    assert!(!ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
    ok(ledger.prune_finished(Timestamp::MAX).await, "prune");
    assert!(
        ok(ledger.rows(&run).await, "rows").is_empty(),
        "resolved, then pruned"
    );
}

/// `in_doubt` lists every call whose effect is unknown across runs, with
/// its idempotency key and whether its run is finished, and nothing else.
pub async fn in_doubt_lists_every_unresolved_call_across_runs(ledger: &dyn EffectLedger) {
    let open = fresh_run("in-doubt-open");
    let finished = fresh_run("in-doubt-finished");
    start(ledger, &open, "p1", ToolReplay::Safe).await;
    start(ledger, &open, "p2", ToolReplay::Never).await;
    let done = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger
            .record_settled(&open, &CallId::new("p2"), &done)
            .await,
        "settle",
    );
    start(ledger, &finished, "p1", ToolReplay::Never).await;
    let unknown = Outcome::Interrupted("interrupted, outcome unknown".into());
    ok(
        ledger
            .record_settled(&finished, &CallId::new("p1"), &unknown)
            .await,
        "interrupt",
    );
    ok(
        ledger.mark_run_finished(&finished).await,
        "mark_run_finished",
    );

    let listed: Vec<(String, String, bool)> = ok(ledger.in_doubt().await, "in_doubt")
        .into_iter()
        .filter(|d| d.row.run_id == open || d.row.run_id == finished)
        .map(|d| {
            assert_eq!(d.idempotency_key.run_id, d.row.run_id);
            assert_eq!(d.idempotency_key.call_id, d.row.call_id);
            assert_eq!(d.idempotency_key.args_hash, d.row.args_hash);
            (
                d.row.run_id.to_string(),
                d.row.call_id.to_string(),
                d.run_finished,
            )
        })
        .collect();
    let mut expected = vec![
        (open.to_string(), "p1".to_owned(), false),
        (finished.to_string(), "p1".to_owned(), true),
    ];
    let mut got = listed.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "listed: {listed:?}");
}
