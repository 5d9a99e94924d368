//! The database handle: a bounded pool of connections, dedicated
//! connections for the ledger's writer, and the settings every connection
//! carries.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use std::path::PathBuf;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{PgError, detail};

/// The I/O of a connection, as a future its owner polls.
pub(crate) type Driver = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Awaits `work` on a client whose connection is `driver`, polling the
/// connection meanwhile; once the connection has ended, `work` (which then
/// fails) is awaited alone.
pub(crate) async fn driven<T>(
    driver: &mut Option<Driver>,
    work: impl std::future::Future<Output = T>,
) -> T {
    let Some(connection) = driver.as_mut() else {
        return work.await;
    };
    tokio::pin!(work);
    tokio::select! {
        biased;
        out = &mut work => out,
        () = connection => {
            *driver = None;
            work.await
        }
    }
}

/// How to reach the database and how much of it to use.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The connection string: `postgres://user:pass@host:port/db?…` or
    /// `host=… port=… user=… dbname=…`.
    pub url: String,
    /// Connections in the pool (reads, claims, heartbeats, sessions); the
    /// ledger's writer has its own besides. Default 16.
    pub pool_size: usize,
    /// How long a connection may take to open. Default 5 s.
    pub connect_timeout: Duration,
    /// How long a caller waits for a free connection of the pool before
    /// [`PgError::PoolExhausted`]. Default 5 s.
    pub wait_timeout: Duration,
    /// The server's `statement_timeout` for every statement. Default 30 s.
    pub statement_timeout: Duration,
    /// The server's `idle_in_transaction_session_timeout`: a process paused
    /// inside a transaction (a stopped worker) has it aborted, and its row
    /// locks released, after this long. Default 10 s.
    pub idle_in_transaction_timeout: Duration,
    /// Trust only the CA certificates of this PEM file for the server's
    /// certificate (libpq's `sslrootcert`); `None`: the platform's roots.
    pub ca_file: Option<PathBuf>,
}

impl PgOptions {
    /// The defaults, for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Duration::from_secs(10),
            ca_file: None,
        }
    }

    /// Sets [`ca_file`](Self::ca_file): the server's certificate must chain
    /// to a certificate of this PEM file (a managed database's CA bundle).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Sets [`pool_size`](Self::pool_size) (at least 1).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Sets [`wait_timeout`](Self::wait_timeout).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// Sets [`statement_timeout`](Self::statement_timeout).
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets [`idle_in_transaction_timeout`](Self::idle_in_transaction_timeout).
    pub fn idle_in_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_in_transaction_timeout = timeout;
        self
    }
}

/// A PostgreSQL database shared by the ledger, the session store and the
/// run store. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    target: String,
    options: PgOptions,
}

impl fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgDatabase")
            .field("target", &self.target)
            .field("pool_size", &self.options.pool_size)
            .finish_non_exhaustive()
    }
}

impl PgDatabase {
    /// Connects with the default options (see [`PgOptions`]).
    pub async fn connect(url: &str) -> Result<Self, PgError> {
        Self::connect_with(PgOptions::new(url)).await
    }

    /// Connects: parses the string, opens one connection to check the
    /// server answers (so an unreachable server is an error here, not at the
    /// first call), and keeps the pool.
    pub async fn connect_with(options: PgOptions) -> Result<Self, PgError> {
        let mut config =
            tokio_postgres::Config::from_str(&options.url).map_err(|e| PgError::Url {
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
        config.connect_timeout(options.connect_timeout);
        // Every connection: durable commits whatever the server's default,
        // bounded statements, and no transaction left open by a paused
        // process holding its locks for ever.
        // The connection string's own `options` (a search_path, say) come
        // first; ours after them win where both set the same.
        let ours = format!(
            "-c synchronous_commit=on -c statement_timeout={} \
             -c idle_in_transaction_session_timeout={}",
            options.statement_timeout.as_millis(),
            options.idle_in_transaction_timeout.as_millis(),
        );
        let combined = match config.get_options() {
            Some(theirs) if !theirs.trim().is_empty() => format!("{theirs} {ours}"),
            _ => ours,
        };
        config.options(combined);
        if config.get_application_name().is_none() {
            config.application_name("tinyagents");
        }
        let target = describe(&config);
        let tls = crate::tls::connector(options.ca_file.as_deref())?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .wait_timeout(Some(options.wait_timeout))
            .create_timeout(Some(options.connect_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| PgError::Url {
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
        let database = Self {
            pool,
            config,
            tls,
            target,
            options,
        };
        drop(database.pooled().await?);
        Ok(database)
    }

    /// Host, port and database, for messages (never the password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The options it was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.options
    }

    /// A connection of the pool, waiting at most the wait timeout.
    pub(crate) async fn pooled(&self) -> Result<Object, PgError> {
        self.pool.get().await.map_err(|err| match err {
            deadpool_postgres::PoolError::Timeout(_) => PgError::PoolExhausted {
                target: self.target.clone(),
                size: self.options.pool_size,
                waited_ms: u64::try_from(self.options.wait_timeout.as_millis()).unwrap_or(u64::MAX),
            },
            deadpool_postgres::PoolError::Backend(e) => self.unreachable(e),
            other => PgError::Unreachable {
                target: self.target.clone(),
                detail: other.to_string(),
                source: Some(other.into()),
            },
        })
    }

    /// A connection of its own, outside the pool (the ledger's writer),
    /// with its driver task spawned.
    pub(crate) async fn dedicated(&self) -> Result<Client, PgError> {
        let (client, driver) = self.dedicated_driven().await?;
        tokio::spawn(driver);
        Ok(client)
    }

    /// A connection of its own whose I/O its owner drives (polling the
    /// returned [`Driver`] while it waits on the client), so that answers
    /// reach it without a hop through another task.
    pub(crate) async fn dedicated_driven(&self) -> Result<(Client, Driver), PgError> {
        let (client, connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| self.unreachable(e))?;
        let driver: Driver = Box::pin(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "postgres connection closed");
            }
        });
        Ok((client, driver))
    }

    /// Connection errors say where: this database.
    pub(crate) fn unreachable(&self, err: tokio_postgres::Error) -> PgError {
        PgError::Unreachable {
            target: self.target.clone(),
            detail: detail(&err),
            source: Some(err.into()),
        }
    }
}

/// `host:port/dbname` of a configuration.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}
