//! The `SessionStore` operations of `SqliteSessionStore`: a `sessions`
//! row per session and its conversation in `session_messages` rows, one
//! per write, read back in the order they were written.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tinyagents_core::{AgentId, Message, SessionId};

use super::{SqliteSessionStore, classify, now_ms};
use crate::session::{SESSION_FORMAT, SessionError, SessionRecord, SessionStamp, SessionStore};

/// A `sessions` row: everything of a record but its conversation.
type Row = (String, Option<String>, Option<String>, String, i64, i64);

fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

const COLUMNS: &str = "id, parent_id, agent_id, conversation, format, revision";

/// The record of `row`, its conversation read from its message rows in
/// the order they were written.
fn decode(conn: &Connection, path: &str, row: Row) -> Result<SessionRecord, SessionError> {
    let (id, parent, agent, conversation, format, revision) = row;
    let id = SessionId::from(id);
    let format = u32::try_from(format).unwrap_or(u32::MAX);
    if format != SESSION_FORMAT {
        return Err(SessionError::Format {
            id,
            found: format,
            supported: SESSION_FORMAT,
        });
    }
    let classify = |error: rusqlite::Error| classify(path, error);
    let mut statement = conn
        .prepare_cached("SELECT messages FROM session_messages WHERE session_id = ?1 ORDER BY seq")
        .map_err(classify)?;
    let mut rows = statement.query(params![id.as_str()]).map_err(classify)?;
    let mut messages = Vec::new();
    while let Some(row) = rows.next().map_err(classify)? {
        let text = row
            .get_ref(0)
            .and_then(|v| Ok(v.as_str()?))
            .map_err(classify)?;
        let batch: Vec<Message> =
            serde_json::from_str(text).map_err(|error| SessionError::Corrupt {
                path: path.to_owned(),
                message: format!("session {id} cannot be read: {error}"),
                source: Some(error.into()),
            })?;
        if messages.is_empty() {
            messages = batch;
        } else {
            messages.extend(batch);
        }
    }
    Ok(SessionRecord {
        id,
        parent: parent.map(SessionId::from),
        agent_id: agent.map(AgentId::from),
        conversation,
        messages,
        revision: u64::try_from(revision).unwrap_or(0),
    })
}

/// Messages as one message row's text.
fn encode(id: &SessionId, messages: &[Message]) -> Result<String, SessionError> {
    serde_json::to_string(messages).map_err(|error| SessionError::Store {
        message: format!("session {id} cannot be encoded: {error}"),
        source: Some(error.into()),
    })
}

/// A revision as SQLite stores it.
fn stored(revision: u64) -> i64 {
    i64::try_from(revision).unwrap_or(i64::MAX)
}

/// The stored revision of `id` inside `tx` (`None`: not stored).
fn revision_of(tx: &rusqlite::Transaction<'_>, id: &str) -> rusqlite::Result<Option<u64>> {
    tx.prepare_cached("SELECT revision FROM sessions WHERE id = ?1")?
        .query_row(params![id], |row| row.get::<_, i64>(0))
        .optional()
        .map(|found| found.map(|r| u64::try_from(r).unwrap_or(0)))
}

/// Adds one message row to `id`; its number is the session's new mark.
fn insert_messages(tx: &rusqlite::Transaction<'_>, id: &str, text: &str) -> rusqlite::Result<i64> {
    tx.prepare_cached("INSERT INTO session_messages (session_id, messages) VALUES (?1, ?2)")?
        .execute(params![id, text])?;
    Ok(tx.last_insert_rowid())
}

/// The sessions nested in `?1`, itself included.
const NESTED: &str = "WITH RECURSIVE nested(id) AS (
        SELECT ?1
        UNION SELECT s.id FROM sessions s JOIN nested n ON s.parent_id = n.id
    )";

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        let id = id.as_str().to_owned();
        self.with_conn(move |conn, path| {
            // One read transaction: the record and its rows of one write.
            let tx = conn.transaction().map_err(|error| classify(path, error))?;
            let row = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"))
                .and_then(|mut statement| statement.query_row(params![id], read_row).optional())
                .map_err(|error| classify(path, error))?;
            row.map(|row| decode(&tx, path, row)).transpose()
        })
        .await
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        let text = encode(&record.id, &record.messages)?;
        let id = record.id.clone();
        let parent = record.parent.clone();
        let agent = record.agent_id.clone();
        let conversation = record.conversation.clone();
        let expected = record.revision;
        self.with_conn(move |conn, path| {
            let classify = |error: rusqlite::Error| classify(path, error);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(classify)?;
            let found = revision_of(&tx, id.as_str())
                .map_err(classify)?
                .unwrap_or(0);
            if found != expected {
                return Err(SessionError::Conflict {
                    id,
                    expected,
                    found,
                });
            }
            let revision = expected + 1;
            tx.execute(
                "DELETE FROM session_messages WHERE session_id = ?1",
                params![id.as_str()],
            )
            .map_err(classify)?;
            let mark = insert_messages(&tx, id.as_str(), &text).map_err(classify)?;
            tx.execute(
                "INSERT OR REPLACE INTO sessions
                    (id, parent_id, agent_id, conversation, format, revision, mark, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    id.as_str(),
                    parent.as_ref().map(SessionId::as_str),
                    agent.as_ref().map(AgentId::as_str),
                    conversation,
                    SESSION_FORMAT,
                    stored(revision),
                    mark,
                    now_ms(),
                ],
            )
            .map_err(classify)?;
            tx.commit().map_err(classify)?;
            Ok(revision)
        })
        .await
    }

    async fn append(
        &self,
        id: &SessionId,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError> {
        let text = encode(id, messages)?;
        let id = id.clone();
        self.with_conn(move |conn, path| {
            let classify = |error: rusqlite::Error| classify(path, error);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(classify)?;
            match revision_of(&tx, id.as_str()).map_err(classify)? {
                None => return Err(SessionError::not_stored(&id, revision)),
                Some(found) if found != revision => {
                    return Err(SessionError::Conflict {
                        id,
                        expected: revision,
                        found,
                    });
                }
                Some(_) => {}
            }
            let mark = insert_messages(&tx, id.as_str(), &text).map_err(classify)?;
            tx.prepare_cached(
                "UPDATE sessions SET revision = ?2, mark = ?3, updated_at = ?4 WHERE id = ?1",
            )
            .and_then(|mut statement| {
                statement.execute(params![id.as_str(), stored(revision + 1), mark, now_ms()])
            })
            .map_err(classify)?;
            tx.commit().map_err(classify)?;
            Ok(SessionStamp {
                revision: revision + 1,
                mark: u64::try_from(mark).unwrap_or(0),
            })
        })
        .await
    }

    async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError> {
        let id = id.as_str().to_owned();
        self.with_conn(move |conn, path| {
            conn.prepare_cached("SELECT revision, mark FROM sessions WHERE id = ?1")
                .and_then(|mut statement| {
                    statement
                        .query_row(params![id], |row| {
                            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
                        })
                        .optional()
                })
                .map(|found| {
                    found.map(|(revision, mark)| SessionStamp {
                        revision: u64::try_from(revision).unwrap_or(0),
                        mark: u64::try_from(mark).unwrap_or(0),
                    })
                })
                .map_err(|error| classify(path, error))
        })
        .await
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        let parent = parent.as_str().to_owned();
        self.with_conn(move |conn, path| {
            let tx = conn.transaction().map_err(|error| classify(path, error))?;
            let rows: Vec<Row> = tx
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM sessions WHERE parent_id = ?1 ORDER BY id"
                ))
                .and_then(|mut statement| {
                    statement
                        .query_map(params![parent], read_row)?
                        .collect::<rusqlite::Result<_>>()
                })
                .map_err(|error| classify(path, error))?;
            rows.into_iter().map(|row| decode(&tx, path, row)).collect()
        })
        .await
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        let id = id.as_str().to_owned();
        self.with_conn(move |conn, path| {
            let classify = |error: rusqlite::Error| classify(path, error);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(classify)?;
            tx.execute(
                &format!(
                    "{NESTED} DELETE FROM session_messages
                     WHERE session_id IN (SELECT id FROM nested)"
                ),
                params![id],
            )
            .map_err(classify)?;
            tx.execute(
                &format!("{NESTED} DELETE FROM sessions WHERE id IN (SELECT id FROM nested)"),
                params![id],
            )
            .map_err(classify)?;
            tx.commit().map_err(classify)
        })
        .await
    }
}
