//! Records, queries, claims and ends.

use tinyagents_core::Usage;
use tinyagents_ledger::Timestamp;

use super::{LONG, fresh_run, hold, new_run};
use crate::{
    AgentsFile, Ending, NewRun, RecordStatus, RunEvent, RunQuery, RunStore, RunStoreError,
};

/// A queued run reads back with what it runs; its id is taken once.
pub async fn create_records_a_run_once_with_what_it_runs(store: &dyn RunStore) {
    let run = new_run("billing", "refund order 42").with_session("s-1");
    let claim = store.create(run.clone(), None).await.unwrap();
    assert_eq!(claim.epoch, 0, "a queued run is held by nobody");
    let record = store.get(&run.run_id).await.unwrap().expect("recorded");
    assert_eq!(record.agent, "billing");
    assert_eq!(record.file, run.file);
    assert_eq!(record.session.as_deref(), Some("s-1"));
    assert_eq!(record.request.input, "refund order 42");
    assert_eq!(record.status, RecordStatus::Queued);
    assert_eq!((record.epoch, record.suspension), (0, 0));
    assert!(record.holder.is_none() && record.started_at.is_none());
    assert!(record.suspended.is_none());
    let again = store.create(run.clone(), None).await.unwrap_err();
    assert!(
        matches!(&again, RunStoreError::Exists { run: r } if *r == run.run_id),
        "{again:?}"
    );
    let history = store.history(&run.run_id).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        history[0].event,
        RunEvent::Created {
            status: RecordStatus::Queued
        }
    );
    assert!(store.get(&fresh_run("missing")).await.unwrap().is_none());
}

/// A run created with a hold is running, held by it under epoch 1 with a
/// lease in the future; a code agent's run has no file.
pub async fn a_run_held_at_creation_is_running_under_epoch_one(store: &dyn RunStore) {
    let before = Timestamp::now();
    let mut run = new_run("coder", "write it");
    run.file = None;
    let claim = store
        .create(run.clone(), Some(&hold("cli-1", LONG)))
        .await
        .unwrap();
    assert_eq!(claim.epoch, 1);
    assert!(!claim.takeover && claim.resume.is_none() && claim.decisions.is_empty());
    let record = &claim.record;
    assert_eq!(record.status, RecordStatus::Running);
    assert_eq!(record.file, None);
    assert_eq!(record.holder.as_ref().unwrap().owner, "cli-1");
    assert_eq!(record.holder.as_ref().unwrap().pid, 4242);
    assert!(record.lease_until.unwrap() > before);
    assert!(record.started_at.unwrap() >= before);
    assert!(!record.holder_gone(Timestamp::now()), "its lease runs");
    let history = store.history(&run.run_id).await.unwrap();
    assert!(
        matches!(&history[1].event, RunEvent::Claimed { epoch: 1, segment } if segment == "start"),
        "{history:?}"
    );
    assert_eq!(history[1].by, "cli-1");
}

/// Listing selects by status and agent, oldest first, up to a limit;
/// counts count each status.
pub async fn list_and_counts_select_by_status_and_agent(store: &dyn RunStore) {
    let agent = fresh_run("lister").to_string();
    let mut ids = Vec::new();
    for (i, held) in [false, true, false].into_iter().enumerate() {
        let run = new_run(&agent, &format!("job {i}"));
        ids.push(run.run_id.clone());
        let hold = held.then(|| hold("w", LONG));
        store.create(run, hold.as_ref()).await.unwrap();
    }
    let all = store
        .list(&RunQuery::default().agent(&agent))
        .await
        .unwrap();
    let listed: Vec<_> = all.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(listed, ids, "oldest first");
    let queued = store
        .list(
            &RunQuery::default()
                .agent(&agent)
                .status(RecordStatus::Queued),
        )
        .await
        .unwrap();
    assert_eq!(queued.len(), 2);
    assert!(queued.iter().all(|r| r.status == RecordStatus::Queued));
    let either = store
        .list(
            &RunQuery::default()
                .agent(&agent)
                .status(RecordStatus::Queued)
                .status(RecordStatus::Running),
        )
        .await
        .unwrap();
    assert_eq!(either.len(), 3);
    let first = store
        .list(&RunQuery::default().agent(&agent).limit(1))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].run_id, ids[0]);
    let counts = store.counts().await.unwrap();
    let count = |status| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    assert!(count(RecordStatus::Queued) >= 2 && count(RecordStatus::Running) >= 1);
}

/// A claim names the epoch it saw: two claimers of one run never both take
/// it; a moved epoch is refused, and so is a run that waits for a person or
/// has completed.
pub async fn a_claim_takes_a_run_once_by_the_epoch_it_saw(store: &dyn RunStore) {
    let run = new_run("claims", "go");
    let id = run.run_id.clone();
    store.create(run, None).await.unwrap();
    let (a, b) = (hold("a", LONG), hold("b", LONG));
    let (first, second) = tokio::join!(store.claim(&id, 0, &a), store.claim(&id, 0, &b));
    let won = [first.is_ok(), second.is_ok()];
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "{first:?} {second:?}"
    );
    let lost = if won[0] { second } else { first }.unwrap_err();
    assert!(
        matches!(
            lost,
            RunStoreError::Taken {
                expected: 0,
                found: 1,
                ..
            }
        ),
        "{lost:?}"
    );
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.epoch, 1);
    let stale = store.claim(&id, 0, &hold("c", LONG)).await.unwrap_err();
    assert!(matches!(stale, RunStoreError::Taken { .. }), "{stale:?}");
    // Its holder gone, a takeover names epoch 1 and recovers the run.
    let taken = store.claim(&id, 1, &hold("c", LONG)).await.unwrap();
    assert_eq!(taken.epoch, 2);
    assert!(taken.takeover, "a running run is taken over");
    let ended = Ending::Ended {
        status: RecordStatus::Completed,
        final_text: "done".into(),
        usage: Usage::default(),
    };
    assert!(store.end(&id, 2, &ended).await.unwrap());
    let done = store.claim(&id, 2, &hold("d", LONG)).await.unwrap_err();
    assert!(
        matches!(
            done,
            RunStoreError::WrongStatus {
                status: RecordStatus::Completed,
                ..
            }
        ),
        "{done:?}"
    );
    let missing = store
        .claim(&fresh_run("missing"), 0, &hold("d", LONG))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, RunStoreError::NotFound { .. }),
        "{missing:?}"
    );
}

/// Only the epoch holding a run records its end; its holder is released,
/// its answer, tokens and end kept. A failed run may be taken again.
pub async fn end_writes_only_under_the_epoch_that_holds_the_run(store: &dyn RunStore) {
    let run = new_run("ender", "go");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("a", LONG))).await.unwrap();
    let ended = Ending::Ended {
        status: RecordStatus::Terminated,
        final_text: "stopped by a tool".into(),
        usage: Usage::new(30, 7),
    };
    assert!(!store.end(&id, 2, &ended).await.unwrap(), "not its epoch");
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        RecordStatus::Running,
        "a refused end changes nothing"
    );
    assert!(store.end(&id, 1, &ended).await.unwrap());
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Terminated);
    assert_eq!(record.final_text.as_deref(), Some("stopped by a tool"));
    assert_eq!(record.usage.total(), 37);
    assert!(record.ended_at.is_some() && record.holder.is_none());
    assert!(!store.end(&id, 1, &ended).await.unwrap(), "ended once");

    let failing = new_run("ender", "fail");
    let fid = failing.run_id.clone();
    store.create(failing, Some(&hold("a", LONG))).await.unwrap();
    let failed = Ending::Failed {
        error: "the model failed".into(),
    };
    assert!(store.end(&fid, 1, &failed).await.unwrap());
    let record = store.get(&fid).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Failed);
    assert_eq!(record.error.as_deref(), Some("the model failed"));
    let again = store.claim(&fid, 1, &hold("b", LONG)).await.unwrap();
    assert!(again.takeover, "a failed run is recovered, not started");
    assert_eq!(again.record.error, None, "a new segment clears the error");
    let history = store.history(&fid).await.unwrap();
    assert!(history.iter().any(|h| h.event
        == RunEvent::Ended {
            status: RecordStatus::Failed,
            error: Some("the model failed".into())
        }));
    let missing = store.end(&fresh_run("missing"), 1, &failed).await;
    assert!(
        matches!(missing, Err(RunStoreError::NotFound { .. })),
        "{missing:?}"
    );
}

/// Accepting a changed agents file records the new hash (sealed with the
/// record) and the change in the run's history; a code agent's run has no
/// file to accept.
pub async fn accept_file_changes_the_hash_and_keeps_the_change_in_history(store: &dyn RunStore) {
    let run = new_run("files", "go");
    let id = run.run_id.clone();
    let before = run.file.clone().unwrap();
    store.create(run, None).await.unwrap();
    let after = AgentsFile::new(&before.path, b"[agents.a]\nmodel = 'x'\n");
    store.accept_file(&id, &after, "ops").await.unwrap();
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.file.as_ref(), Some(&after));
    let history = store.history(&id).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.by, "ops");
    assert_eq!(
        last.event,
        RunEvent::FileAccepted {
            path: before.path.clone(),
            from: before.sha256.clone(),
            to: after.sha256.clone(),
        }
    );
    let code = NewRun {
        file: None,
        ..new_run("coder", "go")
    };
    let cid = code.run_id.clone();
    store.create(code, None).await.unwrap();
    let refused = store.accept_file(&cid, &after, "ops").await.unwrap_err();
    assert!(
        matches!(refused, RunStoreError::NoFile { .. }),
        "{refused:?}"
    );
}

/// A NUL character in a text the store keeps (an answer, an error, a
/// decision's reason and who made it) is kept as U+FFFD by every backend
/// (PostgreSQL's text cannot hold it), so the run's end is recorded and
/// seals still check out.
pub async fn texts_with_a_nul_are_kept_alike_on_every_backend(store: &dyn RunStore) {
    let run = new_run("nul", "go");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("w\0x", LONG))).await.unwrap();
    let ended = Ending::Ended {
        status: RecordStatus::Completed,
        final_text: "paid\0twice?".into(),
        usage: Usage::default(),
    };
    assert!(store.end(&id, 1, &ended).await.unwrap());
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.final_text.as_deref(), Some("paid\u{FFFD}twice?"));
    let history = store.history(&id).await.unwrap();
    assert!(history.iter().any(|h| h.by == "w\u{FFFD}x"), "{history:?}");
}
