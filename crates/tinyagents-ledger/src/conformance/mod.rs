//! The conformance suite every [`EffectLedger`] backend passes (feature
//! `conformance`). Each check panics with a message naming what broke.
//!
//! The restart table of `docs/effect-ledger.md` (and deferred rows) is in
//! [`restart`]; run claims, run states and incremental checkpoints in
//! [`runs`]; calls in doubt (`resolve`, `in_doubt`, what keeps a run
//! unfinished and unpruned) in [`doubt`].
//!
//! Run [`run_all`] against a fresh ledger built with a result cut of
//! [`RESULT_LIMIT`] bytes. The checks use their own run ids (fresh per
//! call), so a backend shared with other tests still works, except that the
//! prune check prunes every finished run.

// A test suite: an unmet expectation is a panic by design.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use futures_util::future::join_all;
use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolControl, ToolReplay, ToolResult};

use crate::{
    CallStatus, EffectLedger, LedgerError, LedgerResult, Outcome, StartedRow, Timestamp, args_hash,
};

pub mod doubt;
pub mod restart;
pub mod runs;

pub use doubt::{
    in_doubt_lists_every_unresolved_call_across_runs,
    resolve_records_once_and_refuses_calls_not_in_doubt, resolve_settles_a_call_in_doubt_as_found,
    unresolved_calls_keep_a_finished_run_listed_and_unpruned,
};
pub use restart::{
    a_deferred_never_call_runs_once_after_it_starts_again,
    a_never_offer_is_refused_on_a_row_in_doubt_but_not_on_a_deferred_one,
    deferred_rows_are_not_in_doubt_and_refuse_a_settle, every_start_follows_the_restart_table,
};
pub use runs::{
    a_pruned_run_id_can_be_claimed_again, append_checkpoint_needs_a_base,
    appended_entries_load_back_after_the_base_in_order, begin_run_claims_a_fresh_id_once,
    begin_run_refuses_an_id_with_records, prune_removes_appended_entries_and_claims,
    run_state_follows_a_run_from_unknown_to_finished,
    save_checkpoint_compacts_the_appended_entries,
    stale_checkpoint_writes_are_refused_against_the_last_entry,
};

/// The result cut the suite expects the ledger under test to use.
pub const RESULT_LIMIT: usize = 100;

/// Runs every check, in order.
pub async fn run_all(ledger: &dyn EffectLedger) {
    started_then_settled(ledger).await;
    unresolved_lists_calls_in_doubt_in_start_order(ledger).await;
    get_reads_one_row(ledger).await;
    parent_ids_are_kept(ledger).await;
    checkpoints_round_trip(ledger).await;
    prune_removes_finished_runs_only(ledger).await;
    results_are_cut_at_the_limit(ledger).await;
    failed_and_interrupted_outcomes_settle(ledger).await;
    a_call_settles_once_and_only_after_it_started(ledger).await;
    finished_runs_refuse_starts(ledger).await;
    concurrent_starts_are_all_recorded(ledger).await;
    odd_ids_round_trip(ledger).await;
    every_start_follows_the_restart_table(ledger).await;
    a_never_offer_is_refused_on_a_row_in_doubt_but_not_on_a_deferred_one(ledger).await;
    deferred_rows_are_not_in_doubt_and_refuse_a_settle(ledger).await;
    a_deferred_never_call_runs_once_after_it_starts_again(ledger).await;
    begin_run_claims_a_fresh_id_once(ledger).await;
    begin_run_refuses_an_id_with_records(ledger).await;
    run_state_follows_a_run_from_unknown_to_finished(ledger).await;
    append_checkpoint_needs_a_base(ledger).await;
    appended_entries_load_back_after_the_base_in_order(ledger).await;
    stale_checkpoint_writes_are_refused_against_the_last_entry(ledger).await;
    save_checkpoint_compacts_the_appended_entries(ledger).await;
    prune_removes_appended_entries_and_claims(ledger).await;
    a_pruned_run_id_can_be_claimed_again(ledger).await;
    resolve_settles_a_call_in_doubt_as_found(ledger).await;
    resolve_records_once_and_refuses_calls_not_in_doubt(ledger).await;
    unresolved_calls_keep_a_finished_run_listed_and_unpruned(ledger).await;
    in_doubt_lists_every_unresolved_call_across_runs(ledger).await;
}

pub(crate) fn ok<T>(result: LedgerResult<T>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(err) => panic!("{what}: unexpected ledger error: {err}"),
    }
}

pub(crate) fn fresh_run(check: &str) -> RunId {
    RunId::from(format!("conformance-{check}-{}", RunId::generate()))
}

pub(crate) fn started(run: &RunId, call: &str, tool: &str, replay: ToolReplay) -> StartedRow {
    StartedRow::new(
        run.clone(),
        CallId::new(call),
        tool,
        args_hash(&json!({"call": call})),
        replay,
    )
}

/// A started row reads back as started; once settled, as completed with its
/// result, and it is no longer unresolved.
pub async fn started_then_settled(ledger: &dyn EffectLedger) {
    let run = fresh_run("settle");
    let row = started(&run, "p1", "search", ToolReplay::Safe);
    ok(ledger.record_started(row.clone()).await, "record_started");
    let read = ok(ledger.get(&run, &row.call_id).await, "get").expect("the started row");
    assert_eq!(read.status, CallStatus::Started);
    assert_eq!(read.tool_name, "search");
    assert_eq!(read.args_hash, row.args_hash);
    assert_eq!(read.replay, ToolReplay::Safe);
    assert_eq!(read.attempts, 1);
    assert_eq!(read.parent_call_id, None);
    assert!(read.is_in_doubt());
    assert_eq!(read.settled_at, None);
    assert_eq!(read.result, None);

    let result = ToolResult::text("found 3")
        .with_metadata(json!({"hits": 3}))
        .with_control(ToolControl::ReturnDirect);
    let outcome = Outcome::Completed(result.clone());
    ok(
        ledger.record_settled(&run, &row.call_id, &outcome).await,
        "record_settled",
    );
    let read = ok(ledger.get(&run, &row.call_id).await, "get").expect("the settled row");
    assert_eq!(read.status, CallStatus::Completed);
    let settled_at = read.settled_at.expect("a settled time");
    assert!(settled_at >= read.started_at, "settled before it started");
    let stored = read.result.expect("a stored result");
    assert!(!stored.truncated);
    assert_eq!(stored.to_tool_result(), result);
    assert!(ok(ledger.unresolved(&run).await, "unresolved").is_empty());
    assert_eq!(ok(ledger.rows(&run).await, "rows").len(), 1);
}

/// Only started, unsettled rows of the run are listed, in start order (not
/// id order), and other runs' rows are not.
pub async fn unresolved_lists_calls_in_doubt_in_start_order(ledger: &dyn EffectLedger) {
    let run = fresh_run("unresolved");
    let other = fresh_run("unresolved-other");
    for call in ["p2", "p10", "p1", "p3"] {
        ok(
            ledger
                .record_started(started(&run, call, "t", ToolReplay::Never))
                .await,
            "record_started",
        );
    }
    ok(
        ledger
            .record_started(started(&other, "p1", "t", ToolReplay::Never))
            .await,
        "record_started",
    );
    let done = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger.record_settled(&run, &CallId::new("p1"), &done).await,
        "record_settled",
    );
    let ids: Vec<String> = ok(ledger.unresolved(&run).await, "unresolved")
        .into_iter()
        .map(|row| row.call_id.as_str().to_owned())
        .collect();
    assert_eq!(ids, ["p2", "p10", "p3"]);
    let all: Vec<String> = ok(ledger.rows(&run).await, "rows")
        .into_iter()
        .map(|row| row.call_id.as_str().to_owned())
        .collect();
    assert_eq!(all, ["p2", "p10", "p1", "p3"]);
    assert!(ok(ledger.unresolved(&fresh_run("none")).await, "unresolved").is_empty());
}

/// `get` finds one row, and `None` for an unknown run or call.
pub async fn get_reads_one_row(ledger: &dyn EffectLedger) {
    let run = fresh_run("get");
    ok(
        ledger
            .record_started(started(&run, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started",
    );
    assert!(ok(ledger.get(&run, &CallId::new("p1")).await, "get").is_some());
    assert!(ok(ledger.get(&run, &CallId::new("p2")).await, "get").is_none());
    assert!(
        ok(
            ledger.get(&fresh_run("nope"), &CallId::new("p1")).await,
            "get"
        )
        .is_none()
    );
}

/// Nested calls keep their immediate parent.
pub async fn parent_ids_are_kept(ledger: &dyn EffectLedger) {
    let run = fresh_run("parents");
    for call in ["p1", "p1/1", "p1/1/1", "p1/2"] {
        ok(
            ledger
                .record_started(started(&run, call, "t", ToolReplay::Safe))
                .await,
            "record_started",
        );
    }
    let parents: Vec<(String, Option<String>)> = ok(ledger.rows(&run).await, "rows")
        .into_iter()
        .map(|row| {
            let parent = row.parent_call_id.map(|p| p.as_str().to_owned());
            (row.call_id.as_str().to_owned(), parent)
        })
        .collect();
    let expected = [
        ("p1", None),
        ("p1/1", Some("p1")),
        ("p1/1/1", Some("p1/1")),
        ("p1/2", Some("p1")),
    ];
    assert_eq!(parents.len(), expected.len());
    for ((call, parent), (want_call, want_parent)) in parents.iter().zip(expected) {
        assert_eq!(call, want_call);
        assert_eq!(parent.as_deref(), want_parent, "parent of {call}");
    }
}

/// A checkpoint reads back as saved; a newer version replaces it, an equal
/// one too, an older one is refused; runs do not share checkpoints.
pub async fn checkpoints_round_trip(ledger: &dyn EffectLedger) {
    let run = fresh_run("checkpoint");
    assert!(ok(ledger.load_checkpoint(&run).await, "load").is_none());
    ok(
        ledger.save_checkpoint(&run, 1, b"turn one".to_vec()).await,
        "save",
    );
    let first = ok(ledger.load_checkpoint(&run).await, "load").expect("a checkpoint");
    assert_eq!(
        (first.version, first.data.as_slice()),
        (1, &b"turn one"[..])
    );
    assert_eq!(first.run_id, run);
    assert!(first.appended.is_empty(), "a base alone has no entries");
    let bytes: Vec<u8> = (0..=255).collect();
    ok(ledger.save_checkpoint(&run, 2, bytes.clone()).await, "save");
    ok(
        ledger.save_checkpoint(&run, 2, bytes.clone()).await,
        "save equal version",
    );
    let second = ok(ledger.load_checkpoint(&run).await, "load").expect("a checkpoint");
    assert_eq!((second.version, second.data), (2, bytes));
    match ledger.save_checkpoint(&run, 1, b"stale".to_vec()).await {
        Err(LedgerError::StaleCheckpoint {
            stored: 2,
            offered: 1,
            ..
        }) => {}
        other => panic!("an older checkpoint must be refused, got {other:?}"),
    }
    assert!(ok(ledger.load_checkpoint(&fresh_run("other")).await, "load").is_none());
}

/// Pruning removes the rows and checkpoint of finished runs at or before
/// the cut-off, and never touches an unfinished run.
pub async fn prune_removes_finished_runs_only(ledger: &dyn EffectLedger) {
    let done = fresh_run("prune-done");
    let live = fresh_run("prune-live");
    for run in [&done, &live] {
        ok(
            ledger
                .record_started(started(run, "p1", "t", ToolReplay::Safe))
                .await,
            "record_started",
        );
        ok(
            ledger
                .record_started(started(run, "p2", "t", ToolReplay::Safe))
                .await,
            "record_started",
        );
        ok(ledger.save_checkpoint(run, 1, vec![1]).await, "save");
    }
    // A finished run whose calls all settled (one in doubt would keep it).
    for call in ["p1", "p2"] {
        let outcome = Outcome::Completed(ToolResult::text("ok"));
        ok(
            ledger
                .record_settled(&done, &CallId::new(call), &outcome)
                .await,
            "record_settled",
        );
    }
    ok(ledger.mark_run_finished(&done).await, "mark_run_finished");
    ok(
        ledger.mark_run_finished(&done).await,
        "mark_run_finished twice",
    );
    let none = ok(ledger.prune_finished(Timestamp::EPOCH).await, "prune");
    assert_eq!(none.runs, 0, "nothing finished at the epoch");
    assert_eq!(ok(ledger.rows(&done).await, "rows").len(), 2);

    let report = ok(ledger.prune_finished(Timestamp::MAX).await, "prune");
    assert!(report.runs >= 1 && report.rows >= 2 && report.checkpoints >= 1);
    assert!(ok(ledger.rows(&done).await, "rows").is_empty());
    assert!(ok(ledger.load_checkpoint(&done).await, "load").is_none());
    assert_eq!(ok(ledger.rows(&live).await, "rows").len(), 2);
    assert!(ok(ledger.load_checkpoint(&live).await, "load").is_some());
    let unfinished = ok(ledger.unfinished_runs().await, "unfinished_runs");
    assert!(unfinished.contains(&live) && !unfinished.contains(&done));
}

/// The stored content is cut at the limit on a character boundary, and
/// metadata larger than the limit is dropped; both are flagged.
pub async fn results_are_cut_at_the_limit(ledger: &dyn EffectLedger) {
    let limit = ledger.max_result_bytes();
    let run = fresh_run("cut");
    let content = format!("a{}", "é".repeat(limit));
    let cases = [
        ("p1", ToolResult::text(content.clone()), true),
        (
            "p2",
            ToolResult::text("small").with_metadata(json!({"blob": "x".repeat(limit)})),
            true,
        ),
        (
            "p3",
            ToolResult::error("small").with_metadata(json!({"n": 1})),
            false,
        ),
    ];
    for (call, result, cut) in cases {
        ok(
            ledger
                .record_started(started(&run, call, "t", ToolReplay::Safe))
                .await,
            "record_started",
        );
        let outcome = Outcome::Completed(result.clone());
        ok(
            ledger
                .record_settled(&run, &CallId::new(call), &outcome)
                .await,
            "record_settled",
        );
        let row = ok(ledger.get(&run, &CallId::new(call)).await, "get").expect("row");
        let stored = row.result.expect("stored result");
        assert_eq!(stored.truncated, cut, "{call}: truncated flag");
        assert!(
            stored.content.len() <= limit,
            "{call}: content over the limit"
        );
        assert!(
            result.content.starts_with(&stored.content),
            "{call}: not a prefix"
        );
        assert_eq!(stored.original_bytes, result.content.len() as u64);
        assert_eq!(stored.is_error, result.is_error);
        if call == "p1" {
            assert!(
                stored.content.len() + 2 > limit,
                "cut more than one character short"
            );
        }
        if call == "p2" {
            assert_eq!(stored.metadata, None, "oversized metadata kept");
            assert_eq!(stored.content, "small");
        }
        if call == "p3" {
            assert_eq!(stored.to_tool_result(), result);
        }
    }
}

/// A failed call and one resolved by recovery settle with their text as an
/// error result.
pub async fn failed_and_interrupted_outcomes_settle(ledger: &dyn EffectLedger) {
    let run = fresh_run("outcomes");
    let cases = [
        (
            "p1",
            Outcome::Failed("timed out".into()),
            CallStatus::Failed,
        ),
        (
            "p2",
            Outcome::Interrupted("interrupted, outcome unknown".into()),
            CallStatus::Interrupted,
        ),
    ];
    for (call, outcome, status) in cases {
        ok(
            ledger
                .record_started(started(&run, call, "pay", ToolReplay::Never))
                .await,
            "record_started",
        );
        ok(
            ledger
                .record_settled(&run, &CallId::new(call), &outcome)
                .await,
            "record_settled",
        );
        let row = ok(ledger.get(&run, &CallId::new(call)).await, "get").expect("row");
        assert_eq!(row.status, status);
        let stored = row.result.expect("stored result");
        assert!(stored.is_error);
        let text = match &outcome {
            Outcome::Failed(text) | Outcome::Interrupted(text) | Outcome::Deferred(text) => {
                text.clone()
            }
            Outcome::Completed(result) => result.content.clone(),
        };
        assert_eq!(stored.content, text);
    }
    // The failed call is settled; the interrupted `Never` call's effect is
    // still unknown, so it stays unresolved until someone resolves it.
    let unresolved: Vec<String> = ok(ledger.unresolved(&run).await, "unresolved")
        .iter()
        .map(|row| row.call_id.to_string())
        .collect();
    assert_eq!(unresolved, ["p2"]);
}

/// A call settles exactly once, and only after it started: a second settle
/// is `AlreadySettled` and keeps the first result, a call with no row is
/// `NotStarted`. (Starts are held to the restart table in [`restart`].)
pub async fn a_call_settles_once_and_only_after_it_started(ledger: &dyn EffectLedger) {
    let run = fresh_run("settle-once");
    let safe = started(&run, "p1", "read", ToolReplay::Safe);
    ok(ledger.record_started(safe.clone()).await, "record_started");
    let done = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger.record_settled(&run, &safe.call_id, &done).await,
        "record_settled",
    );
    let again = Outcome::Failed("late".into());
    assert!(matches!(
        ledger.record_settled(&run, &safe.call_id, &again).await,
        Err(LedgerError::AlreadySettled {
            status: CallStatus::Completed,
            ..
        })
    ));
    assert!(matches!(
        ledger.record_settled(&run, &CallId::new("p9"), &done).await,
        Err(LedgerError::NotStarted { .. })
    ));
    assert!(ok(ledger.get(&run, &CallId::new("p9")).await, "get").is_none());
    let row = ok(ledger.get(&run, &safe.call_id).await, "get").expect("row");
    assert_eq!(
        row.result.expect("result").content,
        "ok",
        "first settle kept"
    );
}

/// A finished run refuses new starts and, once no call of it is in doubt,
/// is not listed as unfinished; a run with only a checkpoint is.
pub async fn finished_runs_refuse_starts(ledger: &dyn EffectLedger) {
    let run = fresh_run("finished");
    ok(
        ledger
            .record_started(started(&run, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started",
    );
    assert!(ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
    ok(ledger.mark_run_finished(&run).await, "mark_run_finished");
    assert!(matches!(
        ledger
            .record_started(started(&run, "p2", "t", ToolReplay::Safe))
            .await,
        Err(LedgerError::RunFinished { .. })
    ));
    // Its call in doubt keeps it listed until the call is settled.
    assert!(ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
    let outcome = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger
            .record_settled(&run, &CallId::new("p1"), &outcome)
            .await,
        "record_settled",
    );
    assert!(!ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
    let parked = fresh_run("checkpoint-only");
    ok(ledger.save_checkpoint(&parked, 0, Vec::new()).await, "save");
    assert!(ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&parked));
    let empty = ok(ledger.load_checkpoint(&parked).await, "load").expect("checkpoint");
    assert!(empty.data.is_empty());
}

/// Many calls starting at once (many runs, one task) are all acknowledged
/// and all recorded.
pub async fn concurrent_starts_are_all_recorded(ledger: &dyn EffectLedger) {
    let runs: Vec<RunId> = (0..16)
        .map(|i| fresh_run(&format!("concurrent{i}")))
        .collect();
    let mut starts = Vec::new();
    for run in &runs {
        for k in 1..=8 {
            starts.push(ledger.record_started(started(
                run,
                &format!("p{k}"),
                "t",
                ToolReplay::Safe,
            )));
        }
    }
    for result in join_all(starts).await {
        ok(result, "concurrent record_started");
    }
    let done = Outcome::Completed(ToolResult::text("ok"));
    let odd: Vec<(&RunId, CallId)> = runs
        .iter()
        .flat_map(|run| {
            (1..=8)
                .step_by(2)
                .map(move |k| (run, CallId::new(format!("p{k}"))))
        })
        .collect();
    let settles: Vec<_> = odd
        .iter()
        .map(|(run, call)| ledger.record_settled(run, call, &done))
        .collect();
    for result in join_all(settles).await {
        ok(result, "concurrent record_settled");
    }
    for run in &runs {
        assert_eq!(ok(ledger.rows(run).await, "rows").len(), 8);
        let open: Vec<String> = ok(ledger.unresolved(run).await, "unresolved")
            .into_iter()
            .map(|row| row.call_id.as_str().to_owned())
            .collect();
        assert_eq!(open, ["p2", "p4", "p6", "p8"]);
    }
}

/// Ids and names with quotes, slashes, spaces and non-ASCII text round-trip.
pub async fn odd_ids_round_trip(ledger: &dyn EffectLedger) {
    let run = RunId::from(format!("run 'quoted' \"x\" é/∑ {}", RunId::generate()));
    let row = StartedRow::new(
        run.clone(),
        CallId::new("p1/2"),
        "tool; DROP TABLE calls;--",
        args_hash(&json!({"q": "ü"})),
        ToolReplay::Safe,
    );
    ok(ledger.record_started(row.clone()).await, "record_started");
    let read = ok(ledger.get(&run, &row.call_id).await, "get").expect("row");
    assert_eq!(read.run_id, run);
    assert_eq!(read.tool_name, row.tool_name);
    assert_eq!(read.parent_call_id, Some(CallId::new("p1")));
    assert_eq!(ok(ledger.unresolved(&run).await, "unresolved").len(), 1);
}
