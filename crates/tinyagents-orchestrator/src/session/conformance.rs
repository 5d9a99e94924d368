//! The conformance suite every [`SessionStore`] backend passes (feature
//! `conformance`). Each check panics with a message naming what broke.
//!
//! What the suite holds a store to, beyond the trait's own words (both
//! built-in stores, memory and SQLite, do all of it):
//! - a session's children are the sessions whose `parent` is that session
//!   — its direct children only, not its grandchildren — in the byte order
//!   of their ids;
//! - a session is nested in another when a chain of `parent`s leads to it,
//!   whatever the ids look like: deleting `p` leaves a top-level session
//!   named `p/notes` alone;
//! - deleting or reading a session that is not stored is no error;
//! - the mark of a session changes only when that session is written;
//! - messages come back exactly as written, whatever their text (a NUL
//!   character included).
//!
//! That [`SessionStore::stamp`] does not read the conversation cannot be
//! seen through the trait; each backend's own tests check it.
//!
//! Run [`run_all`] against any store: the checks use their own session ids
//! (fresh per call), so a store shared with other tests, or with another
//! process running the suite, still works.

// A test suite: an unmet expectation is a panic by design.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub(crate) use futures_util::future::join_all;
use tinyagents_core::{AgentId, Message, RunId, SessionId};

use super::{SessionError, SessionRecord, SessionStore, child_session_id};

mod appends;
mod messages;
mod nesting;
mod records;
mod stamps;

pub use appends::{
    an_append_adds_messages_in_order_and_keeps_the_other_fields,
    an_append_to_a_deleted_session_conflicts_with_found_0,
    an_append_to_a_session_never_saved_is_not_stored,
    concurrent_appends_on_one_revision_have_one_winner, stale_appends_conflict_and_write_nothing,
};
pub use messages::every_message_variant_round_trips;
pub use nesting::{
    children_are_the_direct_children_in_id_order, delete_removes_nested_sessions_and_nothing_else,
};
pub use records::{
    a_first_save_makes_revision_1_and_stale_saves_conflict, a_missing_session_is_absent,
    a_save_on_the_stored_revision_replaces_the_record,
    concurrent_saves_on_one_revision_have_one_winner,
};
pub use stamps::{
    a_stamp_changes_only_with_writes_of_its_session,
    stamps_differ_for_every_write_even_after_a_deletion,
};

/// Runs every check, in order.
pub async fn run_all(store: &dyn SessionStore) {
    a_missing_session_is_absent(store).await;
    a_first_save_makes_revision_1_and_stale_saves_conflict(store).await;
    a_save_on_the_stored_revision_replaces_the_record(store).await;
    an_append_adds_messages_in_order_and_keeps_the_other_fields(store).await;
    stale_appends_conflict_and_write_nothing(store).await;
    an_append_to_a_session_never_saved_is_not_stored(store).await;
    an_append_to_a_deleted_session_conflicts_with_found_0(store).await;
    stamps_differ_for_every_write_even_after_a_deletion(store).await;
    a_stamp_changes_only_with_writes_of_its_session(store).await;
    children_are_the_direct_children_in_id_order(store).await;
    delete_removes_nested_sessions_and_nothing_else(store).await;
    every_message_variant_round_trips(store).await;
    concurrent_saves_on_one_revision_have_one_winner(store).await;
    concurrent_appends_on_one_revision_have_one_winner(store).await;
}

/// The value of `result`, or a panic naming `what` and the error.
fn ok<T>(result: Result<T, SessionError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(err) => panic!("{what}: unexpected session store error: {err}"),
    }
}

/// A session id no other call of the suite uses.
fn fresh(check: &str) -> SessionId {
    SessionId::from(format!("conformance-{check}-{}", RunId::generate()))
}

/// A never-saved top-level session `id` holding `messages`.
fn top(id: SessionId, messages: Vec<Message>) -> SessionRecord {
    SessionRecord {
        messages,
        ..SessionRecord::new(id)
    }
}

/// A never-saved child session of `parent` for `agent` and `conversation`.
fn child(parent: &SessionId, agent: &str, conversation: &str) -> SessionRecord {
    let agent = AgentId::from(agent);
    SessionRecord {
        id: child_session_id(parent, &agent, conversation),
        parent: Some(parent.clone()),
        agent_id: Some(agent.clone()),
        conversation: conversation.to_owned(),
        messages: vec![
            Message::user(format!("a question for {agent}")),
            Message::assistant(format!("{agent} answers")),
        ],
        revision: 0,
    }
}

/// Saves `record` (a fresh session) and returns it as stored: revision 1.
async fn create(store: &dyn SessionStore, record: &SessionRecord, what: &str) -> SessionRecord {
    let revision = ok(store.save(record).await, what);
    assert_eq!(
        revision, 1,
        "{what}: the first save of {} made revision {revision}, not 1",
        record.id
    );
    SessionRecord {
        revision: 1,
        ..record.clone()
    }
}

/// The stored session `id`, which must be there.
async fn stored(store: &dyn SessionStore, id: &SessionId, what: &str) -> SessionRecord {
    ok(store.load(id).await, what)
        .unwrap_or_else(|| panic!("{what}: session {id} is not stored but should be"))
}

/// Panics unless the session `id` is gone: no record and no stamp.
async fn assert_gone(store: &dyn SessionStore, id: &SessionId, what: &str) {
    assert!(
        ok(store.load(id).await, what).is_none(),
        "{what}: session {id} is still stored"
    );
    assert!(
        ok(store.stamp(id).await, what).is_none(),
        "{what}: session {id} still has a stamp"
    );
}

/// Panics unless `result` is a conflict of `id` with these revisions.
fn assert_conflict<T: std::fmt::Debug>(
    result: Result<T, SessionError>,
    id: &SessionId,
    expected: u64,
    found: u64,
    what: &str,
) {
    let want = SessionError::Conflict {
        id: id.clone(),
        expected,
        found,
    };
    match result {
        Err(err) if err == want => {}
        other => panic!("{what}: expected {want:?}, got {other:?}"),
    }
}
