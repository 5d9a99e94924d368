//! `SqliteSessionStore`: sessions in one SQLite file (WAL), surviving a
//! restart of the process.
//!
//! The file carries two marks in its header: `application_id`
//! ([`SESSION_APPLICATION_ID`]) and `user_version` (the schema version,
//! [`SESSION_SCHEMA_VERSION`]). A file of another application or of a newer
//! version is refused; a damaged file is refused with
//! [`SessionError::Corrupt`]. Every statement runs on tokio's blocking
//! pool, never on the async runtime's threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tinyagents_core::{AgentId, Message, SessionId};

use super::{SESSION_FORMAT, SessionError, SessionRecord, SessionStore};

/// The SQLite `application_id` of a session store: the bytes `tASs`.
pub const SESSION_APPLICATION_ID: i32 = 0x7441_5373;

/// The schema, one migration per version: `MIGRATIONS[k]` takes a file
/// from version `k` to `k + 1`. Append only.
const MIGRATIONS: &[&str] = &["CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        parent_id TEXT,
        agent_id TEXT,
        conversation TEXT NOT NULL,
        format INTEGER NOT NULL,
        messages TEXT NOT NULL,
        revision INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_parent ON sessions (parent_id);"];

/// The schema version this build writes.
pub const SESSION_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Sessions in a SQLite file. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct SqliteSessionStore {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteSessionStore {
    /// Opens the store at `path`, creating it when missing, migrating an
    /// older schema, and checking the file's integrity.
    pub async fn open(path: impl Into<PathBuf>) -> Result<Self, SessionError> {
        let path = path.into();
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || Self::open_blocking(&path))
            .await
            .map_err(|error| SessionError::Store {
                message: format!("opening {shown}: {error}"),
            })?
    }

    /// Like [`Self::open`], on the calling thread (for synchronous hosts).
    pub fn open_blocking(path: &Path) -> Result<Self, SessionError> {
        let shown = path.display().to_string();
        let classify = |error: rusqlite::Error| classify(&shown, &error);
        let mut conn = Connection::open(path).map_err(classify)?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(classify)?;
        let app_id: i32 = conn
            .pragma_query_value(None, "application_id", |row| row.get(0))
            .map_err(classify)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(classify)?;
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .map_err(classify)?;
        let fresh = app_id == 0 && version == 0 && tables == 0;
        if !fresh && app_id != SESSION_APPLICATION_ID {
            return Err(SessionError::NotASessionStore {
                path: shown,
                found: app_id,
            });
        }
        if version > SESSION_SCHEMA_VERSION {
            return Err(SessionError::TooNew {
                path: shown,
                found: version,
                supported: SESSION_SCHEMA_VERSION,
            });
        }
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |row| row.get(0))
            .map_err(classify)?;
        if check != "ok" {
            return Err(SessionError::Corrupt {
                path: shown,
                message: check,
            });
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(classify)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(SessionError::Store {
                message: format!("{shown}: the file system does not allow WAL mode ({mode})"),
            });
        }
        conn.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(classify)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(classify)?;
        let start = usize::try_from(version).unwrap_or(0);
        for migration in MIGRATIONS.iter().skip(start) {
            tx.execute_batch(migration).map_err(classify)?;
        }
        tx.pragma_update(None, "application_id", SESSION_APPLICATION_ID)
            .map_err(classify)?;
        tx.pragma_update(None, "user_version", SESSION_SCHEMA_VERSION)
            .map_err(classify)?;
        tx.commit().map_err(classify)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path.to_path_buf()),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection, &str) -> Result<T, SessionError> + Send + 'static,
    ) -> Result<T, SessionError> {
        let conn = Arc::clone(&self.conn);
        let path = self.path.display().to_string();
        tokio::task::spawn_blocking(move || work(&mut conn.lock(), &path))
            .await
            .map_err(|error| SessionError::Store {
                message: format!("session store task failed: {error}"),
            })?
    }
}

fn classify(path: &str, error: &rusqlite::Error) -> SessionError {
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => SessionError::Corrupt {
            path: path.to_owned(),
            message: error.to_string(),
        },
        _ => SessionError::Store {
            message: format!("{path}: {error}"),
        },
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

type Row = (
    String,
    Option<String>,
    Option<String>,
    String,
    i64,
    String,
    i64,
);

fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    ))
}

fn decode(path: &str, row: Row) -> Result<SessionRecord, SessionError> {
    let (id, parent, agent, conversation, format, messages, revision) = row;
    let id = SessionId::from(id);
    let format = u32::try_from(format).unwrap_or(u32::MAX);
    if format != SESSION_FORMAT {
        return Err(SessionError::Format {
            id,
            found: format,
            supported: SESSION_FORMAT,
        });
    }
    let messages: Vec<Message> =
        serde_json::from_str(&messages).map_err(|error| SessionError::Corrupt {
            path: path.to_owned(),
            message: format!("session {id} cannot be read: {error}"),
        })?;
    Ok(SessionRecord {
        id,
        parent: parent.map(SessionId::from),
        agent_id: agent.map(AgentId::from),
        conversation,
        messages,
        revision: u64::try_from(revision).unwrap_or(0),
    })
}

const COLUMNS: &str = "id, parent_id, agent_id, conversation, format, messages, revision";

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        let id = id.as_str().to_owned();
        self.with_conn(move |conn, path| {
            let row = conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"),
                    params![id],
                    read_row,
                )
                .optional()
                .map_err(|error| classify(path, &error))?;
            row.map(|row| decode(path, row)).transpose()
        })
        .await
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        let messages =
            serde_json::to_string(&record.messages).map_err(|error| SessionError::Store {
                message: format!("session {} cannot be encoded: {error}", record.id),
            })?;
        let record = SessionRecord {
            messages: Vec::new(),
            ..record.clone()
        };
        self.with_conn(move |conn, path| {
            let classify = |error: rusqlite::Error| classify(path, &error);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(classify)?;
            let found: i64 = tx
                .query_row(
                    "SELECT revision FROM sessions WHERE id = ?1",
                    params![record.id.as_str()],
                    |row| row.get(0),
                )
                .optional()
                .map_err(classify)?
                .unwrap_or(0);
            let found = u64::try_from(found).unwrap_or(0);
            if found != record.revision {
                return Err(SessionError::Conflict {
                    id: record.id.clone(),
                    expected: record.revision,
                    found,
                });
            }
            let revision = record.revision + 1;
            tx.execute(
                "INSERT OR REPLACE INTO sessions
                    (id, parent_id, agent_id, conversation, format, messages, revision, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    record.id.as_str(),
                    record.parent.as_ref().map(SessionId::as_str),
                    record.agent_id.as_ref().map(AgentId::as_str),
                    record.conversation,
                    SESSION_FORMAT,
                    messages,
                    i64::try_from(revision).unwrap_or(i64::MAX),
                    now_ms(),
                ],
            )
            .map_err(classify)?;
            tx.commit().map_err(classify)?;
            Ok(revision)
        })
        .await
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        let parent = parent.as_str().to_owned();
        self.with_conn(move |conn, path| {
            let mut statement = conn
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM sessions WHERE parent_id = ?1 ORDER BY id"
                ))
                .map_err(|error| classify(path, &error))?;
            let rows = statement
                .query_map(params![parent], read_row)
                .map_err(|error| classify(path, &error))?;
            rows.map(|row| {
                row.map_err(|error| classify(path, &error))
                    .and_then(|row| decode(path, row))
            })
            .collect()
        })
        .await
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        let id = id.as_str().to_owned();
        self.with_conn(move |conn, path| {
            conn.execute(
                "WITH RECURSIVE nested(id) AS (
                    SELECT ?1
                    UNION SELECT s.id FROM sessions s JOIN nested n ON s.parent_id = n.id
                 )
                 DELETE FROM sessions WHERE id IN (SELECT id FROM nested)",
                params![id],
            )
            .map_err(|error| classify(path, &error))?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
