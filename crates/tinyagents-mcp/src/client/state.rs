//! What a connection shares with its tools and its notification handler:
//! the catalogue of offered tools, and where each call's progress goes.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rmcp::ClientHandler;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RoleClient};
use tinytools::ToolSpec;
use tokio::sync::watch;

use super::pin::PinnedTool;
use super::progress::ProgressRoutes;
use super::remote::RemoteServer;

/// The tools a server offers now.
#[derive(Default)]
pub(crate) struct Catalogue {
    /// Counts the lists read, from 1.
    pub(crate) generation: u64,
    /// The tools listed now, in the server's order, vetted or not. Kept as
    /// specs, not as tools: a tool holds the connection, which holds this.
    pub(crate) tools: Vec<Listed>,
    /// The definition the host vetted of each tool, by the server's name:
    /// the first list's (or the lock's), and each change accepted since.
    pub(crate) vetted: HashMap<String, PinnedTool>,
}

/// How a tool made from definition `pin` stands now.
pub(crate) enum Standing {
    /// Listed, vetted, and the definition it was made from.
    Current,
    /// The server no longer lists it.
    Gone,
    /// The server lists a definition the host has not vetted: what changed.
    Unvetted(Vec<&'static str>),
    /// The host accepted another definition since the tool was made.
    Stale,
}

impl Catalogue {
    /// How a tool of `remote` made from `pin` stands.
    pub(crate) fn standing(&self, remote: &str, pin: &PinnedTool) -> Standing {
        let Some(listed) = self.tools.iter().find(|t| t.remote == remote) else {
            return Standing::Gone;
        };
        match self.vetted.get(remote) {
            None => Standing::Unvetted(Vec::new()),
            Some(vetted) if vetted.definition != listed.pin.definition => {
                Standing::Unvetted(listed.pin.changes_from(vetted))
            }
            Some(vetted) if vetted.definition != pin.definition => Standing::Stale,
            Some(_) => Standing::Current,
        }
    }

    /// Whether `listed` is offered: listed with the definition the host
    /// vetted.
    pub(crate) fn offers(&self, listed: &Listed) -> bool {
        self.vetted
            .get(&listed.remote)
            .is_some_and(|v| v.definition == listed.pin.definition)
    }

    /// The tools offered now, in the server's order.
    pub(crate) fn offered(&self) -> impl Iterator<Item = &Listed> {
        self.tools.iter().filter(|t| self.offers(t))
    }
}

/// One tool of the list: the server's name, the spec it maps to, and its
/// definition's pin.
#[derive(Clone)]
pub(crate) struct Listed {
    pub(crate) remote: String,
    pub(crate) spec: ToolSpec,
    pub(crate) pin: PinnedTool,
}

/// One connection's shared state.
pub(crate) struct Connection {
    pub(crate) server: RemoteServer,
    pub(crate) catalogue: RwLock<Catalogue>,
    /// Progress of calls in flight, by the token their request carries.
    pub(crate) progress: ProgressRoutes,
    /// Tells watchers a list was read (its generation).
    pub(crate) listed: watch::Sender<u64>,
    /// Held by a refresh while it lists and installs.
    pub(crate) refreshing: tokio::sync::Mutex<()>,
    /// Problems met refreshing after `list_changed`, for the host.
    pub(crate) refresh_failure: RwLock<Option<String>>,
}

impl Connection {
    pub(crate) fn new(server: RemoteServer) -> Arc<Self> {
        Arc::new(Self {
            server,
            catalogue: RwLock::new(Catalogue::default()),
            progress: ProgressRoutes::default(),
            listed: watch::channel(0).0,
            refreshing: tokio::sync::Mutex::new(()),
            refresh_failure: RwLock::new(None),
        })
    }

    /// How a tool of `remote` made from `pin` stands now.
    pub(crate) fn standing(&self, remote: &str, pin: &PinnedTool) -> Standing {
        self.catalogue.read().standing(remote, pin)
    }
}

/// The client's side of the protocol: notifications from the server.
#[derive(Clone)]
pub(crate) struct Handler(pub(crate) Arc<Connection>);

impl ClientHandler for Handler {
    // Progress is routed as it is read (`routed.rs`), not here: rmcp runs
    // this handler in a task of its own, which may run too late.

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let connection = Arc::clone(&self.0);
        let peer = context.peer;
        // Not awaited here: the list is read by a request, and the
        // notification handler must not wait on the connection it serves.
        tokio::spawn(async move {
            let failure = super::list::refresh(&connection, &peer)
                .await
                .err()
                .map(|error| error.to_string());
            if let Some(failure) = &failure {
                tracing::warn!(server = %connection.server.name, "{failure}");
            }
            *connection.refresh_failure.write() = failure;
        });
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("tinyagents", env!("CARGO_PKG_VERSION")),
        )
    }
}
