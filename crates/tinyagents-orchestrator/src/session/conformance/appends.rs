//! Appends: what they add, what they keep, and when they are refused.

use tinyagents_core::Message;

use super::{assert_conflict, assert_gone, child, create, fresh, join_all, ok, stored, top};
use crate::session::{SessionError, SessionRecord, SessionStamp, SessionStore};

/// Appends bump the revision by one each, add their messages after the
/// stored ones in order, return the stamp `stamp` then reports, and leave
/// the parent, agent and conversation name as saved.
pub async fn an_append_adds_messages_in_order_and_keeps_the_other_fields(store: &dyn SessionStore) {
    let what = "an append";
    let parent = fresh("append-parent");
    create(store, &top(parent.clone(), vec![]), what).await;
    let saved = create(store, &child(&parent, "researcher", "findings"), what).await;
    let id = saved.id.clone();
    let batches = [
        vec![
            Message::user("next question"),
            Message::assistant("next answer"),
        ],
        vec![Message::user("third question")],
        vec![Message::assistant("third answer")],
    ];
    let mut expected = saved.messages.clone();
    for (k, batch) in batches.iter().enumerate() {
        let base = 1 + k as u64;
        let stamp = ok(store.append(&id, base, batch).await, what);
        assert_eq!(
            stamp.revision,
            base + 1,
            "{what} based on revision {base} made revision {}",
            stamp.revision
        );
        assert_eq!(
            ok(store.stamp(&id).await, what),
            Some(stamp),
            "{what}: `stamp` does not report the stamp the append returned"
        );
        expected.extend(batch.iter().cloned());
    }
    let loaded = stored(store, &id, what).await;
    assert_eq!(
        loaded,
        SessionRecord {
            messages: expected,
            revision: 4,
            ..saved
        },
        "{what}: the messages must follow the stored ones in order, the other fields kept"
    );
}

/// An append based on a revision that is not the stored one (older,
/// newer, or 0 while the session is stored) is [`SessionError::Conflict`] with the revision found, and
/// writes nothing: the conversation, revision and stamp stay.
pub async fn stale_appends_conflict_and_write_nothing(store: &dyn SessionStore) {
    let what = "a stale append";
    let id = fresh("stale-append");
    create(store, &top(id.clone(), vec![Message::user("q")]), what).await;
    ok(store.append(&id, 1, &[Message::assistant("a")]).await, what);
    let before = stored(store, &id, what).await;
    let stamp = ok(store.stamp(&id).await, what);
    let lost = [Message::user("lost")];
    assert_conflict(store.append(&id, 1, &lost).await, &id, 1, 2, what);
    assert_conflict(
        store.append(&id, 3, &lost).await,
        &id,
        3,
        2,
        "an append based on a revision never made",
    );
    assert_conflict(
        store.append(&id, 0, &lost).await,
        &id,
        0,
        2,
        "an append based on revision 0 to a stored session",
    );
    assert_eq!(
        stored(store, &id, what).await,
        before,
        "{what} changed the stored session"
    );
    assert_eq!(
        ok(store.stamp(&id).await, what),
        stamp,
        "{what} changed the stamp"
    );
}

/// An append to a session never saved is [`SessionError::NotStored`] when
/// based on revision 0, a conflict finding revision 0 otherwise, and makes
/// no session.
pub async fn an_append_to_a_session_never_saved_is_not_stored(store: &dyn SessionStore) {
    let id = fresh("append-missing");
    let messages = [Message::user("q")];
    let result = store.append(&id, 0, &messages).await;
    let want = SessionError::NotStored { id: id.clone() };
    match &result {
        Err(err) if *err == want => {}
        other => panic!(
            "an append at revision 0 to a session never saved: expected {want:?}, got {other:?}"
        ),
    }
    assert_conflict(
        store.append(&id, 2, &messages).await,
        &id,
        2,
        0,
        "an append at revision 2 to a session never saved",
    );
    assert_gone(store, &id, "after appends to a session never saved").await;
}

/// An append to a session deleted since it was read is a conflict finding
/// revision 0, and does not bring the session back.
pub async fn an_append_to_a_deleted_session_conflicts_with_found_0(store: &dyn SessionStore) {
    let what = "an append to a deleted session";
    let id = fresh("append-deleted");
    create(store, &top(id.clone(), vec![Message::user("q")]), what).await;
    ok(store.delete(&id).await, what);
    assert_conflict(
        store.append(&id, 1, &[Message::assistant("a")]).await,
        &id,
        1,
        0,
        what,
    );
    assert_gone(store, &id, what).await;
}

/// Appends racing on one revision: exactly one wins, every other is a
/// conflict finding the winner's revision, and only the winner's messages
/// are added.
pub async fn concurrent_appends_on_one_revision_have_one_winner(store: &dyn SessionStore) {
    let what = "concurrent appends based on one revision";
    let id = fresh("race-append");
    let saved = create(store, &top(id.clone(), vec![Message::user("q")]), what).await;
    let batches: Vec<[Message; 1]> = (0..8)
        .map(|k| [Message::assistant(format!("writer {k}"))])
        .collect();
    let results = join_all(batches.iter().map(|b| store.append(&id, 1, b))).await;
    let mut winners: Vec<(usize, SessionStamp)> = Vec::new();
    for (k, result) in results.into_iter().enumerate() {
        match result {
            Ok(stamp) => winners.push((k, stamp)),
            Err(err) => assert_eq!(
                err,
                SessionError::Conflict {
                    id: id.clone(),
                    expected: 1,
                    found: 2
                },
                "{what}: writer {k}'s error"
            ),
        }
    }
    let [(winner, stamp)] = winners[..] else {
        panic!("{what}: the writers that won: {winners:?}");
    };
    assert_eq!(stamp.revision, 2, "{what}: the winner's revision");
    let mut expected = saved.messages.clone();
    expected.extend(batches[winner].iter().cloned());
    let loaded = stored(store, &id, what).await;
    assert_eq!(
        (loaded.revision, loaded.messages),
        (2, expected),
        "{what}: only the winner's messages may be added"
    );
}
