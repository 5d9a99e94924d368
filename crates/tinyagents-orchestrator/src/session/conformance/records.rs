//! Whole records: absent sessions, saves and their revision checks.

use tinyagents_core::{AgentId, Message, SessionId};

use super::{assert_conflict, assert_gone, create, fresh, join_all, ok, stored, top};
use crate::session::{SessionError, SessionRecord, SessionStore};

/// A session never saved: `load` and `stamp` say `None`, it has no
/// children, and deleting it is no error and creates nothing.
pub async fn a_missing_session_is_absent(store: &dyn SessionStore) {
    let what = "a missing session";
    let id = fresh("missing");
    assert_gone(store, &id, what).await;
    let children = ok(store.children(&id).await, what);
    assert!(
        children.is_empty(),
        "{what}: children of {id} (never saved) are {children:?}"
    );
    ok(store.delete(&id).await, "deleting a session never saved");
    assert_gone(store, &id, "after deleting a session never saved").await;
}

/// The first save makes revision 1 and loads back as saved; a save based
/// on any other revision (0 again, or one never made) is
/// [`SessionError::Conflict`] with the revision found, and changes nothing.
pub async fn a_first_save_makes_revision_1_and_stale_saves_conflict(store: &dyn SessionStore) {
    let what = "a first save";
    let id = fresh("save");
    let record = SessionRecord {
        parent: None,
        agent_id: Some(AgentId::from("planner")),
        conversation: "kept as given".into(),
        ..top(
            id.clone(),
            vec![Message::user("q"), Message::assistant("a")],
        )
    };
    let mut ahead = record.clone();
    ahead.revision = 1;
    assert_conflict(
        store.save(&ahead).await,
        &id,
        1,
        0,
        "a save based on revision 1 of a session never saved",
    );
    assert_gone(store, &id, "after a refused first save").await;

    let saved = create(store, &record, what).await;
    assert_eq!(
        stored(store, &id, what).await,
        saved,
        "{what}: the session does not load back as saved, with revision 1"
    );
    let stamp = ok(store.stamp(&id).await, what);
    assert_eq!(
        stamp.map(|s| s.revision),
        Some(1),
        "{what}: the stamp of {id} has the wrong revision"
    );

    let mut stale = record.clone();
    stale.messages = vec![Message::user("lost update")];
    assert_conflict(
        store.save(&stale).await,
        &id,
        0,
        1,
        "a second save based on revision 0",
    );
    stale.revision = 7;
    assert_conflict(
        store.save(&stale).await,
        &id,
        7,
        1,
        "a save based on a revision never made",
    );
    assert_eq!(
        stored(store, &id, "after refused saves").await,
        saved,
        "a refused save changed the stored session"
    );
    assert_eq!(
        ok(store.stamp(&id).await, "after refused saves"),
        stamp,
        "a refused save changed the stamp"
    );
}

/// A save based on the stored revision makes the next one and replaces the
/// whole record: the conversation saved is the whole conversation (a
/// shorter one drops the rest), and a later append follows it.
pub async fn a_save_on_the_stored_revision_replaces_the_record(store: &dyn SessionStore) {
    let what = "a save on the stored revision";
    let id = fresh("resave");
    let first = top(
        id.clone(),
        vec![
            Message::user("one"),
            Message::assistant("two"),
            Message::user("three"),
        ],
    );
    let mut next = create(store, &first, what).await;
    next.messages = vec![Message::system("compacted")];
    next.conversation = "renamed".into();
    let revision = ok(store.save(&next).await, what);
    assert_eq!(revision, 2, "{what}: saving revision 1 made {revision}");
    let expected = SessionRecord {
        revision: 2,
        ..next.clone()
    };
    assert_eq!(
        stored(store, &id, what).await,
        expected,
        "{what}: the stored session is not the one saved (a shorter conversation must replace the longer one)"
    );
    let stamp = ok(store.append(&id, 2, &[Message::user("four")]).await, what);
    assert_eq!(stamp.revision, 3, "{what}: an append after it");
    let loaded = stored(store, &id, what).await;
    assert_eq!(
        loaded.messages,
        vec![Message::system("compacted"), Message::user("four")],
        "{what}: an append after a save must follow the saved conversation only"
    );
    next.revision = 3;
    next.messages = Vec::new();
    assert_eq!(
        ok(store.save(&next).await, what),
        4,
        "{what}: saving revision 3"
    );
    assert_eq!(
        stored(store, &id, what).await.messages,
        Vec::<Message>::new(),
        "{what}: saving an empty conversation must empty it"
    );
}

/// Saves racing on one revision: exactly one wins, every other is
/// [`SessionError::Conflict`] finding the winner's revision, and the stored
/// conversation is the winner's. Checked for a first save (revision 0) and
/// for a later one.
pub async fn concurrent_saves_on_one_revision_have_one_winner(store: &dyn SessionStore) {
    let id = fresh("race-save");
    race(store, &id, 0).await;
    race(store, &id, 1).await;
}

/// Eight saves of `id`, all based on `base`.
async fn race(store: &dyn SessionStore, id: &SessionId, base: u64) {
    let what = format!("concurrent saves based on revision {base}");
    let records: Vec<SessionRecord> = (0..8)
        .map(|k| SessionRecord {
            revision: base,
            ..top(id.clone(), vec![Message::user(format!("writer {k}"))])
        })
        .collect();
    let results = join_all(records.iter().map(|r| store.save(r))).await;
    let mut winners = Vec::new();
    for (k, result) in results.into_iter().enumerate() {
        match result {
            Ok(revision) => {
                assert_eq!(revision, base + 1, "{what}: writer {k} made {revision}");
                winners.push(k);
            }
            Err(SessionError::Conflict {
                id: found_id,
                expected,
                found,
            }) => {
                assert_eq!(
                    (&found_id, expected, found),
                    (id, base, base + 1),
                    "{what}: writer {k}'s conflict"
                );
            }
            Err(err) => panic!("{what}: writer {k} failed: {err}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "{what}: the writers that won: {winners:?}"
    );
    let loaded = stored(store, id, &what).await;
    assert_eq!(
        loaded,
        SessionRecord {
            revision: base + 1,
            ..records[winners[0]].clone()
        },
        "{what}: the stored session is not the winner's"
    );
}
