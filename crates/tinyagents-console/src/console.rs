//! The console: its stores, options and routes.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use parking_lot::Mutex;
use tinyagents_core::RunId;
use tinyagents_ledger::EffectLedger;
use tinyagents_orchestrator::SessionStore;
use tinyagents_runs::SharedRunStore;

use crate::auth::{self, Guard};
use crate::host::ConsoleHost;
use crate::{live, pages};

/// What the console reads and writes: the run store, the effect ledger the
/// runs write and the session store, all shared with the processes that
/// run the agents.
#[derive(Clone)]
pub struct ConsoleStores {
    /// Runs, their waiting calls, decisions, history and journals.
    pub runs: SharedRunStore,
    /// What each call did; the calls in doubt.
    pub ledger: Arc<dyn EffectLedger>,
    /// Conversations.
    pub sessions: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for ConsoleStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleStores")
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

/// How a console is set up.
#[derive(Debug, Clone, Default)]
pub struct ConsoleOptions {
    /// The token every request must carry; `None` makes one (32 random
    /// bytes, hex) that [`Console::token`] tells.
    pub token: Option<String>,
    /// Who decides and resolves from this console, as recorded with each
    /// decision and finding.
    pub operator: String,
    /// The `Host` names (`name:port`) requests may carry besides the
    /// loopback names of the address [`Console::serve`] listens on: a host
    /// that mounts [`Console::router`] names its own here.
    pub hosts: Vec<String>,
    /// Where the stores are, as shown in the pages (no password).
    pub store_shown: String,
}

/// Why a console could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// The token given is too short to be a secret.
    #[error("the console token must have at least {min} characters (it has {len})")]
    WeakToken {
        /// Its length.
        len: usize,
        /// The least accepted.
        min: usize,
    },
    /// The operating system gave no random bytes for a token.
    #[error("no random bytes for the console token: {0}")]
    Random(#[source] tinyagents_core::ErrorSource),
    /// Serving failed.
    #[error("the console could not serve on {addr}: {source}")]
    Serve {
        /// Where.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The shared state of a console's handlers.
pub(crate) struct Inner {
    pub(crate) stores: ConsoleStores,
    pub(crate) options: ConsoleOptions,
    pub(crate) host: Option<Arc<dyn ConsoleHost>>,
    pub(crate) guard: Guard,
    /// What the host last said of a run (its hook's words or error).
    pub(crate) said: Mutex<HashMap<RunId, (bool, String)>>,
}

/// A console over a set of stores.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("store", &self.inner.options.store_shown)
            .field("operator", &self.inner.options.operator)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `stores`; with no host, decided runs are left for a
    /// worker and recovery is not offered.
    pub fn new(stores: ConsoleStores, options: ConsoleOptions) -> Result<Self, ConsoleError> {
        Self::build(stores, options, None)
    }

    /// A console whose host resumes and recovers runs.
    pub fn with_host(
        stores: ConsoleStores,
        options: ConsoleOptions,
        host: Arc<dyn ConsoleHost>,
    ) -> Result<Self, ConsoleError> {
        Self::build(stores, options, Some(host))
    }

    fn build(
        stores: ConsoleStores,
        mut options: ConsoleOptions,
        host: Option<Arc<dyn ConsoleHost>>,
    ) -> Result<Self, ConsoleError> {
        let token = match options.token.take() {
            Some(token) => token,
            None => auth::new_token()?,
        };
        if token.len() < auth::MIN_TOKEN_LEN {
            return Err(ConsoleError::WeakToken {
                len: token.len(),
                min: auth::MIN_TOKEN_LEN,
            });
        }
        if options.operator.trim().is_empty() {
            "someone".clone_into(&mut options.operator);
        }
        let guard = Guard::new(token, &options.hosts)?;
        Ok(Self {
            inner: Arc::new(Inner {
                stores,
                options,
                host,
                guard,
                said: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The token requests must carry.
    pub fn token(&self) -> &str {
        self.inner.guard.token()
    }

    /// The console's routes, for a host to serve (or nest) itself: every
    /// request checked by the token, `Host` and `Origin` rules.
    pub fn router(&self) -> Router {
        routes(Arc::clone(&self.inner), self.inner.guard.clone())
    }

    /// Serves the console on `listener` until `shutdown` completes; requests
    /// may name the listener's address (and `localhost` for a loopback
    /// one) as their `Host`.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ConsoleError> {
        let addr = listener
            .local_addr()
            .map_err(|source| ConsoleError::Serve {
                addr: "?".to_owned(),
                source,
            })?;
        let guard = self.inner.guard.serving(addr);
        let app = routes(Arc::clone(&self.inner), guard);
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| ConsoleError::Serve {
                addr: addr.to_string(),
                source,
            })
    }

    /// The URL that opens the console at `addr` with its token (the token
    /// becomes a cookie and leaves the address bar).
    pub fn url(&self, addr: SocketAddr) -> String {
        format!("http://{addr}/?token={}", self.token())
    }
}

fn routes(inner: Arc<Inner>, guard: Guard) -> Router {
    Router::new()
        .route("/", get(pages::runs::page))
        .route("/runs/{run}", get(pages::run::page))
        .route("/runs/{run}/tree", get(pages::run::fragment))
        .route("/runs/{run}/live", get(live::stream))
        .route("/runs/{run}/resume", post(pages::actions::resume))
        .route("/runs/{run}/recover", post(pages::actions::recover))
        .route("/inbox", get(pages::inbox::page))
        .route("/decide", post(pages::actions::decide))
        .route("/doubt", get(pages::doubt::page))
        .route("/resolve", post(pages::actions::resolve))
        .route("/sessions", get(pages::sessions::list))
        .route("/sessions/{session}", get(pages::sessions::page))
        .route("/assets/console.css", get(pages::assets::css))
        .route("/assets/console.js", get(pages::assets::js))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(guard, auth::check))
        .with_state(inner)
}
