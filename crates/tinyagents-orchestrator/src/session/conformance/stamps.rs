//! Stamps: a new mark for every write, and no new mark without one.

use tinyagents_core::Message;

use super::{child, create, fresh, ok, stored, top};
use crate::session::{SessionStamp, SessionStore};

/// Every write — a first save, a save, an append, the first save of a
/// session deleted and made again — gives its session a mark no other
/// write of any session had, and its stamp the revision it made.
pub async fn stamps_differ_for_every_write_even_after_a_deletion(store: &dyn SessionStore) {
    let what = "stamps of successive writes";
    let id = fresh("stamps");
    let other = fresh("stamps-other");
    let mut seen: Vec<(String, SessionStamp)> = Vec::new();
    let mut note = |step: &str, stamp: Option<SessionStamp>, revision: u64| {
        let stamp = stamp.unwrap_or_else(|| panic!("{what}: no stamp after {step}"));
        assert_eq!(
            stamp.revision, revision,
            "{what}: the stamp after {step} has the wrong revision"
        );
        if let Some((before, _)) = seen.iter().find(|(_, s)| s.mark == stamp.mark) {
            panic!(
                "{what}: {step} got mark {}, which {before} had already",
                stamp.mark
            );
        }
        seen.push((step.to_owned(), stamp));
    };

    let mut record = create(store, &top(id.clone(), vec![Message::user("q")]), what).await;
    note("the first save", ok(store.stamp(&id).await, what), 1);
    create(store, &top(other.clone(), vec![]), what).await;
    note(
        "a save of another session",
        ok(store.stamp(&other).await, what),
        1,
    );
    let appended = ok(store.append(&id, 1, &[Message::assistant("a")]).await, what);
    note("an append", Some(appended), 2);
    record.revision = 2;
    assert_eq!(ok(store.save(&record).await, what), 3, "{what}: a save");
    note("a save", ok(store.stamp(&id).await, what), 3);
    ok(store.append(&other, 1, &[]).await, what);
    note("an empty append", ok(store.stamp(&other).await, what), 2);

    ok(store.delete(&id).await, what);
    let again = top(id.clone(), vec![Message::user("q")]);
    create(store, &again, what).await;
    note(
        "the first save after a deletion",
        ok(store.stamp(&id).await, what),
        1,
    );
    let appended = ok(store.append(&id, 1, &[Message::assistant("a")]).await, what);
    note("an append after a deletion", Some(appended), 2);
}

/// A stamp stays as it is while its session is not written: loads,
/// stamps, listing children, refused writes and writes of other sessions
/// (its own children included) leave it alone. (The session manager keeps
/// a conversation for as long as its stamp holds.)
pub async fn a_stamp_changes_only_with_writes_of_its_session(store: &dyn SessionStore) {
    let what = "a stamp without writes";
    let id = fresh("stamp-still");
    create(store, &top(id.clone(), vec![Message::user("q")]), what).await;
    let stamp = ok(store.stamp(&id).await, what);
    let check = |step: &str, now: Option<SessionStamp>| {
        assert_eq!(now, stamp, "{what}: {step} changed the stamp");
    };

    stored(store, &id, what).await;
    check("a load", ok(store.stamp(&id).await, what));
    check("a stamp", ok(store.stamp(&id).await, what));
    ok(store.children(&id).await, what);
    check("listing children", ok(store.stamp(&id).await, what));
    let _ = store.append(&id, 9, &[Message::user("refused")]).await;
    let _ = store.save(&top(id.clone(), vec![])).await;
    check("refused writes", ok(store.stamp(&id).await, what));
    let kid = create(store, &child(&id, "helper", ""), what).await;
    ok(
        store.append(&kid.id, 1, &[Message::user("more")]).await,
        what,
    );
    create(store, &top(fresh("stamp-bystander"), vec![]), what).await;
    check("writes of other sessions", ok(store.stamp(&id).await, what));
    ok(store.delete(&kid.id).await, what);
    check("deleting a child", ok(store.stamp(&id).await, what));

    let after = ok(store.append(&id, 1, &[Message::assistant("a")]).await, what);
    assert_ne!(
        Some(after.mark),
        stamp.map(|s| s.mark),
        "{what}: an append kept the mark"
    );
}
