//! Journals: a run's events, kept in order under the holder's epoch.

use std::future::Future;

use tinyagents_core::{AgentEvent, CallId, RunId, RunStatus, Usage};
use tinyagents_ledger::Timestamp;

use super::{Edit, LONG, hold, new_run};
use crate::{Journal, RunStore, SharedRunStore};

fn events(run: &RunId, n: usize) -> Vec<AgentEvent> {
    let mut out = vec![AgentEvent::RunStarted {
        run_id: run.clone(),
        agent_id: None,
    }];
    for i in 1..n {
        out.push(AgentEvent::ToolStarted {
            call_id: CallId::new(format!("p{i}")),
            parent_call_id: None,
            name: "pay".to_owned(),
            arguments: Some(serde_json::json!({"amount": i, "memo": "nul\u{0} kept"})),
        });
    }
    out
}

/// Appended events read back in order, with their times, paged by `after`
/// and `limit`; one run's journal holds none of another's.
pub async fn a_journal_keeps_the_holders_events_in_order_and_pages(store: &dyn RunStore) {
    let run = new_run("journal", "go");
    let id = run.run_id.clone();
    let other = new_run("journal", "go too");
    store.create(run, Some(&hold("j", LONG))).await.unwrap();
    store
        .create(other.clone(), Some(&hold("j", LONG)))
        .await
        .unwrap();
    let at = Timestamp::from_millis(1_796_000_000_000);
    let sent: Vec<(Timestamp, AgentEvent)> = events(&id, 5).into_iter().map(|e| (at, e)).collect();
    assert!(store.append_journal(&id, 1, &sent[..2]).await.unwrap());
    assert!(
        store
            .append_journal(
                &other.run_id,
                1,
                &[(at, AgentEvent::ModelStarted { turn: 1 })]
            )
            .await
            .unwrap()
    );
    assert!(store.append_journal(&id, 1, &sent[2..]).await.unwrap());
    let all = store.journal(&id, 0, 100).await.unwrap();
    let read: Vec<AgentEvent> = all.iter().map(|e| e.event.clone().unwrap()).collect();
    let expected: Vec<AgentEvent> = sent.iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(read, expected, "in order, only this run's, NUL kept");
    assert!(all.iter().all(|e| e.at == at));
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    let page = store.journal(&id, all[1].seq, 2).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [all[2].seq, all[3].seq],
        "after and limit page it"
    );
    assert!(store.journal(&id, all[4].seq, 10).await.unwrap().is_empty());
    assert!(
        store
            .journal(&super::fresh_run("none"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A holder whose run another claim took adds nothing to its journal; the
/// new holder does. A `Journal` that lost its run keeps nothing more.
pub async fn a_holder_that_lost_its_run_adds_nothing_to_the_journal(store: SharedRunStore) {
    let run = new_run("journal-fence", "go");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("old", LONG))).await.unwrap();
    let taken = store.claim(&id, 1, &hold("new", LONG)).await.unwrap();
    assert_eq!(taken.epoch, 2);
    let mut stale = Journal::new(store.clone(), id.clone(), 1);
    stale.record(&AgentEvent::ModelStarted { turn: 9 });
    stale.flush().await.unwrap();
    stale.record(&AgentEvent::ModelStarted { turn: 10 });
    stale.flush().await.unwrap();
    assert!(store.journal(&id, 0, 10).await.unwrap().is_empty());
    let mut held = Journal::new(store.clone(), id.clone(), 2);
    held.record(&AgentEvent::ModelDelta {
        turn: 1,
        delta: tinyagents_core::ModelDelta::Text {
            text: "streamed".into(),
        },
    });
    held.record(&AgentEvent::RunCompleted {
        status: RunStatus::Completed,
        usage: Usage::default(),
        spent: tinyagents_core::Spent::default(),
    });
    held.flush().await.unwrap();
    let kept = store.journal(&id, 0, 10).await.unwrap();
    assert_eq!(kept.len(), 1, "streamed deltas are not journaled: {kept:?}");
    assert!(matches!(kept[0].event, Ok(AgentEvent::RunCompleted { .. })));
}

/// An entry edited into something that is not an event reads back as
/// unreadable, naming its place, with the entries around it intact.
pub async fn an_unreadable_journal_entry_reads_back_as_such<F, Fut>(store: &dyn RunStore, edit: F)
where
    F: Fn(Edit) -> Fut,
    Fut: Future<Output = ()>,
{
    let run = new_run("journal-junk", "go");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("j", LONG))).await.unwrap();
    let sent: Vec<_> = events(&id, 3)
        .into_iter()
        .map(|e| (Timestamp::now(), e))
        .collect();
    assert!(store.append_journal(&id, 1, &sent).await.unwrap());
    edit(Edit::Journal(
        id.clone(),
        r#"{"type":"no_such_event"}"#.into(),
    ))
    .await;
    let read = store.journal(&id, 0, 10).await.unwrap();
    assert_eq!(read.len(), 3);
    let error = read[0].event.clone().unwrap_err();
    assert!(
        error.contains(&format!("journal entry {}", read[0].seq)),
        "{error}"
    );
    assert!(read[1].event.is_ok() && read[2].event.is_ok());
}
