//! Child sessions: listing a session's children, and deleting a session
//! with everything nested in it.

use tinyagents_core::{Message, SessionId};

use super::{assert_gone, child, create, fresh, ok, stored, top};
use crate::session::{SessionRecord, SessionStore};

/// The children of a session are the stored sessions whose `parent` it
/// is, whole (conversation included), in the byte order of their ids:
/// not its grandchildren, and not a top-level session whose id merely
/// begins with the parent's.
pub async fn children_are_the_direct_children_in_id_order(store: &dyn SessionStore) {
    let what = "children of a session";
    let parent = fresh("children");
    create(store, &top(parent.clone(), vec![Message::user("q")]), what).await;
    // Byte order puts `Beta` before `alpha`; a collation of words would not.
    let beta = create(store, &child(&parent, "Beta", ""), what).await;
    let alpha = create(store, &child(&parent, "alpha", ""), what).await;
    let research = create(store, &child(&parent, "alpha", "research"), what).await;
    let grandchild = create(store, &child(&alpha.id, "gamma", ""), what).await;
    let lookalike = SessionId::from(format!("{parent}/zeta#"));
    create(store, &top(lookalike, vec![]), what).await;

    let mut expected = vec![beta.clone(), alpha.clone(), research];
    expected.sort_by(|a, b| a.id.as_str().as_bytes().cmp(b.id.as_str().as_bytes()));
    assert_eq!(
        ok(store.children(&parent).await, what),
        expected,
        "{what}: the direct children of {parent}, whole and in byte order of their ids"
    );
    assert_eq!(
        ok(store.children(&alpha.id).await, what),
        vec![grandchild.clone()],
        "{what}: the children of a child"
    );
    assert_eq!(
        ok(store.children(&grandchild.id).await, what),
        Vec::<SessionRecord>::new(),
        "{what}: a session without children"
    );

    let stamp = ok(
        store.append(&beta.id, 1, &[Message::user("again")]).await,
        what,
    );
    let listed = ok(store.children(&parent).await, what);
    let now = listed
        .iter()
        .find(|c| c.id == beta.id)
        .unwrap_or_else(|| panic!("{what}: {} is no longer listed", beta.id));
    assert_eq!(
        (now.revision, now.messages.len()),
        (stamp.revision, beta.messages.len() + 1),
        "{what}: a listed child must be as last written"
    );
}

/// Deleting a session deletes it and every session nested in it (children,
/// grandchildren and deeper), and nothing else: not its siblings, not
/// other sessions' children, not top-level sessions whose ids begin with
/// its id.
pub async fn delete_removes_nested_sessions_and_nothing_else(store: &dyn SessionStore) {
    let what = "deleting nested sessions";
    let root = fresh("delete");
    let parent = create(store, &top(root.clone(), vec![Message::user("q")]), what).await;
    let doomed = create(store, &child(&root, "alpha", ""), what).await;
    let grandchild = create(store, &child(&doomed.id, "beta", "deep"), what).await;
    let great = create(store, &child(&grandchild.id, "gamma", ""), what).await;
    let sibling = create(store, &child(&root, "alpha", "other"), what).await;
    let other = fresh("delete-other");
    let bystanders = vec![
        create(store, &top(other.clone(), vec![]), what).await,
        create(store, &child(&other, "alpha", ""), what).await,
        create(store, &top(format!("{root}/notes").into(), vec![]), what).await,
        create(
            store,
            &top(format!("{}/x#", doomed.id).into(), vec![]),
            what,
        )
        .await,
        create(store, &top(format!("{root}-2").into(), vec![]), what).await,
    ];

    ok(store.delete(&doomed.id).await, what);
    for gone in [&doomed, &grandchild, &great] {
        assert_gone(store, &gone.id, "after deleting a child").await;
    }
    for kept in [&parent, &sibling].into_iter().chain(&bystanders) {
        assert_eq!(
            &stored(store, &kept.id, what).await,
            kept,
            "{what}: deleting {} changed {}",
            doomed.id,
            kept.id
        );
    }
    assert_eq!(
        ok(store.children(&root).await, what),
        vec![sibling.clone()],
        "{what}: the children left"
    );

    ok(store.delete(&root).await, what);
    for gone in [&parent, &sibling] {
        assert_gone(store, &gone.id, "after deleting a top-level session").await;
    }
    for kept in &bystanders {
        assert_eq!(
            &stored(store, &kept.id, what).await,
            kept,
            "{what}: deleting {root} changed {}",
            kept.id
        );
    }
    ok(store.delete(&root).await, "deleting a session again");
}
