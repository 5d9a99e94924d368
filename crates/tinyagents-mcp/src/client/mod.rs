//! The client: an MCP server's tools as tinyagents tools.

mod budget;
mod content;
mod list;
mod pin;
mod process;
mod progress;
mod remote;
mod routed;
mod state;
mod tool;

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tinytools::Tool;

pub use list::ToolListChange;
pub use pin::{MCP_LOCK_FORMAT, McpLock, PinnedTool, UnvettedTool};
pub use remote::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_REQUEST_TIMEOUT, RemoteServer,
    Trust,
};

use self::process::ChildServer;
use self::remote::Transport;
use self::state::{Connection, Handler};
use self::tool::McpTool;
use crate::error::McpError;

/// The HTTP client of a Streamable HTTP server. Built here, not by rmcp:
/// rmcp's default client lets reqwest set up TLS itself, which panics when
/// reqwest's rustls is compiled in without a process-wide crypto provider,
/// as it is next to the model providers. TLS is the settings every
/// tinyagents HTTPS client shares (rustls on `ring`, passed explicitly);
/// no redirects are followed (a redirected POST could lose its body or
/// carry the session to another host); no idle connections are kept
/// (rmcp's advice: a half-read body stalls a reused connection for the
/// delayed ACK).
fn http_client(server: &RemoteServer) -> Result<reqwest::Client, McpError> {
    let failed = |message: String| McpError::Connect {
        server: server.name.clone(),
        during: "setting up HTTP",
        message,
        source: None,
    };
    reqwest::Client::builder()
        .tls_backend_preconfigured(tinyagents_models::tls_client_config().map_err(failed)?)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .connect_timeout(server.connect_timeout)
        .build()
        .map_err(|e| failed(e.to_string()))
}

/// The most requests the HTTP transport keeps in flight to one server.
const MAX_CONCURRENT_HTTP_REQUESTS: usize = 64;

/// A connection to one MCP server, whose tools it offers as tinyagents
/// [`Tool`]s (see the crate's documentation for what a call goes
/// through).
///
/// ```no_run
/// # async fn f() -> Result<(), tinyagents_mcp::McpError> {
/// use tinyagents_mcp::{McpClient, RemoteServer};
/// let fs = McpClient::connect(
///     RemoteServer::stdio("fs", "node").arg("server-filesystem/dist/index.js").arg("/tmp/work"),
/// )
/// .await?;
/// let tools = fs.tools(); // fs_read_text_file, fs_write_file, …
/// # Ok(()) }
/// ```
///
/// The connection lives while the client does: dropping it (or
/// [`close`](Self::close)) ends it, and a stdio server's process is
/// stopped and reaped; calls of its tools then fail naming the closed
/// connection.
pub struct McpClient {
    connection: Arc<Connection>,
    service: RunningService<RoleClient, Handler>,
    child: Option<ChildServer>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.connection.server.name)
            .field("tools", &self.connection.catalogue.read().tools.len())
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Starts or reaches the server, initializes the session and lists its
    /// tools (every page). Fails with a clear error when the server cannot
    /// start, does not initialize within the connect timeout, or offers a
    /// tool that cannot be registered (a name that is no function name once
    /// prefixed, a collision, a schema that does not compile).
    pub async fn connect(server: RemoteServer) -> Result<Self, McpError> {
        if server.name.trim().is_empty() {
            return Err(McpError::Config("an MCP server needs a name".to_owned()));
        }
        let connection = Connection::new(server);
        let server = &connection.server;
        match &server.transport {
            Transport::Stdio { .. } => {
                let (child, stdout, stdin) = ChildServer::spawn(server)?;
                let transport = AsyncRwTransport::new_client(stdout, stdin)
                    .with_max_line_length(server.max_message_bytes);
                Self::start(connection, transport, Some(child)).await
            }
            Transport::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.max_concurrent_requests = MAX_CONCURRENT_HTTP_REQUESTS;
                config.max_json_response_size = server.max_message_bytes;
                config.max_sse_event_size = server.max_message_bytes;
                let transport =
                    StreamableHttpClientTransport::with_client(http_client(server)?, config);
                Self::start(connection, transport, None).await
            }
            Transport::Stream => Err(McpError::Config(format!(
                "MCP server '{}' is reached over a stream: connect it with \
                 McpClient::connect_stream",
                server.name
            ))),
        }
    }

    /// Initializes the session on `transport` within the connect timeout
    /// and reads the first tool list. A failure drops the transport, and
    /// with it a child process (killed and reaped).
    async fn start<T, E, A>(
        connection: Arc<Connection>,
        transport: T,
        child: Option<ChildServer>,
    ) -> Result<Self, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let server = &connection.server;
        let service = tokio::time::timeout(
            server.connect_timeout,
            Handler(Arc::clone(&connection)).serve(routed::Routed {
                inner: transport.into_transport(),
                connection: Arc::clone(&connection),
            }),
        )
        .await
        .map_err(|_| McpError::Timeout {
            server: server.name.clone(),
            during: "initializing",
            timeout: server.connect_timeout,
        })?
        .map_err(|e| McpError::Connect {
            server: server.name.clone(),
            during: "initializing",
            message: e.to_string(),
            source: Some(e.into()),
        })?;
        let tools = list::list(&connection, service.peer(), server.connect_timeout).await?;
        list::vet_first(&connection, &tools)?;
        list::install(&connection, tools);
        Ok(Self {
            connection,
            service,
            child,
        })
    }

    /// Connects to a server over `read` and `write` (newline-delimited
    /// JSON-RPC, at most the server's `max_message_bytes` a line), then
    /// lists its tools, as [`connect`](Self::connect) does.
    pub async fn connect_stream<R, W>(
        server: RemoteServer,
        read: R,
        write: W,
    ) -> Result<Self, McpError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let transport = AsyncRwTransport::new_client(read, write)
            .with_max_line_length(server.max_message_bytes);
        Self::start(Connection::new(server), transport, None).await
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.connection.server.name
    }

    /// The tools the server offers now (listed, with the definition the
    /// host vetted), to register with a harness or an agent. A tool the
    /// server stops offering, or whose definition changes, fails its calls
    /// with an error result and a `Warning` event naming why; a new or
    /// changed one is offered once the host accepts it
    /// ([`accept_changes`](Self::accept_changes)).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let peer = self.service.peer();
        self.connection
            .catalogue
            .read()
            .offered()
            .map(|listed| {
                Arc::new(McpTool::new(
                    Arc::clone(&self.connection),
                    peer.clone(),
                    listed.remote.clone(),
                    listed.spec.clone(),
                    listed.pin.clone(),
                )) as Arc<dyn Tool>
            })
            .collect()
    }

    /// The registered names of the tools offered now.
    pub fn tool_names(&self) -> Vec<String> {
        self.connection
            .catalogue
            .read()
            .offered()
            .map(|listed| listed.spec.name.clone())
            .collect()
    }

    /// The tools the server lists with a definition the host has not
    /// vetted: new since it connected, or changed since (with what
    /// changed). None of them is offered, and calls of a changed one are
    /// refused, until the host accepts them.
    pub fn unvetted(&self) -> Vec<UnvettedTool> {
        list::unvetted(&self.connection.catalogue.read())
    }

    /// Accepts the definitions the server lists now for the tools named
    /// `names` (registered names; every unvetted tool when empty): they are
    /// offered from now on, with the spec their definitions map to. Tools
    /// handed out before keep refusing calls (they were made from the old
    /// definition): take the tools again ([`tools`](Self::tools)).
    pub fn accept_changes(&self, names: &[&str]) -> ToolListChange {
        list::accept(&self.connection, names)
    }

    /// The pins of the definitions the host has vetted and the server
    /// still lists, by the server's tool name (what [`McpLock::pin`]
    /// records).
    pub fn vetted_pins(&self) -> std::collections::BTreeMap<String, PinnedTool> {
        let catalogue = self.connection.catalogue.read();
        catalogue
            .tools
            .iter()
            .filter_map(|t| Some((t.remote.clone(), catalogue.vetted.get(&t.remote)?.clone())))
            .collect()
    }

    /// Lists the tools again (as a `notifications/tools/list_changed`
    /// does by itself) and says what changed.
    pub async fn refresh(&self) -> Result<ToolListChange, McpError> {
        list::refresh(&self.connection, self.service.peer()).await
    }

    /// How many times the tool list has been read: 1 after connecting, one
    /// more per refresh.
    pub fn list_generation(&self) -> u64 {
        self.connection.catalogue.read().generation
    }

    /// Waits until the tool list has been read more than `generation`
    /// times (a refresh after `list_changed` landed), returning the new
    /// count. A server that never changes its list never wakes it: put a
    /// timeout around it.
    pub async fn list_changed_since(&self, generation: u64) -> u64 {
        let mut listed = self.connection.listed.subscribe();
        match listed.wait_for(|now| *now > generation).await {
            Ok(now) => *now,
            Err(_) => self.list_generation(),
        }
    }

    /// Why the last refresh after `list_changed` failed, if it did (the
    /// catalogue then stays as it was).
    pub fn refresh_failure(&self) -> Option<String> {
        self.connection.refresh_failure.read().clone()
    }

    /// The process id of a stdio server.
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().and_then(ChildServer::id)
    }

    /// Ends the session and, for a stdio server, closes its stdin, waits
    /// briefly for it to exit, kills it if it does not, and reaps it.
    pub async fn close(mut self) {
        let _ = self.service.close().await;
        if let Some(child) = self.child.take() {
            child.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::Value;
    use tinyagents_core::CancellationToken;
    use tinytools::FnTool;

    use super::*;
    use crate::McpServer;

    /// The catalogue keeps specs, not tools, so no cycle keeps a dropped
    /// client's connection alive; tools handed out keep it while they live.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_dropped_client_frees_its_connection_once_its_tools_are_gone() {
        let server = McpServer::builder("s")
            .tool(FnTool::new("echo", "Echoes.", |_: Value| async {
                anyhow::Ok("x")
            }))
            .build()
            .unwrap();
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server_io);
        tokio::spawn(async move { server.serve_io(read, write, CancellationToken::new()).await });
        let (read, write) = tokio::io::split(client_io);
        let client = McpClient::connect_stream(RemoteServer::stream("s"), read, write)
            .await
            .unwrap();
        let tools = client.tools();
        let connection = Arc::downgrade(&client.connection);
        drop(client);
        assert!(connection.upgrade().is_some(), "the tools still hold it");
        drop(tools);
        for _ in 0..100 {
            if connection.upgrade().is_none() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the connection outlived its client and tools");
    }
}
