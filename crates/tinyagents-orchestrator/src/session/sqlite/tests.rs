//! The SQLite session store: revisions, appends, stamps, migrations and
//! refusals.

use rusqlite::Connection;
use tinyagents_core::{AgentId, Message, SessionId};

use super::*;
use crate::session::{SESSION_FORMAT, SessionRecord, SessionStamp, SessionStore};

fn record(id: &str, parent: Option<&str>) -> SessionRecord {
    SessionRecord {
        parent: parent.map(SessionId::from),
        agent_id: parent.map(|_| AgentId::from("child")),
        messages: vec![Message::user("q"), Message::assistant("a")],
        ..SessionRecord::new(id.into())
    }
}

#[tokio::test]
async fn survives_reopening_and_checks_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteSessionStore::open(&path).await.unwrap();
    assert_eq!(store.save(&record("p", None)).await.unwrap(), 1);
    assert_eq!(store.save(&record("p/c#", Some("p"))).await.unwrap(), 1);
    let stale = store.save(&record("p", None)).await.unwrap_err();
    assert!(matches!(stale, SessionError::Conflict { found: 1, .. }));
    drop(store);

    let store = SqliteSessionStore::open(&path).await.unwrap();
    let loaded = store.load(&"p".into()).await.unwrap().unwrap();
    assert_eq!(loaded.revision, 1);
    assert_eq!(loaded.messages.len(), 2);
    assert_eq!(store.children(&"p".into()).await.unwrap().len(), 1);
    store.delete(&"p".into()).await.unwrap();
    assert!(store.load(&"p/c#".into()).await.unwrap().is_none());
}

#[tokio::test]
async fn refuses_garbage_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![7u8; 8192]).unwrap();
    let error = SqliteSessionStore::open(&garbage).await.unwrap_err();
    assert!(matches!(error, SessionError::Corrupt { .. }), "{error}");

    let foreign = dir.path().join("foreign.db");
    let conn = Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE other (x INTEGER);")
        .unwrap();
    drop(conn);
    let error = SqliteSessionStore::open(&foreign).await.unwrap_err();
    assert!(
        matches!(error, SessionError::NotASessionStore { found: 0, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn refuses_newer_schemas_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteSessionStore::open(&path).await.unwrap();
    store.save(&record("p", None)).await.unwrap();
    drop(store);
    let conn = Connection::open(&path).unwrap();
    conn.execute("UPDATE sessions SET format = 99", []).unwrap();
    drop(conn);
    let store = SqliteSessionStore::open(&path).await.unwrap();
    let error = store.load(&"p".into()).await.unwrap_err();
    assert_eq!(
        error,
        SessionError::Format {
            id: "p".into(),
            found: 99,
            supported: SESSION_FORMAT
        }
    );
    drop(store);
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = SqliteSessionStore::open(&path).await.unwrap_err();
    assert!(
        matches!(error, SessionError::TooNew { found: 99, .. }),
        "{error}"
    );
}

/// The message rows of `id`, in order: (number, text).
fn rows(path: &Path, id: &str) -> Vec<(i64, String)> {
    let conn = Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT seq, messages FROM session_messages WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    statement
        .query_map([id], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn an_append_writes_one_row_of_its_messages_and_rewrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteSessionStore::open(&path).await.unwrap();
    store.save(&record("p", None)).await.unwrap();
    let first = rows(&path, "p");
    assert_eq!(first.len(), 1);
    let added = [Message::user("q2"), Message::assistant("a2")];
    let stamp = store.append(&"p".into(), 1, &added).await.unwrap();
    assert_eq!(stamp.revision, 2);
    let after = rows(&path, "p");
    assert_eq!(after.len(), 2);
    assert_eq!(after[0], first[0], "the earlier row is untouched");
    assert_eq!(after[1].1, serde_json::to_string(&added).unwrap());
    assert_eq!(u64::try_from(after[1].0).unwrap(), stamp.mark);

    let stale = store.append(&"p".into(), 1, &added).await.unwrap_err();
    assert_eq!(
        stale,
        SessionError::Conflict {
            id: "p".into(),
            expected: 1,
            found: 2
        }
    );
    assert_eq!(rows(&path, "p").len(), 2, "a refused append writes nothing");
    let loaded = store.load(&"p".into()).await.unwrap().unwrap();
    assert_eq!(loaded.revision, 2);
    assert_eq!(
        loaded.messages,
        [
            Message::user("q"),
            Message::assistant("a"),
            Message::user("q2"),
            Message::assistant("a2")
        ]
    );
    assert_eq!(
        store.append(&"new".into(), 0, &added).await.unwrap_err(),
        SessionError::NotStored { id: "new".into() }
    );
    assert!(matches!(
        store.append(&"gone".into(), 3, &added).await.unwrap_err(),
        SessionError::Conflict {
            expected: 3,
            found: 0,
            ..
        }
    ));

    // A whole save replaces the rows with one.
    let whole = SessionRecord {
        revision: 2,
        ..record("p", None)
    };
    assert_eq!(store.save(&whole).await.unwrap(), 3);
    assert_eq!(rows(&path, "p").len(), 1);
    assert_eq!(
        store
            .load(&"p".into())
            .await
            .unwrap()
            .unwrap()
            .messages
            .len(),
        2
    );
}

#[tokio::test]
async fn stamps_differ_for_every_write_even_after_a_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(dir.path().join("sessions.db"))
        .await
        .unwrap();
    assert_eq!(store.stamp(&"p".into()).await.unwrap(), None);
    store.save(&record("p", None)).await.unwrap();
    let saved = store.stamp(&"p".into()).await.unwrap().unwrap();
    assert_eq!(saved.revision, 1);
    let appended = store
        .append(&"p".into(), 1, &[Message::user("more")])
        .await
        .unwrap();
    assert_eq!(store.stamp(&"p".into()).await.unwrap(), Some(appended));
    assert_ne!(appended.mark, saved.mark);
    store.delete(&"p".into()).await.unwrap();
    assert_eq!(store.stamp(&"p".into()).await.unwrap(), None);
    store.save(&record("p", None)).await.unwrap();
    let again = store.stamp(&"p".into()).await.unwrap().unwrap();
    assert_eq!(again.revision, saved.revision);
    assert_ne!(again, saved, "the same revision made anew has another mark");
}

/// A file as version 1 wrote it: one `sessions` row per session, the
/// conversation a JSON array in its `messages` column.
fn version_1_file(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(MIGRATIONS[0]).unwrap();
    let insert = "INSERT INTO sessions
        (id, parent_id, agent_id, conversation, format, messages, revision, updated_at)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)";
    let two = serde_json::to_string(&[Message::user("q"), Message::assistant("a")]).unwrap();
    for (id, parent, agent, format, messages, revision) in [
        ("p", None, Some("root"), 1, two.as_str(), 3),
        ("p/c#", Some("p"), Some("child"), 1, two.as_str(), 5),
        ("later", None, None, 99, "[]", 1),
        ("broken", None, None, 1, "not json", 1),
    ] {
        conn.execute(
            insert,
            rusqlite::params![id, parent, agent, "", format, messages, revision],
        )
        .unwrap();
    }
    conn.pragma_update(None, "application_id", SESSION_APPLICATION_ID)
        .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
}

#[tokio::test]
async fn a_version_1_file_migrates_in_place_and_keeps_its_sessions() {
    assert_eq!(SESSION_SCHEMA_VERSION, 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    version_1_file(&path);
    let store = SqliteSessionStore::open(&path).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SESSION_SCHEMA_VERSION);
    drop(conn);

    let parent = store.load(&"p".into()).await.unwrap().unwrap();
    assert_eq!(
        (
            parent.revision,
            parent.agent_id.clone(),
            parent.messages.len()
        ),
        (3, Some(AgentId::from("root")), 2)
    );
    let children = store.children(&"p".into()).await.unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].revision, 5);
    assert_eq!(children[0].messages, parent.messages);
    assert!(matches!(
        store.load(&"later".into()).await.unwrap_err(),
        SessionError::Format { found: 99, .. }
    ));
    assert!(matches!(
        store.load(&"broken".into()).await.unwrap_err(),
        SessionError::Corrupt { .. }
    ));
    let stamps = [
        store.stamp(&"p".into()).await.unwrap().unwrap(),
        store.stamp(&"p/c#".into()).await.unwrap().unwrap(),
    ];
    assert!(stamps[0].mark > 0 && stamps[0].mark != stamps[1].mark);
    let stamp = store
        .append(&"p/c#".into(), 5, &[Message::user("q2")])
        .await
        .unwrap();
    assert_eq!(
        stamp,
        SessionStamp {
            revision: 6,
            mark: stamp.mark
        }
    );
    assert!(stamp.mark > stamps[0].mark.max(stamps[1].mark));
    drop(store);

    // Opening it again is a no-op.
    let store = SqliteSessionStore::open(&path).await.unwrap();
    let child = store.load(&"p/c#".into()).await.unwrap().unwrap();
    assert_eq!(child.messages.len(), 3);
}
