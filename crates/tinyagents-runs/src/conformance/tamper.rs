//! Seals: a part of a run edited outside the store (in the database, by
//! hand) is refused before anything of it is used. The backend makes each
//! [`Edit`] in its own SQL.

use std::future::Future;

use serde_json::json;
use tinyagents_core::{RunId, Usage};

use super::{LONG, hold, new_run, suspended_state};
use crate::{Decision, Ending, RunStore, RunStoreError};

/// An edit made outside the store, which the backend makes with its own
/// SQL on the named run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// The record's agents file path set to this.
    FilePath(RunId, String),
    /// The record's agents file hash set to this.
    FileHash(RunId, String),
    /// The stored request's text replaced by this (valid JSON).
    Request(RunId, String),
    /// A waiting call's arguments replaced by this JSON text, and its
    /// arguments' hash by that of the new arguments.
    Arguments(RunId, String, String),
    /// A decided call's verdict flipped to approved.
    Verdict(RunId, String),
    /// One character of the sealed state's payload changed (`"amount":120`
    /// becomes `"amount":920`).
    State(RunId),
    /// The run's first journal entry's text replaced by this (not sealed:
    /// the journal is a view; an unreadable entry must read back as such).
    Journal(RunId, String),
}

/// Each edit is refused when read back: the record, a waiting call, a
/// decision, the suspended state; nothing of it is used, and the error
/// names the part.
pub async fn every_sealed_part_refuses_an_edit<F, Fut>(store: &dyn RunStore, edit: F)
where
    F: Fn(Edit) -> Fut,
    Fut: Future<Output = ()>,
{
    let tampered = |error: RunStoreError, part: &str| match error {
        RunStoreError::Tampered { what, .. } => {
            assert!(what.starts_with(part), "{what} names {part}")
        }
        other => panic!("expected a seal refusal naming {part}, got {other:?}"),
    };
    for (i, change) in ["path", "hash", "request"].into_iter().enumerate() {
        let run = new_run("tamper", "go");
        let id = run.run_id.clone();
        store.create(run, None).await.unwrap();
        edit(match i {
            0 => Edit::FilePath(id.clone(), "/tmp/evil.toml".into()),
            1 => Edit::FileHash(id.clone(), "0".repeat(64)),
            _ => Edit::Request(id.clone(), r#"{"input":"wire the money"}"#.into()),
        })
        .await;
        tampered(store.get(&id).await.unwrap_err(), "record");
        let claimed = store.claim(&id, 0, &hold("w", LONG)).await.unwrap_err();
        tampered(claimed, "record");
        assert!(
            store
                .list(&crate::RunQuery::default().agent("tamper"))
                .await
                .is_err(),
            "a listing does not skip an edited record ({change})"
        );
    }
    // A waiting call's arguments, a decision's verdict, the state.
    for part in ["arguments", "verdict", "state"] {
        let run = new_run("tamper-calls", "go");
        let id = run.run_id.clone();
        store.create(run, Some(&hold("w", LONG))).await.unwrap();
        let state = suspended_state(&id, &[("p1", "pay", json!({"to": "acme", "amount": 120}))]);
        let ending = Ending::Suspended {
            state: Box::new(state),
            usage: Usage::default(),
        };
        assert!(store.end(&id, 1, &ending).await.unwrap());
        match part {
            "arguments" => {
                let args = json!({"to": "mallory", "amount": 120});
                let text = args.to_string();
                edit(Edit::Arguments(
                    id.clone(),
                    text,
                    tinyagents_core::args_hash(&args),
                ))
                .await;
                tampered(store.approvals(&id).await.unwrap_err(), "waiting call p1");
                let refused = store
                    .decide(&id, "alice", &[Decision::approve("p1")])
                    .await
                    .unwrap_err();
                tampered(refused, "waiting call p1");
            }
            "verdict" => {
                store
                    .decide(&id, "alice", &[Decision::deny("p1", "no")])
                    .await
                    .unwrap();
                edit(Edit::Verdict(id.clone(), "p1".into())).await;
                tampered(
                    store.approvals(&id).await.unwrap_err(),
                    "decision on call p1",
                );
                let seen = store.get(&id).await.unwrap().unwrap().epoch;
                let claim = store.claim(&id, seen, &hold("w", LONG)).await.unwrap_err();
                tampered(claim, "decision on call p1");
            }
            _ => {
                edit(Edit::State(id.clone())).await;
                tampered(store.get(&id).await.unwrap_err(), "suspended state");
            }
        }
    }
}

/// A worker's claim that meets an edited run fails it (saying so in its
/// history) and takes the other runs its filter admits: one edited run
/// never keeps workers from the rest, and no later claim meets it again.
pub async fn a_workers_claim_fails_an_edited_run_and_takes_the_others<F, Fut>(
    store: &dyn RunStore,
    edit: F,
) where
    F: Fn(Edit) -> Fut,
    Fut: Future<Output = ()>,
{
    let agent = super::fresh_run("edited-queue").to_string();
    let edited = new_run(&agent, "edited");
    let good = new_run(&agent, "good");
    let (edited_id, good_id) = (edited.run_id.clone(), good.run_id.clone());
    store.create(edited, None).await.unwrap();
    store.create(good, None).await.unwrap();
    edit(Edit::FileHash(edited_id.clone(), "0".repeat(64))).await;
    let filter = crate::ClaimFilter {
        agents: vec![agent],
        file_sha256: None,
    };
    let claims = store
        .claim_next(&hold("w", LONG), 10, &filter)
        .await
        .unwrap();
    let taken: Vec<_> = claims.iter().map(|c| c.record.run_id.clone()).collect();
    assert_eq!(taken, [good_id], "the good run is taken");
    assert!(
        store
            .claim_next(&hold("w", LONG), 10, &filter)
            .await
            .unwrap()
            .is_empty(),
        "the edited run is not met again"
    );
    let history = store.history(&edited_id).await.unwrap();
    assert!(
        history.iter().any(|h| matches!(&h.event,
            crate::RunEvent::Ended { status: crate::RecordStatus::Failed, error: Some(e) }
                if e.contains("does not match its seal"))),
        "{history:?}"
    );
}
