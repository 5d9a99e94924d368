//! Where the runs are kept: a directory of SQLite files (ledger, sessions,
//! run records) or one PostgreSQL database, and the ledger a held run
//! writes through. Everything else of the command line speaks to the
//! stores through their traits, so every command works on either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use tinyagents::core::RunId;
use tinyagents::ledger::{SharedLedger, SqliteLedger, SqliteOptions};
use tinyagents::orchestrator::{SessionStore, SqliteSessionStore};
use tinyagents::postgres::{
    PgDatabase, PgError, PostgresLedger, PostgresRunStore, PostgresRunStoreOptions,
    PostgresSessionStore,
};
use tinyagents::runs::{
    HeldLedger, SealKey, SharedRunStore, SqliteRunStore, SqliteRunStoreOptions,
};

use crate::file::Loaded;

/// The directory of the stores when nothing names one: in the current
/// directory.
pub(crate) const DEFAULT_STORE_DIR: &str = ".tinyagents";

/// The variable naming a file that holds the key the run records are
/// sealed with (made when missing); the store's own key otherwise.
pub(crate) const SEAL_KEY_ENV: &str = "TINYAGENTS_SEAL_KEY_FILE";

/// Which store a command uses.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// SQLite files in a directory.
    Dir(StorePaths),
    /// A PostgreSQL database (its connection string).
    Database(String),
}

/// The files of a directory store.
#[derive(Debug, Clone)]
pub(crate) struct StorePaths {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// The ledger (SQLite).
    pub(crate) ledger: PathBuf,
    /// The session store (SQLite).
    pub(crate) sessions: PathBuf,
    /// The run records (SQLite).
    pub(crate) runs: PathBuf,
}

impl StorePaths {
    /// The store in `dir`, with the default file names.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            ledger: dir.join("ledger.db"),
            sessions: dir.join("sessions.db"),
            runs: dir.join("runs.db"),
        }
    }
}

impl Place {
    /// The store of a command: `--db` first, then `--store`, then the
    /// agents file's `[store]` (its `url`, or its directory and files,
    /// relative to the file), then `.tinyagents` here.
    pub(crate) fn choose(db: Option<&str>, dir: Option<&Path>, loaded: Option<&Loaded>) -> Self {
        if let Some(url) = db.filter(|u| !u.trim().is_empty()) {
            return Self::Database(url.to_owned());
        }
        let store = loaded.map(|l| &l.file.store);
        if dir.is_none()
            && let Some(url) = store.and_then(|s| s.url.as_ref())
        {
            return Self::Database(url.get_ref().clone());
        }
        let base = match (
            dir,
            loaded.and_then(|l| Some((l, l.file.store.dir.as_ref()?))),
        ) {
            (Some(dir), _) => dir.to_owned(),
            (None, Some((loaded, named))) => loaded.dir.join(named.get_ref()),
            (None, None) => PathBuf::from(DEFAULT_STORE_DIR),
        };
        let mut paths = StorePaths::in_dir(&base);
        if let Some(store) = store {
            if let Some(ledger) = &store.ledger {
                paths.ledger = base.join(ledger.get_ref());
            }
            if let Some(sessions) = &store.sessions {
                paths.sessions = base.join(sessions.get_ref());
            }
        }
        Self::Dir(paths)
    }

    /// How the store is named to a person (a database without its
    /// password).
    pub(crate) fn shown(&self) -> String {
        match self {
            Self::Dir(paths) => paths.dir.display().to_string(),
            Self::Database(url) => shown_url(url),
        }
    }
}

/// A connection string without its password.
fn shown_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url
            .split_whitespace()
            .filter(|part| !part.starts_with("password="))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The open stores of one place.
pub(crate) struct Stores {
    /// Where they are.
    pub(crate) place: Place,
    /// The run records.
    pub(crate) runs: SharedRunStore,
    /// The effect ledger.
    pub(crate) ledger: SharedLedger,
    /// The sessions.
    pub(crate) sessions: Arc<dyn SessionStore>,
    /// The directory MCP servers' logs go to.
    pub(crate) logs: PathBuf,
    backend: Backend,
}

enum Backend {
    Sqlite(Arc<SqliteLedger>, SqliteSessionStore),
    Postgres(Arc<PostgresLedger>, Box<PostgresSessionStore>),
}

impl Stores {
    /// Opens the stores of `place`. A directory is made when `create`;
    /// otherwise its run records must exist.
    pub(crate) async fn open(place: Place, create: bool) -> anyhow::Result<Self> {
        let key = seal_key()?;
        match &place {
            Place::Dir(paths) => {
                if create {
                    std::fs::create_dir_all(&paths.dir).with_context(|| {
                        format!("creating the store directory {}", paths.dir.display())
                    })?;
                } else if !paths.runs.exists() {
                    anyhow::bail!(
                        "no runs at {} (run `tinyagents run FILE INPUT` first, or pass --store DIR or --db URL)",
                        paths.dir.display()
                    );
                }
                let options = SqliteOptions {
                    create_if_missing: true,
                    ..SqliteOptions::default()
                };
                let ledger = Arc::new(
                    SqliteLedger::open_with(&paths.ledger, options)
                        .await
                        .with_context(|| {
                            format!("opening the ledger {}", paths.ledger.display())
                        })?,
                );
                let sessions = SqliteSessionStore::open(&paths.sessions)
                    .await
                    .with_context(|| {
                        format!("opening the session store {}", paths.sessions.display())
                    })?;
                let runs = SqliteRunStore::open_with(
                    &paths.runs,
                    SqliteRunStoreOptions {
                        seal_key: key,
                        ..SqliteRunStoreOptions::default()
                    },
                )
                .await
                .with_context(|| format!("opening the run records {}", paths.runs.display()))?;
                Ok(Self {
                    logs: paths.dir.clone(),
                    runs: Arc::new(runs),
                    ledger: Arc::clone(&ledger) as SharedLedger,
                    sessions: Arc::new(sessions.clone()),
                    backend: Backend::Sqlite(ledger, sessions),
                    place,
                })
            }
            Place::Database(url) => {
                let shown = shown_url(url);
                let db = PgDatabase::connect(url).await.map_err(|error| {
                    if matches!(error, PgError::Url { .. }) {
                        crate::command::BadInput::caused(format!("--db: {error}"), error)
                    } else {
                        anyhow::Error::new(error).context(format!("connecting to {shown}"))
                    }
                })?;
                let ledger = Arc::new(
                    PostgresLedger::open(&db)
                        .await
                        .with_context(|| format!("opening the ledger in {shown}"))?,
                );
                let sessions = PostgresSessionStore::open(&db)
                    .await
                    .with_context(|| format!("opening the session store in {shown}"))?;
                let runs =
                    PostgresRunStore::open_with(&db, PostgresRunStoreOptions { seal_key: key })
                        .await
                        .with_context(|| format!("opening the run records in {shown}"))?;
                let logs = PathBuf::from(DEFAULT_STORE_DIR);
                if create {
                    std::fs::create_dir_all(&logs)
                        .with_context(|| format!("creating {}", logs.display()))?;
                }
                Ok(Self {
                    logs,
                    runs: Arc::new(runs),
                    ledger: Arc::clone(&ledger) as SharedLedger,
                    sessions: Arc::new(sessions.clone()),
                    backend: Backend::Postgres(ledger, Box::new(sessions)),
                    place,
                })
            }
        }
    }

    /// The ledger run `run` writes through while held under `epoch`: its
    /// finished mark waits for the run record's end, and on PostgreSQL
    /// every write is fenced by the epoch.
    pub(crate) fn held_ledger(&self, run: &RunId, epoch: u64) -> Arc<HeldLedger> {
        let inner: SharedLedger = match &self.backend {
            Backend::Sqlite(ledger, _) => Arc::clone(ledger) as SharedLedger,
            Backend::Postgres(ledger, _) => Arc::new(ledger.fenced(run.clone(), epoch)),
        };
        Arc::new(HeldLedger::new(inner, run.clone()))
    }

    /// Makes the ledger's last rows durable (settled rows ride on a later
    /// commit: exiting without this would leave calls that settled
    /// looking in doubt).
    pub(crate) async fn close(&self) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Sqlite(ledger, _) => ledger.shutdown().await,
            Backend::Postgres(ledger, _) => ledger.shutdown().await,
        }
        .context("making the ledger's last rows durable")
    }

    /// The sessions that are not a child session, most recently written
    /// first.
    pub(crate) async fn top_level_sessions(
        &self,
    ) -> anyhow::Result<Vec<tinyagents::core::SessionId>> {
        Ok(match &self.backend {
            Backend::Sqlite(_, sessions) => sessions.top_level_sessions().await?,
            Backend::Postgres(_, sessions) => sessions.top_level_sessions().await?,
        })
    }
}

/// The host's sealing key, when [`SEAL_KEY_ENV`] names a file.
pub(crate) fn seal_key() -> anyhow::Result<Option<SealKey>> {
    match std::env::var_os(SEAL_KEY_ENV).filter(|v| !v.is_empty()) {
        Some(path) => Ok(Some(SealKey::load_or_create(Path::new(&path))?)),
        None => Ok(None),
    }
}

/// Who a person at this terminal is, for decisions and the history:
/// `--by`, else `$USER`, else `someone`.
pub(crate) fn person(by: Option<&str>) -> String {
    by.map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "someone".to_owned())
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_shown_connection_string_has_no_password() {
        assert_eq!(
            shown_url("postgres://app:s3cret@db.internal:5432/runs"),
            "postgres://app@db.internal:5432/runs"
        );
        assert_eq!(
            shown_url("host=db dbname=runs password=s3cret user=app"),
            "host=db dbname=runs user=app"
        );
    }
}
