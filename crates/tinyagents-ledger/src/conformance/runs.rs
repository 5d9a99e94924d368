//! Run claims, run states and incremental checkpoints.

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};

use super::{fresh_run, ok, started};
use crate::{EffectLedger, LedgerError, Outcome, RunState, Timestamp};

fn assert_run_exists(result: Result<(), LedgerError>, run: &RunId, what: &str) {
    match result {
        Err(LedgerError::RunExists { run: named }) => assert_eq!(&named, run, "{what}"),
        other => panic!("{what}: expected RunExists, got {other:?}"),
    }
}

/// A fresh id is claimed once: the run is then open, a second claim is
/// refused, and a claim alone is not an unfinished run (nothing to recover)
/// until the run records a row.
pub async fn begin_run_claims_a_fresh_id_once(ledger: &dyn EffectLedger) {
    let run = fresh_run("claim");
    ok(ledger.begin_run(&run).await, "begin_run");
    assert_eq!(
        ok(ledger.run_state(&run).await, "run_state"),
        RunState::Open
    );
    assert_run_exists(ledger.begin_run(&run).await, &run, "a second claim");
    assert!(!ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
    ok(
        ledger
            .record_started(started(&run, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started in a claimed run",
    );
    assert!(ok(ledger.unfinished_runs().await, "unfinished_runs").contains(&run));
}

/// An id with rows, with only a checkpoint, or with only a finished mark
/// cannot be claimed, and the refusal leaves its state as it was.
pub async fn begin_run_refuses_an_id_with_records(ledger: &dyn EffectLedger) {
    let with_row = fresh_run("claim-row");
    ok(
        ledger
            .record_started(started(&with_row, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started",
    );
    let with_checkpoint = fresh_run("claim-checkpoint");
    ok(
        ledger.save_checkpoint(&with_checkpoint, 1, vec![1]).await,
        "save",
    );
    let finished = fresh_run("claim-finished");
    ok(
        ledger.mark_run_finished(&finished).await,
        "mark_run_finished",
    );
    for (run, state, what) in [
        (&with_row, RunState::Open, "a run with a row"),
        (&with_checkpoint, RunState::Open, "a run with a checkpoint"),
        (&finished, RunState::Finished, "a finished run"),
    ] {
        assert_run_exists(ledger.begin_run(run).await, run, what);
        assert_eq!(
            ok(ledger.run_state(run).await, "run_state"),
            state,
            "{what}"
        );
    }
    assert_eq!(ok(ledger.rows(&with_row).await, "rows").len(), 1);
}

/// `run_state` is `Unknown` before anything is recorded, `Open` with a
/// claim, rows or a checkpoint, and `Finished` once marked.
pub async fn run_state_follows_a_run_from_unknown_to_finished(ledger: &dyn EffectLedger) {
    let state = |run: RunId| async move { ok(ledger.run_state(&run).await, "run_state") };
    let run = fresh_run("state");
    assert_eq!(state(run.clone()).await, RunState::Unknown);
    ok(ledger.begin_run(&run).await, "begin_run");
    assert_eq!(state(run.clone()).await, RunState::Open);
    ok(
        ledger
            .record_started(started(&run, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started",
    );
    assert_eq!(state(run.clone()).await, RunState::Open);
    ok(ledger.mark_run_finished(&run).await, "mark_run_finished");
    assert_eq!(state(run).await, RunState::Finished);

    let rows_only = fresh_run("state-rows");
    ok(
        ledger
            .record_started(started(&rows_only, "p1", "t", ToolReplay::Safe))
            .await,
        "record_started",
    );
    assert_eq!(state(rows_only).await, RunState::Open);
    let checkpoint_only = fresh_run("state-checkpoint");
    ok(
        ledger
            .save_checkpoint(&checkpoint_only, 0, Vec::new())
            .await,
        "save",
    );
    assert_eq!(state(checkpoint_only).await, RunState::Open);
    let finished_only = fresh_run("state-finished");
    ok(
        ledger.mark_run_finished(&finished_only).await,
        "mark_run_finished",
    );
    assert_eq!(state(finished_only).await, RunState::Finished);
}

/// An entry appends only to a base: without one it is refused with
/// `NoCheckpoint` and nothing is recorded.
pub async fn append_checkpoint_needs_a_base(ledger: &dyn EffectLedger) {
    let run = fresh_run("append-no-base");
    match ledger.append_checkpoint(&run, 1, b"turn".to_vec()).await {
        Err(LedgerError::NoCheckpoint { run: named }) => assert_eq!(named, run),
        other => panic!("an append without a base must be refused, got {other:?}"),
    }
    assert!(ok(ledger.load_checkpoint(&run).await, "load").is_none());
    assert_eq!(
        ok(ledger.run_state(&run).await, "run_state"),
        RunState::Unknown
    );
}

/// A base and three appended entries load back as the base and the entries
/// in order, at the last entry's version (an equal version may repeat).
pub async fn appended_entries_load_back_after_the_base_in_order(ledger: &dyn EffectLedger) {
    let run = fresh_run("append");
    ok(
        ledger.save_checkpoint(&run, 1, b"base".to_vec()).await,
        "save",
    );
    for (version, entry) in [(2, "one"), (3, "two"), (3, "three")] {
        ok(
            ledger
                .append_checkpoint(&run, version, entry.as_bytes().to_vec())
                .await,
            "append",
        );
    }
    let loaded = ok(ledger.load_checkpoint(&run).await, "load").expect("a checkpoint");
    assert_eq!(loaded.run_id, run);
    assert_eq!(loaded.version, 3);
    assert_eq!(loaded.data, b"base");
    assert_eq!(
        loaded.appended,
        [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
}

/// Versions are checked against the last write, base or entry: an append or
/// a base older than the last entry is `StaleCheckpoint` and changes nothing.
pub async fn stale_checkpoint_writes_are_refused_against_the_last_entry(ledger: &dyn EffectLedger) {
    let run = fresh_run("append-stale");
    ok(
        ledger.save_checkpoint(&run, 1, b"base".to_vec()).await,
        "save",
    );
    ok(
        ledger.append_checkpoint(&run, 3, b"one".to_vec()).await,
        "append",
    );
    let before = ok(ledger.load_checkpoint(&run).await, "load");
    let stale_append = ledger.append_checkpoint(&run, 2, b"old".to_vec()).await;
    let stale_base = ledger.save_checkpoint(&run, 2, b"old base".to_vec()).await;
    for (what, result) in [("append", stale_append), ("save", stale_base)] {
        match result {
            Err(LedgerError::StaleCheckpoint {
                stored: 3,
                offered: 2,
                ..
            }) => {}
            other => panic!("a stale {what} must be refused, got {other:?}"),
        }
    }
    assert_eq!(ok(ledger.load_checkpoint(&run).await, "load"), before);
}

/// `save_checkpoint` replaces the base and drops every appended entry
/// (compaction); later appends follow the new base.
pub async fn save_checkpoint_compacts_the_appended_entries(ledger: &dyn EffectLedger) {
    let run = fresh_run("compact");
    ok(
        ledger.save_checkpoint(&run, 1, b"base".to_vec()).await,
        "save",
    );
    for version in [2, 3] {
        ok(
            ledger.append_checkpoint(&run, version, vec![0; 3]).await,
            "append",
        );
    }
    ok(
        ledger.save_checkpoint(&run, 4, b"compacted".to_vec()).await,
        "compact",
    );
    let compacted = ok(ledger.load_checkpoint(&run).await, "load").expect("a checkpoint");
    assert_eq!(
        (compacted.version, compacted.data.as_slice()),
        (4, &b"compacted"[..])
    );
    assert!(compacted.appended.is_empty(), "entries survived compaction");
    ok(
        ledger.append_checkpoint(&run, 5, b"next".to_vec()).await,
        "append",
    );
    let next = ok(ledger.load_checkpoint(&run).await, "load").expect("a checkpoint");
    assert_eq!((next.version, next.appended), (5, vec![b"next".to_vec()]));
}

/// Pruning a finished run removes its appended entries and its claim (the
/// id is unknown again and can be claimed), and leaves an unfinished run's
/// entries alone.
pub async fn prune_removes_appended_entries_and_claims(ledger: &dyn EffectLedger) {
    let done = fresh_run("prune-entries-done");
    let live = fresh_run("prune-entries-live");
    for run in [&done, &live] {
        ok(ledger.begin_run(run).await, "begin_run");
        ok(
            ledger
                .record_started(started(run, "p1", "t", ToolReplay::Safe))
                .await,
            "record_started",
        );
        ok(
            ledger.save_checkpoint(run, 1, b"base".to_vec()).await,
            "save",
        );
        ok(
            ledger.append_checkpoint(run, 2, b"e".to_vec()).await,
            "append",
        );
    }
    let outcome = Outcome::Completed(ToolResult::text("ok"));
    ok(
        ledger
            .record_settled(&done, &CallId::new("p1"), &outcome)
            .await,
        "record_settled",
    );
    ok(ledger.mark_run_finished(&done).await, "mark_run_finished");
    ok(ledger.prune_finished(Timestamp::MAX).await, "prune");
    assert!(ok(ledger.load_checkpoint(&done).await, "load").is_none());
    assert!(ok(ledger.rows(&done).await, "rows").is_empty());
    assert_eq!(
        ok(ledger.run_state(&done).await, "run_state"),
        RunState::Unknown
    );
    // A new base without appends: no entry of the pruned run comes back.
    ok(
        ledger.save_checkpoint(&done, 0, b"new".to_vec()).await,
        "save",
    );
    let fresh = ok(ledger.load_checkpoint(&done).await, "load").expect("a checkpoint");
    assert!(fresh.appended.is_empty(), "a pruned entry came back");
    let kept = ok(ledger.load_checkpoint(&live).await, "load").expect("a checkpoint");
    assert_eq!(kept.appended, [b"e".to_vec()]);
    assert_eq!(
        ok(ledger.run_state(&live).await, "run_state"),
        RunState::Open
    );
}

/// A pruned run's claim is gone: its id can be claimed again.
pub async fn a_pruned_run_id_can_be_claimed_again(ledger: &dyn EffectLedger) {
    let run = fresh_run("prune-claim");
    ok(ledger.begin_run(&run).await, "begin_run");
    ok(ledger.mark_run_finished(&run).await, "mark_run_finished");
    assert_run_exists(ledger.begin_run(&run).await, &run, "a finished run");
    ok(ledger.prune_finished(Timestamp::MAX).await, "prune");
    ok(ledger.begin_run(&run).await, "begin_run after the prune");
    assert_eq!(
        ok(ledger.run_state(&run).await, "run_state"),
        RunState::Open
    );
}
