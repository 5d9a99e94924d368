//! Serving over Streamable HTTP: rmcp's service, on hyper, on a listener
//! the host binds.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::McpServer;
use super::handler::Session;
use crate::error::McpError;

/// The origins Streamable HTTP accepts unless the builder names others.
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// A server serving Streamable HTTP in the background, from
/// [`McpServer::spawn_http`]. Dropping it does not stop it;
/// [`shutdown`](Self::shutdown) does.
#[derive(Debug)]
pub struct HttpServer {
    name: String,
    address: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), McpError>>,
}

impl HttpServer {
    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The endpoint's URL (`http://127.0.0.1:PORT/mcp`).
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// Stops accepting, ends every session and connection, and waits for
    /// the server to stop.
    pub async fn shutdown(self) -> Result<(), McpError> {
        self.shutdown.cancel();
        self.task.await.unwrap_or_else(|e| {
            Err(McpError::Serve {
                server: self.name,
                message: format!("the HTTP server's task failed: {e}"),
                source: Some(e.into()),
            })
        })
    }
}

impl McpServer {
    /// Serves Streamable HTTP at `/mcp` on `listener` until `shutdown`
    /// fires. Each MCP session is a session of the server (an agent's
    /// child sessions are keyed by its id). Requests whose `Host` is not
    /// one of [`McpServerBuilder::http_allowed_hosts`] (loopback names by
    /// default) are refused, against DNS rebinding; requests carrying an
    /// `Origin` that is not one of
    /// [`McpServerBuilder::http_allowed_origins`] (loopback origins by
    /// default) are refused, against pages of other sites.
    ///
    /// [`McpServerBuilder::http_allowed_hosts`]: super::McpServerBuilder::http_allowed_hosts
    /// [`McpServerBuilder::http_allowed_origins`]: super::McpServerBuilder::http_allowed_origins
    pub async fn serve_http(
        &self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), McpError> {
        let served = Arc::clone(&self.shared);
        let mut config = StreamableHttpServerConfig::default();
        config.cancellation_token = shutdown.child_token();
        if let Some(hosts) = &self.shared.allowed_hosts {
            config = config.with_allowed_hosts(hosts.iter().cloned());
        }
        // The transport requires servers to check `Origin`: a page of
        // another site must not reach a local server through a browser.
        let origins = self
            .shared
            .allowed_origins
            .clone()
            .unwrap_or_else(|| LOOPBACK_ORIGINS.iter().map(|o| (*o).to_owned()).collect());
        config = config
            .with_allowed_origins(origins)
            .enforce_origin_validation();
        let service = StreamableHttpService::new(
            move || Ok(Session::new(Arc::clone(&served))),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        loop {
            let accepted = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // A failed accept (out of descriptors, a reset) loses
                    // that connection only.
                    tracing::warn!(server = %self.shared.name, "accept failed: {error}");
                    continue;
                }
            };
            let service = TowerToHyperService::new(service.clone());
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    () = shutdown.cancelled() => {}
                }
            });
        }
    }

    /// Binds `address` and serves Streamable HTTP on it in the background.
    pub async fn spawn_http(&self, address: SocketAddr) -> Result<HttpServer, McpError> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| McpError::Serve {
                server: self.shared.name.clone(),
                message: format!("cannot listen on {address}: {e}"),
                source: Some(e.into()),
            })?;
        let address = listener.local_addr().map_err(|e| McpError::Serve {
            server: self.shared.name.clone(),
            message: format!("cannot read the listener's address: {e}"),
            source: Some(e.into()),
        })?;
        let shutdown = CancellationToken::new();
        let server = self.clone();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { server.serve_http(listener, token).await });
        Ok(HttpServer {
            name: self.shared.name.clone(),
            address,
            shutdown,
            task,
        })
    }
}
