//! The restart table of `docs/effect-ledger.md`, held case by case: every
//! state a call's row can be in (or none), offered again with the same
//! identity, another tool or other arguments, in an open and in a finished
//! run. Plus deferred rows.

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};

use super::{fresh_run, ok};
use crate::{CallStatus, EffectLedger, LedgerError, LedgerRow, Outcome, StartedRow, args_hash};

/// The state of the call's row before it is offered again.
#[derive(Debug, Clone, Copy)]
enum Prior {
    /// No row.
    NoRow,
    /// Started and settled with this status.
    Settled(CallStatus, ToolReplay),
    /// Started and deferred.
    Deferred(ToolReplay),
    /// Started and never settled (in doubt).
    Started(ToolReplay),
}

/// What the offered start names.
#[derive(Debug, Clone, Copy)]
enum Offer {
    Same,
    OtherTool,
    OtherArgs,
}

/// What the offered start must do.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A new row, one attempt.
    Inserted,
    /// The existing row started again: one more attempt.
    Restarted,
    Mismatch,
    AlreadySettled,
    RunFinished,
    ReplayRefused,
}

use Expect::{AlreadySettled, Inserted, Mismatch, ReplayRefused, Restarted, RunFinished};

/// The table: for each prior state, what a start does with the same
/// identity in an open run, the same identity in a finished run, another
/// tool or other arguments in an open run, and in a finished run.
const TABLE: &[(Prior, [Expect; 4])] = &[
    (Prior::NoRow, [Inserted, RunFinished, Inserted, RunFinished]),
    (
        Prior::Settled(CallStatus::Completed, ToolReplay::Safe),
        [AlreadySettled, AlreadySettled, Mismatch, Mismatch],
    ),
    (
        Prior::Settled(CallStatus::Failed, ToolReplay::Never),
        [AlreadySettled, AlreadySettled, Mismatch, Mismatch],
    ),
    (
        Prior::Settled(CallStatus::Interrupted, ToolReplay::Never),
        [AlreadySettled, AlreadySettled, Mismatch, Mismatch],
    ),
    (
        Prior::Deferred(ToolReplay::Safe),
        [Restarted, RunFinished, Mismatch, Mismatch],
    ),
    (
        Prior::Deferred(ToolReplay::Never),
        [Restarted, RunFinished, Mismatch, Mismatch],
    ),
    (
        Prior::Started(ToolReplay::Safe),
        [Restarted, RunFinished, Mismatch, Mismatch],
    ),
    (
        Prior::Started(ToolReplay::Never),
        [ReplayRefused, RunFinished, Mismatch, Mismatch],
    ),
];

fn call_row(run: &RunId, replay: ToolReplay) -> StartedRow {
    StartedRow::new(
        run.clone(),
        CallId::new("p1"),
        "pay",
        args_hash(&json!({"amount": 5})),
        replay,
    )
}

/// Builds the prior state in a fresh run; returns the row as first offered.
async fn prepare(ledger: &dyn EffectLedger, prior: Prior, finished: bool) -> StartedRow {
    let run = fresh_run("restart-table");
    let (replay, outcome) = match prior {
        Prior::NoRow => (ToolReplay::Safe, None),
        Prior::Settled(status, replay) => {
            let outcome = match status {
                CallStatus::Completed => Outcome::Completed(ToolResult::text("paid")),
                CallStatus::Failed => Outcome::Failed("declined".into()),
                _ => Outcome::Interrupted("interrupted, outcome unknown".into()),
            };
            (replay, Some(outcome))
        }
        Prior::Deferred(replay) => (replay, Some(Outcome::Deferred("needs approval".into()))),
        Prior::Started(replay) => (replay, None),
    };
    let row = call_row(&run, replay);
    if !matches!(prior, Prior::NoRow) {
        ok(ledger.record_started(row.clone()).await, "record_started");
    }
    if let Some(outcome) = outcome {
        ok(
            ledger.record_settled(&run, &row.call_id, &outcome).await,
            "record_settled",
        );
    }
    if finished {
        ok(ledger.mark_run_finished(&run).await, "mark_run_finished");
    }
    row
}

fn offered(row: &StartedRow, offer: Offer) -> StartedRow {
    let mut offered = row.clone();
    match offer {
        Offer::Same => {}
        Offer::OtherTool => offered.tool_name = "refund".into(),
        Offer::OtherArgs => offered.args_hash = args_hash(&json!({"amount": 6})),
    }
    offered
}

/// Every backend follows the whole restart table: identity first (another
/// tool or other arguments is `Mismatch` whatever the row's state and the
/// run's), then settled rows (`AlreadySettled`), then the finished run
/// (`RunFinished`), then deferred rows (restart, any replay class) and rows
/// in doubt (`ReplayRefused` for `Never`, restart for `Safe`). A refused
/// start counts no attempt and changes nothing.
pub async fn every_start_follows_the_restart_table(ledger: &dyn EffectLedger) {
    for &(prior, expects) in TABLE {
        let cases = [
            (Offer::Same, false, expects[0]),
            (Offer::Same, true, expects[1]),
            (Offer::OtherTool, false, expects[2]),
            (Offer::OtherArgs, false, expects[2]),
            (Offer::OtherTool, true, expects[3]),
            (Offer::OtherArgs, true, expects[3]),
        ];
        for (offer, finished, expect) in cases {
            let case = format!("{prior:?}, offered {offer:?}, run finished: {finished}");
            let row = prepare(ledger, prior, finished).await;
            check_case(ledger, &row, &offered(&row, offer), expect, &case).await;
        }
    }
}

async fn check_case(
    ledger: &dyn EffectLedger,
    row: &StartedRow,
    offer: &StartedRow,
    expect: Expect,
    case: &str,
) {
    let run = &row.run_id;
    let before = ok(ledger.get(run, &row.call_id).await, "get");
    let rows_before = ok(ledger.rows(run).await, "rows");
    let result = ledger.record_started(offer.clone()).await;
    let after = ok(ledger.get(run, &row.call_id).await, "get");
    match (expect, result) {
        (Inserted, Ok(())) => {
            let after = after.unwrap_or_else(|| panic!("{case}: no row was written"));
            assert_eq!(
                (after.status, after.attempts),
                (CallStatus::Started, 1),
                "{case}"
            );
            assert_eq!(after.tool_name, offer.tool_name, "{case}");
            return;
        }
        (Restarted, Ok(())) => {
            let before = before.unwrap_or_else(|| panic!("{case}: no row before"));
            let after = after.unwrap_or_else(|| panic!("{case}: the row vanished"));
            assert_restarted(&before, &after, case);
            let open = ok(ledger.unresolved(run).await, "unresolved");
            assert!(
                open.iter().any(|r| r.call_id == row.call_id),
                "{case}: a restarted call is in doubt"
            );
            return;
        }
        (
            Mismatch,
            Err(LedgerError::Mismatch {
                recorded, offered, ..
            }),
        ) => {
            assert_eq!(recorded.tool_name, row.tool_name, "{case}");
            assert_eq!(recorded.args_hash, row.args_hash, "{case}");
            assert_eq!(offered.tool_name, offer.tool_name, "{case}");
            assert_eq!(offered.args_hash, offer.args_hash, "{case}");
        }
        (AlreadySettled, Err(LedgerError::AlreadySettled { status, .. })) => {
            let recorded = before.as_ref().map(|r| r.status);
            assert_eq!(Some(status), recorded, "{case}: the status named");
        }
        (RunFinished, Err(LedgerError::RunFinished { run: named })) => {
            assert_eq!(&named, run, "{case}");
        }
        (ReplayRefused, Err(LedgerError::ReplayRefused { tool, .. })) => {
            assert_eq!(tool, row.tool_name, "{case}");
        }
        (expect, got) => panic!("{case}: expected {expect:?}, got {got:?}"),
    }
    assert_eq!(after, before, "{case}: a refused start changed the row");
    assert_eq!(
        ok(ledger.rows(run).await, "rows"),
        rows_before,
        "{case}: a refused start changed the run's rows"
    );
}

fn assert_restarted(before: &LedgerRow, after: &LedgerRow, case: &str) {
    assert_eq!(after.status, CallStatus::Started, "{case}");
    assert_eq!(
        after.attempts,
        before.attempts + 1,
        "{case}: one more attempt"
    );
    assert_eq!(after.attempts, 2, "{case}");
    assert_eq!(after.settled_at, None, "{case}: settled time cleared");
    assert_eq!(after.result, None, "{case}: result cleared");
    assert_eq!(
        (&after.tool_name, &after.args_hash),
        (&before.tool_name, &before.args_hash),
        "{case}"
    );
}

/// The offered replay class counts as much as the row's: a replay-safe
/// row in doubt offered as `Never` is refused; a deferred replay-safe row
/// offered as `Never` starts again.
pub async fn a_never_offer_is_refused_on_a_row_in_doubt_but_not_on_a_deferred_one(
    ledger: &dyn EffectLedger,
) {
    let in_doubt = prepare(ledger, Prior::Started(ToolReplay::Safe), false).await;
    let mut never = in_doubt.clone();
    never.replay = ToolReplay::Never;
    check_case(
        ledger,
        &in_doubt,
        &never,
        ReplayRefused,
        "a Safe row in doubt offered as Never",
    )
    .await;
    let deferred = prepare(ledger, Prior::Deferred(ToolReplay::Safe), false).await;
    let mut never = deferred.clone();
    never.replay = ToolReplay::Never;
    check_case(
        ledger,
        &deferred,
        &never,
        Restarted,
        "a deferred Safe row offered as Never",
    )
    .await;
}

/// A deferred row keeps its reason as its result, is not in doubt (not in
/// `unresolved`), keeps its run unfinished, and refuses every settle until
/// it starts again.
pub async fn deferred_rows_are_not_in_doubt_and_refuse_a_settle(ledger: &dyn EffectLedger) {
    let row = prepare(ledger, Prior::Deferred(ToolReplay::Never), false).await;
    let run = &row.run_id;
    let deferred = ok(ledger.get(run, &row.call_id).await, "get").expect("the deferred row");
    assert_eq!(deferred.status, CallStatus::Deferred);
    assert!(!deferred.is_in_doubt());
    assert!(deferred.settled_at.is_some(), "a deferred row has a time");
    let reason = deferred.result.clone().expect("the reason");
    assert_eq!(reason.content, "needs approval");
    assert!(!reason.is_error, "a reason is not an error result");
    assert!(ok(ledger.unresolved(run).await, "unresolved").is_empty());
    assert!(ok(ledger.unfinished_runs().await, "unfinished_runs").contains(run));
    for outcome in [
        Outcome::Deferred("again".into()),
        Outcome::Completed(ToolResult::text("paid")),
        Outcome::Failed("declined".into()),
    ] {
        match ledger.record_settled(run, &row.call_id, &outcome).await {
            Err(LedgerError::CallDeferred { run: r, call }) => {
                assert_eq!((&r, &call), (run, &row.call_id));
            }
            other => panic!("settling a deferred row ({outcome:?}) must fail, got {other:?}"),
        }
    }
    let after = ok(ledger.get(run, &row.call_id).await, "get");
    assert_eq!(
        after.as_ref(),
        Some(&deferred),
        "a refused settle changed it"
    );
}

/// A deferred `Never` call starts again once (it never acted), settles, and
/// is then settled for good.
pub async fn a_deferred_never_call_runs_once_after_it_starts_again(ledger: &dyn EffectLedger) {
    let row = prepare(ledger, Prior::Deferred(ToolReplay::Never), false).await;
    let run = &row.run_id;
    ok(ledger.record_started(row.clone()).await, "restart");
    let paid = Outcome::Completed(ToolResult::text("paid"));
    ok(
        ledger.record_settled(run, &row.call_id, &paid).await,
        "settle after the restart",
    );
    let done = ok(ledger.get(run, &row.call_id).await, "get").expect("row");
    assert_eq!((done.status, done.attempts), (CallStatus::Completed, 2));
    assert_eq!(done.result.expect("result").content, "paid");
    assert!(matches!(
        ledger.record_started(row.clone()).await,
        Err(LedgerError::AlreadySettled {
            status: CallStatus::Completed,
            ..
        })
    ));
}
