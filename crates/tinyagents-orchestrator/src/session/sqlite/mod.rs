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

use parking_lot::Mutex;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use super::SessionError;
use tinyagents_core::SessionId;

mod store;
#[cfg(test)]
mod tests;

/// The SQLite `application_id` of a session store: the bytes `tASs`.
pub const SESSION_APPLICATION_ID: i32 = 0x7441_5373;

/// The schema, one migration per version: `MIGRATIONS[k]` takes a file
/// from version `k` to `k + 1`. Append only.
///
/// Version 2 keeps a conversation as rows of `session_messages`, one per
/// write (a JSON array of the messages that write added), so an append
/// inserts one row and never reads or rewrites the earlier ones; a
/// version-1 conversation becomes its session's first row. `seq` is
/// `AUTOINCREMENT`, so a row's number is never used again, and a session's
/// `mark` (the number of its last row) tells writes apart even across a
/// deletion ([`SessionStamp`](super::SessionStamp)).
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        parent_id TEXT,
        agent_id TEXT,
        conversation TEXT NOT NULL,
        format INTEGER NOT NULL,
        messages TEXT NOT NULL,
        revision INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_parent ON sessions (parent_id);",
    "CREATE TABLE session_messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        messages TEXT NOT NULL
    );
    CREATE INDEX session_messages_by_session ON session_messages (session_id, seq);
    INSERT INTO session_messages (session_id, messages)
        SELECT id, messages FROM sessions ORDER BY id;
    ALTER TABLE sessions ADD COLUMN mark INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET mark = (
        SELECT max(seq) FROM session_messages WHERE session_id = sessions.id
    );
    ALTER TABLE sessions DROP COLUMN messages;",
];

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
                source: Some(error.into()),
            })?
    }

    /// Like [`Self::open`], on the calling thread (for synchronous hosts).
    pub fn open_blocking(path: &Path) -> Result<Self, SessionError> {
        let shown = path.display().to_string();
        let classify = |error: rusqlite::Error| classify(&shown, error);
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
                source: None,
            });
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(classify)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(SessionError::Store {
                message: format!("{shown}: the file system does not allow WAL mode ({mode})"),
                source: None,
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

    /// The ids of the stored sessions that are not a child session, the
    /// most recently written first (for hosts that list sessions; the
    /// [`SessionStore`](super::SessionStore) trait has no listing).
    pub async fn top_level_sessions(&self) -> Result<Vec<SessionId>, SessionError> {
        self.with_conn(|conn, path| {
            let mut statement = conn
                .prepare(
                    "SELECT id FROM sessions WHERE parent_id IS NULL ORDER BY updated_at DESC, id",
                )
                .map_err(|error| classify(path, error))?;
            let ids = statement
                .query_map([], |row| row.get::<_, String>(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|error| classify(path, error))?;
            Ok(ids.into_iter().map(SessionId::from).collect())
        })
        .await
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
                source: Some(error.into()),
            })?
    }
}

fn classify(path: &str, error: rusqlite::Error) -> SessionError {
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => SessionError::Corrupt {
            path: path.to_owned(),
            message: error.to_string(),
            source: Some(error.into()),
        },
        _ => SessionError::Store {
            message: format!("{path}: {error}"),
            source: Some(error.into()),
        },
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
