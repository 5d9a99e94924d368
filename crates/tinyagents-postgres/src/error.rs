//! What can go wrong talking to PostgreSQL, before it is said in the words
//! of the ledger ([`LedgerError`]), of the session store ([`SessionError`])
//! or of the run store ([`RunStoreError`]).

use tinyagents_core::ErrorSource;
use tinyagents_ledger::LedgerError;
use tinyagents_orchestrator::SessionError;
use tinyagents_runs::RunStoreError;

/// Why the database could not be opened or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The connection string does not parse.
    #[error("PostgreSQL connection string: {detail}")]
    Url {
        /// What the parser said.
        detail: String,
        /// The parser's error (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// TLS could not be set up (a CA file that does not read).
    #[error("PostgreSQL TLS: {detail}")]
    Tls {
        /// What was wrong.
        detail: String,
    },
    /// The server could not be reached or refused the connection.
    #[error("PostgreSQL at {target} is unreachable: {detail}")]
    Unreachable {
        /// Host, port and database (never the password).
        target: String,
        /// What failed.
        detail: String,
        /// The client's or the pool's error (`detail` already says it),
        /// when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// No connection of the pool became free in time.
    #[error(
        "PostgreSQL at {target}: no connection free in the pool of {size} within {waited_ms} ms"
    )]
    PoolExhausted {
        /// Host, port and database.
        target: String,
        /// The pool's size.
        size: usize,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// The database only reads (a standby, or `default_transaction_read_only`).
    #[error("PostgreSQL at {target} is read-only: {operation} cannot write ({detail})")]
    ReadOnly {
        /// Host, port and database.
        target: String,
        /// What was being written.
        operation: &'static str,
        /// What the server said.
        detail: String,
    },
    /// The database holds a schema newer than this build knows.
    #[error(
        "the {component} schema in the database has version {found}, newer than the newest \
         this build knows ({supported}); upgrade tinyagents-postgres to use it"
    )]
    TooNew {
        /// Which schema (ledger, sessions, runs).
        component: &'static str,
        /// Its version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// A migration failed (nothing of it was applied).
    #[error("migrating the {component} schema to version {version} failed: {detail}")]
    Migration {
        /// Which schema.
        component: &'static str,
        /// The version it was going to.
        version: i64,
        /// What the server said.
        detail: String,
        /// The client's error (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
    /// A statement failed.
    #[error("PostgreSQL: {operation} failed: {detail}")]
    Query {
        /// What was being done.
        operation: &'static str,
        /// What the server said, with its SQLSTATE.
        detail: String,
        /// The client's error (`detail` already says it).
        #[source]
        source: Option<ErrorSource>,
    },
}

impl PgError {
    /// A failed statement of `operation`.
    pub(crate) fn query(operation: &'static str, err: tokio_postgres::Error) -> Self {
        Self::Query {
            operation,
            detail: detail(&err),
            source: Some(err.into()),
        }
    }

    /// This error as the run store reports it, for `operation`: a newer
    /// schema is [`RunStoreError::TooNew`], anything else
    /// [`RunStoreError::Storage`].
    pub(crate) fn into_run_store(self, operation: &'static str) -> RunStoreError {
        match self {
            Self::TooNew {
                found, supported, ..
            } => RunStoreError::TooNew {
                path: "postgres (tinyagents_schema: runs)".into(),
                found,
                supported,
            },
            Self::Query { detail, source, .. } => RunStoreError::Storage {
                operation,
                detail,
                source,
            },
            other => RunStoreError::Storage {
                operation,
                detail: other.to_string(),
                source: Some(other.into()),
            },
        }
    }
}

/// The server's message and SQLSTATE, or the client's error with its cause.
pub(crate) fn detail(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    tinyagents_core::error_chain(err)
}

/// Whether the server refused a write because it only reads (SQLSTATE
/// 25006).
pub(crate) fn is_read_only(err: &tokio_postgres::Error) -> bool {
    err.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

impl From<PgError> for LedgerError {
    fn from(err: PgError) -> Self {
        match err {
            PgError::TooNew {
                found, supported, ..
            } => LedgerError::UnsupportedVersion {
                path: "postgres (tinyagents_schema: ledger)".into(),
                found,
                supported,
            },
            PgError::Unreachable {
                target,
                detail,
                source,
            } => LedgerError::Open {
                path: target.into(),
                detail,
                source,
            },
            other => LedgerError::Storage {
                operation: "postgres",
                detail: other.to_string(),
                source: Some(other.into()),
            },
        }
    }
}

impl From<PgError> for SessionError {
    fn from(err: PgError) -> Self {
        match err {
            PgError::TooNew {
                found, supported, ..
            } => SessionError::TooNew {
                path: "postgres (tinyagents_schema: sessions)".into(),
                found,
                supported,
            },
            other => SessionError::Store {
                message: other.to_string(),
                source: Some(other.into()),
            },
        }
    }
}
