//! `PostgresSessionStore`: the session-store conformance suite, two stores
//! (two processes) on one database, what a write leaves in the tables, and
//! the refusals: a newer schema, a newer message format, an unreachable
//! server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tinyagents_core::{Message, SessionId};
use tinyagents_orchestrator::{
    SESSION_FORMAT, SessionError, SessionRecord, SessionStore, child_session_id,
    session_conformance,
};
use tinyagents_postgres::testing::TestCluster;
use tinyagents_postgres::{PgDatabase, PgError, PostgresSessionStore};
use tokio_postgres::{Client, NoTls};

/// A fresh database of a new cluster, the cluster kept alive by the caller.
async fn fresh() -> (TestCluster, String) {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    (cluster, url)
}

async fn open(url: &str) -> PostgresSessionStore {
    let db = PgDatabase::connect(url).await.unwrap();
    PostgresSessionStore::open(&db).await.unwrap()
}

/// A plain connection, to look at and tamper with the tables.
async fn raw(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn record(id: &str, messages: Vec<Message>) -> SessionRecord {
    SessionRecord {
        messages,
        ..SessionRecord::new(id.into())
    }
}

#[tokio::test]
async fn the_postgres_store_conforms() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    session_conformance::run_all(&store).await;
    // Opening again migrates nothing and keeps the sessions.
    let again = open(&url).await;
    session_conformance::run_all(&again).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_database_conform_together_and_see_each_others_writes() {
    let (_cluster, url) = fresh().await;
    // Two processes opening one fresh database at once migrate it once.
    let (first, second) = tokio::join!(open(&url), open(&url));
    session_conformance::run_all(&second).await;
    tokio::join!(
        session_conformance::run_all(&first),
        session_conformance::run_all(&second)
    );

    let id = SessionId::from("shared");
    assert_eq!(
        first
            .save(&record("shared", vec![Message::user("q")]))
            .await
            .unwrap(),
        1
    );
    let read = second.load(&id).await.unwrap().unwrap();
    let stamp = first
        .append(&id, 1, &[Message::assistant("a")])
        .await
        .unwrap();
    assert_eq!(second.stamp(&id).await.unwrap(), Some(stamp));
    let stale = second.save(&read).await.unwrap_err();
    assert_eq!(
        stale,
        SessionError::Conflict {
            id: id.clone(),
            expected: 1,
            found: 2
        }
    );
    let stale = second
        .append(&id, read.revision, &[Message::user("lost")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            stale,
            SessionError::Conflict {
                expected: 1,
                found: 2,
                ..
            }
        ),
        "{stale}"
    );
    assert_eq!(
        second.load(&id).await.unwrap().unwrap().messages,
        vec![Message::user("q"), Message::assistant("a")]
    );
}

/// The rows of `id` in the messages table: (revision, xmin, text).
async fn rows(client: &Client, id: &str) -> Vec<(i64, String, String)> {
    client
        .query(
            "SELECT revision, xmin::text, messages FROM tinyagents_session_messages \
             WHERE session_id = $1 ORDER BY revision",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

#[tokio::test]
async fn an_append_writes_one_row_and_rewrites_nothing_and_top_level_sessions_are_listed() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    let client = raw(&url).await;
    store
        .save(&record(
            "p",
            vec![Message::user("q"), Message::assistant("a")],
        ))
        .await
        .unwrap();
    let first = rows(&client, "p").await;
    assert_eq!(first.len(), 1, "{first:?}");
    store
        .append(&"p".into(), 1, &[Message::user("q2")])
        .await
        .unwrap();
    store.append(&"p".into(), 2, &[]).await.unwrap();
    let after = rows(&client, "p").await;
    assert_eq!(after.len(), 2, "an empty append adds no row: {after:?}");
    assert_eq!(after[0], first[0], "the first row was rewritten");
    assert_eq!(after[1].0, 2);
    assert_eq!(
        serde_json::from_str::<Vec<Message>>(&after[1].2).unwrap(),
        vec![Message::user("q2")]
    );
    let mut whole = store.load(&"p".into()).await.unwrap().unwrap();
    assert_eq!(whole.revision, 3);
    whole.messages.truncate(1);
    store.save(&whole).await.unwrap();
    let saved = rows(&client, "p").await;
    assert_eq!(saved.len(), 1, "a save replaces the rows: {saved:?}");
    assert_eq!(saved[0].0, 4);

    // Top-level sessions, the most recently written first; children left out.
    store.save(&record("older", vec![])).await.unwrap();
    let parent = SessionId::from("older");
    let child = SessionRecord {
        parent: Some(parent.clone()),
        agent_id: Some("helper".into()),
        ..SessionRecord::new(child_session_id(&parent, &"helper".into(), ""))
    };
    store.save(&child).await.unwrap();
    store.append(&"p".into(), 4, &[]).await.unwrap();
    assert_eq!(
        store.top_level_sessions().await.unwrap(),
        vec![SessionId::from("p"), parent]
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_at_open() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    store.save(&record("kept", vec![])).await.unwrap();
    drop(store);
    let client = raw(&url).await;
    client
        .execute(
            "UPDATE tinyagents_schema SET version = version + 1 WHERE component = 'sessions'",
            &[],
        )
        .await
        .unwrap();
    let db = PgDatabase::connect(&url).await.unwrap();
    let error = PostgresSessionStore::open(&db).await.unwrap_err();
    let supported = PostgresSessionStore::SCHEMA_VERSION;
    assert!(
        matches!(error, SessionError::TooNew { found, supported: s, .. }
            if found == supported + 1 && s == supported),
        "{error}"
    );
    assert!(error.to_string().contains("sessions"), "{error}");
    // Nothing was touched.
    let version: i64 = client
        .query_one(
            "SELECT version FROM tinyagents_schema WHERE component = 'sessions'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, supported + 1);
}

#[tokio::test]
async fn a_session_in_a_newer_format_or_unreadable_is_refused_when_read() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    let client = raw(&url).await;
    let parent = SessionId::from("p");
    store.save(&record("p", vec![])).await.unwrap();
    let child = SessionRecord {
        parent: Some(parent.clone()),
        agent_id: Some("helper".into()),
        messages: vec![Message::user("q")],
        ..SessionRecord::new(child_session_id(&parent, &"helper".into(), ""))
    };
    store.save(&child).await.unwrap();
    let newer = i32::try_from(SESSION_FORMAT + 1).unwrap();
    client
        .execute(
            "UPDATE tinyagents_sessions SET format = $2 WHERE id = $1",
            &[&child.id.as_str(), &newer],
        )
        .await
        .unwrap();
    let want = SessionError::Format {
        id: child.id.clone(),
        found: SESSION_FORMAT + 1,
        supported: SESSION_FORMAT,
    };
    assert_eq!(store.load(&child.id).await.unwrap_err(), want);
    assert_eq!(store.children(&parent).await.unwrap_err(), want);
    // The stamp needs neither the format nor the conversation.
    assert_eq!(store.stamp(&child.id).await.unwrap().unwrap().revision, 1);

    // An unreadable conversation: refused on load, the stamp still answers.
    store
        .save(&record("bad", vec![Message::user("q")]))
        .await
        .unwrap();
    client
        .execute(
            "UPDATE tinyagents_session_messages SET messages = 'not json' WHERE session_id = 'bad'",
            &[],
        )
        .await
        .unwrap();
    let bad = SessionId::from("bad");
    let error = store.load(&bad).await.unwrap_err();
    assert!(
        matches!(&error, SessionError::Corrupt { message, .. } if message.contains("bad")),
        "{error}"
    );
    assert_eq!(store.stamp(&bad).await.unwrap().unwrap().revision, 1);
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("host=127.0.0.1 port={port} user=tinyagents dbname=sessions");
    let error = PgDatabase::connect(&url).await.unwrap_err();
    assert!(matches!(error, PgError::Unreachable { .. }), "{error}");
    let error = SessionError::from(error);
    let text = error.to_string();
    assert!(
        text.contains("unreachable") && text.contains(&format!("127.0.0.1:{port}/sessions")),
        "{text}"
    );

    // A server that goes away under an open store.
    let (cluster, url) = fresh().await;
    if cluster.port().is_none() {
        return; // TINYAGENTS_PG_URL: not ours to stop.
    }
    let store = open(&url).await;
    store.save(&record("s", vec![])).await.unwrap();
    drop(cluster);
    let error = store.load(&"s".into()).await.unwrap_err();
    assert!(
        matches!(&error, SessionError::Store { message, .. } if message.contains("unreachable")),
        "{error}"
    );
}
