//! `SqliteRunStore`: the run store in one SQLite file (WAL), what the
//! command line keeps beside its ledger (`runs.db`).
//!
//! The file carries `application_id` ([`RUN_STORE_APPLICATION_ID`]) and
//! `user_version` (the schema version, [`RUN_STORE_SCHEMA_VERSION`]); a
//! file of another application or a newer version is refused, a damaged
//! one is [`RunStoreError::Corrupt`]. Version 1 is the command line's
//! earlier `runs.db`: migrating keeps its table as `runs_v1`, unread.
//! Every statement runs on tokio's blocking pool, never on the runtime's
//! threads; every check-then-write is one `BEGIN IMMEDIATE` transaction,
//! so several processes may share the file.

mod read;
mod schema;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, ErrorCode, OptionalExtension as _};

use crate::error::{RunStoreError, RunStoreResult};
use crate::seal::SealKey;

pub use schema::{RUN_STORE_APPLICATION_ID, RUN_STORE_SCHEMA_VERSION};

/// How a [`SqliteRunStore`] is opened.
#[derive(Debug, Clone, Default)]
pub struct SqliteRunStoreOptions {
    /// The key to seal with; the store's own (generated once and kept in
    /// the file) when `None`. See [`SealKey`] for what each protects
    /// against.
    pub seal_key: Option<SealKey>,
    /// Refuse a missing file instead of creating it.
    pub must_exist: bool,
}

/// Runs in a SQLite file. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct SqliteRunStore {
    conn: Arc<Mutex<Connection>>,
    key: SealKey,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for SqliteRunStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteRunStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteRunStore {
    /// Opens (or creates) the store at `path` with its own key.
    pub async fn open(path: impl Into<PathBuf>) -> RunStoreResult<Self> {
        Self::open_with(path, SqliteRunStoreOptions::default()).await
    }

    /// Opens the store at `path` with `options`.
    pub async fn open_with(
        path: impl Into<PathBuf>,
        options: SqliteRunStoreOptions,
    ) -> RunStoreResult<Self> {
        let path = path.into();
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || Self::open_blocking(&path, options))
            .await
            .map_err(|error| RunStoreError::Storage {
                operation: "open",
                detail: format!("{shown}: {error}"),
                source: Some(error.into()),
            })?
    }

    fn open_blocking(path: &Path, options: SqliteRunStoreOptions) -> RunStoreResult<Self> {
        let shown = path.display().to_string();
        if options.must_exist && !path.exists() {
            return Err(RunStoreError::Storage {
                operation: "open",
                detail: format!("{shown} does not exist"),
                source: None,
            });
        }
        let classify = |error: rusqlite::Error| classify(&shown, "open", error);
        let mut conn = Connection::open(path).map_err(classify)?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(classify)?;
        schema::migrate(&mut conn, &shown)?;
        let key = match options.seal_key {
            Some(key) => key,
            None => own_key(&conn, &shown)?,
        };
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            key,
            path: Arc::new(path.to_owned()),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the blocking pool with the connection.
    async fn with<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection, &SealKey) -> RunStoreResult<T> + Send + 'static,
    ) -> RunStoreResult<T> {
        let conn = Arc::clone(&self.conn);
        let key = self.key.clone();
        tokio::task::spawn_blocking(move || work(&mut conn.lock(), &key))
            .await
            .map_err(|error| RunStoreError::Storage {
                operation,
                detail: error.to_string(),
                source: Some(error.into()),
            })?
    }
}

/// The store's own key: read from the file, or generated and kept there
/// the first time (one row, inserted once however many processes race).
fn own_key(conn: &Connection, shown: &str) -> RunStoreResult<SealKey> {
    let classify = |error: rusqlite::Error| classify(shown, "read the sealing key", error);
    let candidate = SealKey::generate()?;
    conn.execute(
        "INSERT OR IGNORE INTO store_key (id, key) VALUES (1, ?1)",
        [candidate.as_bytes()],
    )
    .map_err(classify)?;
    let stored: Option<Vec<u8>> = conn
        .query_row("SELECT key FROM store_key WHERE id = 1", [], |row| {
            row.get(0)
        })
        .optional()
        .map_err(classify)?;
    SealKey::from_bytes(&stored.unwrap_or_default())
}

/// A SQLite error as the store reports it: a damaged file is corrupt.
pub(crate) fn classify(
    path: &str,
    operation: &'static str,
    error: rusqlite::Error,
) -> RunStoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => RunStoreError::Corrupt {
            path: path.to_owned(),
            detail: error.to_string(),
            source: Some(error.into()),
        },
        _ => RunStoreError::Storage {
            operation,
            detail: error.to_string(),
            source: Some(error.into()),
        },
    }
}
