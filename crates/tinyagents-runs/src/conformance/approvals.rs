//! Suspensions, decisions and the approval history.

use serde_json::json;
use tinyagents_core::{CallId, RunId, Usage, args_hash};
use tinyagents_harness::SuspendedRun;

use super::{LONG, hold, new_run, suspended_state};
use crate::{Decision, Ending, RecordStatus, RunEvent, RunStore, RunStoreError};

/// A run held by "w" that has suspended on `calls` (pay p1, then refund
/// p2); returns its id and state.
async fn suspended(store: &dyn RunStore, agent: &str) -> (RunId, SuspendedRun) {
    let run = new_run(agent, "settle the invoices");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("w", LONG))).await.unwrap();
    let state = suspended_state(
        &id,
        &[
            ("p1", "pay", json!({"to": "acme", "amount": 120})),
            ("p2", "refund", json!({"order": 42})),
        ],
    );
    let ending = Ending::Suspended {
        state: Box::new(state.clone()),
        usage: Usage::new(10, 2),
    };
    assert!(store.end(&id, 1, &ending).await.unwrap());
    (id, state)
}

/// A suspension records the run's state (read back as it was) and each
/// waiting call with the binding the state gives it; the inbox lists them.
pub async fn a_suspension_records_its_waiting_calls_and_its_state(store: &dyn RunStore) {
    let (id, state) = suspended(store, "approver").await;
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::AwaitingApproval);
    assert_eq!(record.suspension, 1);
    assert_eq!(record.suspended.as_ref(), Some(&state));
    assert!(record.holder.is_none(), "nobody holds a waiting run");
    assert_eq!(record.usage.total(), 12);
    let calls = store.approvals(&id).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].call_id.as_str(), "p1");
    assert_eq!(calls[0].tool, "pay");
    assert_eq!(calls[0].agent, "approver");
    assert_eq!(calls[0].reason, "pay needs a person's approval");
    assert_eq!(calls[0].arguments, json!({"to": "acme", "amount": 120}));
    assert_eq!(
        calls[0].args_hash,
        args_hash(&json!({"to": "acme", "amount": 120}))
    );
    assert_eq!(calls[1].call_id.as_str(), "p2");
    assert!(
        calls
            .iter()
            .all(|c| c.suspension == 1 && c.decision.is_none())
    );
    let inbox = store.waiting(10_000).await.unwrap();
    let ours: Vec<_> = inbox.iter().filter(|c| c.run_id == id).collect();
    assert_eq!(ours.len(), 2, "{inbox:?}");
    let history = store.history(&id).await.unwrap();
    assert!(history.iter().any(|h| h.event
        == RunEvent::Suspended {
            suspension: 1,
            calls: vec![CallId::new("p1"), CallId::new("p2")],
        }));
}

/// One call is decided, then the other: the run waits until both are,
/// then is queued to be resumed; each decision keeps who, when and why.
pub async fn some_calls_are_decided_then_the_rest_and_the_run_is_queued_to_resume(
    store: &dyn RunStore,
) {
    let (id, _) = suspended(store, "approver").await;
    let first = store
        .decide(
            &id,
            "alice",
            &[Decision::approve("p1").because("known payee")],
        )
        .await
        .unwrap();
    assert_eq!(first.decided.len(), 1);
    assert!(!first.is_complete());
    assert_eq!(first.undecided.len(), 1);
    assert_eq!(first.undecided[0].call_id.as_str(), "p2");
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RecordStatus::AwaitingApproval,
        "p2 still waits"
    );
    let inbox: Vec<_> = store
        .waiting(10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.run_id == id)
        .collect();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].call_id.as_str(), "p2");

    let second = store
        .decide(&id, "bob", &[Decision::deny("p2", "not this month")])
        .await
        .unwrap();
    assert!(second.is_complete());
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Queued);
    assert!(record.is_decided(), "queued to be resumed");
    let calls = store.approvals(&id).await.unwrap();
    let p1 = calls[0].decision.as_ref().unwrap();
    assert!(p1.approved);
    assert_eq!(
        (p1.by.as_str(), p1.reason.as_deref()),
        ("alice", Some("known payee"))
    );
    let p2 = calls[1].decision.as_ref().unwrap();
    assert!(!p2.approved);
    assert_eq!(
        (p2.by.as_str(), p2.reason.as_deref()),
        ("bob", Some("not this month"))
    );
    assert!(p1.at <= p2.at);
    let history = store.history(&id).await.unwrap();
    let decided: Vec<_> = history
        .iter()
        .filter(|h| matches!(h.event, RunEvent::Decided { .. }))
        .map(|h| h.by.as_str())
        .collect();
    assert_eq!(decided, ["alice", "bob"]);
}

/// A decision names a waiting, undecided call, once: anything else refuses
/// the whole step and records nothing of it.
pub async fn a_decision_is_made_once_on_a_waiting_call_or_nothing_is_recorded(
    store: &dyn RunStore,
) {
    let (id, _) = suspended(store, "approver").await;
    let stranger = store
        .decide(
            &id,
            "eve",
            &[Decision::approve("p1"), Decision::approve("p9")],
        )
        .await
        .unwrap_err();
    match &stranger {
        RunStoreError::NotWaiting { call, waiting, .. } => {
            assert_eq!(call.as_str(), "p9");
            assert_eq!(waiting, &[CallId::new("p1"), CallId::new("p2")]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        store
            .approvals(&id)
            .await
            .unwrap()
            .iter()
            .all(|c| c.decision.is_none()),
        "a refused step records nothing"
    );
    let twice = store
        .decide(
            &id,
            "eve",
            &[Decision::approve("p1"), Decision::deny("p1", "no")],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(twice, RunStoreError::AlreadyDecided { .. }),
        "{twice:?}"
    );
    store
        .decide(&id, "alice", &[Decision::approve("p1")])
        .await
        .unwrap();
    let again = store
        .decide(&id, "eve", &[Decision::deny("p1", "changed my mind")])
        .await
        .unwrap_err();
    match &again {
        RunStoreError::AlreadyDecided { verdict, by, .. } => {
            assert_eq!((*verdict, by.as_str()), ("approved", "alice"));
        }
        other => panic!("{other:?}"),
    }
    store
        .decide(&id, "alice", &[Decision::approve("p2")])
        .await
        .unwrap();
    let late = store
        .decide(&id, "alice", &[Decision::approve("p2")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            late,
            RunStoreError::WrongStatus {
                status: RecordStatus::Queued,
                ..
            }
        ),
        "{late:?}"
    );
}

/// Two people deciding the same call at once: one decision is recorded,
/// the other refused.
pub async fn racing_deciders_decide_a_call_once(store: &dyn RunStore) {
    let (id, _) = suspended(store, "approver").await;
    let (yes, no) = ([Decision::approve("p1")], [Decision::deny("p1", "no")]);
    let (a, b) = tokio::join!(
        store.decide(&id, "alice", &yes),
        store.decide(&id, "bob", &no),
    );
    assert_eq!(
        [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "{a:?} {b:?}"
    );
    let calls = store.approvals(&id).await.unwrap();
    let made = calls[0].decision.as_ref().unwrap();
    assert_eq!(made.by, if a.is_ok() { "alice" } else { "bob" });
}

/// The first claim after the last decision takes the state to resume it
/// with the decisions, bound as the harness binds them; a later claim (the
/// resume was cut short) gets no state, and the same decisions, to recover.
pub async fn the_claim_that_resumes_takes_the_state_and_a_later_one_recovers(store: &dyn RunStore) {
    let (id, state) = suspended(store, "approver").await;
    store
        .decide(
            &id,
            "alice",
            &[Decision::approve("p1"), Decision::deny("p2", "no refunds")],
        )
        .await
        .unwrap();
    let seen = store.get(&id).await.unwrap().unwrap().epoch;
    let claim = store.claim(&id, seen, &hold("w2", LONG)).await.unwrap();
    assert_eq!(claim.resume.as_ref(), Some(&state));
    assert!(!claim.takeover);
    let pending: Vec<_> = state.pending().collect();
    assert_eq!(
        claim.decisions,
        [pending[0].approve(), pending[1].deny("no refunds")],
        "the harness's own binding"
    );
    assert!(claim.record.suspended.is_none(), "taken by the resume");
    let history = store.history(&id).await.unwrap();
    assert!(matches!(
        &history.last().unwrap().event,
        RunEvent::Claimed { segment, .. } if segment == "resume"
    ));
    // The resume's process dies: the next claim recovers with the same
    // decisions, and has no state to resume again.
    let later = store
        .claim(&id, claim.epoch, &hold("w3", LONG))
        .await
        .unwrap();
    assert!(later.resume.is_none());
    assert!(later.takeover);
    assert_eq!(later.decisions, claim.decisions);
}

/// A run that suspends again starts a second suspension; the first stays
/// in the approval history with its decisions.
pub async fn a_second_suspension_keeps_the_first_in_the_approval_history(store: &dyn RunStore) {
    let (id, _) = suspended(store, "approver").await;
    store
        .decide(
            &id,
            "alice",
            &[Decision::approve("p1"), Decision::approve("p2")],
        )
        .await
        .unwrap();
    let claim = store.claim(&id, 1, &hold("w", LONG)).await.unwrap();
    let next = suspended_state(&id, &[("p3", "pay", json!({"to": "beta", "amount": 5}))]);
    let ending = Ending::Suspended {
        state: Box::new(next.clone()),
        usage: Usage::default(),
    };
    assert!(store.end(&id, claim.epoch, &ending).await.unwrap());
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.suspension, 2);
    assert_eq!(record.suspended.as_ref(), Some(&next));
    let calls = store.approvals(&id).await.unwrap();
    let shape: Vec<_> = calls
        .iter()
        .map(|c| (c.suspension, c.call_id.as_str(), c.decision.is_some()))
        .collect();
    assert_eq!(shape, [(1, "p1", true), (1, "p2", true), (2, "p3", false)]);
    let inbox: Vec<_> = store
        .waiting(10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.run_id == id)
        .map(|c| c.call_id)
        .collect();
    assert_eq!(inbox, [CallId::new("p3")], "only the last suspension waits");
    let unknown = store
        .decide(&id, "alice", &[Decision::approve("p1")])
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, RunStoreError::NotWaiting { .. }),
        "a decision of an earlier suspension does not carry over: {unknown:?}"
    );
}
