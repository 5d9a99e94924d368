//! The server: agents and tools served over MCP, each call a governed run.

mod approval;
mod budget;
mod call;
mod handler;
mod http;
mod relay;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use tinyagents_core::{PriceTable, RunLimits};
use tinyagents_harness::{AgentHarness, AgentHarnessBuilder};
use tinyagents_orchestrator::{AgentTool, SessionStore};
use tinytools::Tool;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

pub use self::http::HttpServer;

use self::handler::Session;
use self::relay::RelayModel;
use crate::DEFAULT_REQUEST_TIMEOUT;
use crate::error::McpError;

/// How many calls a server runs at once unless
/// [`McpServerBuilder::max_concurrent_calls`] says otherwise.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 64;

/// Agents and tools served over MCP.
///
/// Each agent is one MCP tool with the agent-as-tool schema (`query`,
/// optional `conversation`) and runs under the delegated governance of the
/// agent-as-tool rules (no tools that wait for a person, depth + 1,
/// `ToolReplay::Never`, its events reported as progress). Each MCP call is
/// one run of the server's harness, built once with the server's limits,
/// ledger, policies and gate ([`McpServerBuilder::configure`]), in which
/// the MCP client takes the model's seat and issues its one call: the call
/// is admitted, run and settled by the one enforced path. The client's
/// `notifications/cancelled` cancels the run; the MCP session (and
/// `conversation`) picks an agent's child session.
///
/// A call's tokens and money go back to a tinyagents client: the result's
/// `_meta` says what the call's run spent ([`SPENT_META`](crate::SPENT_META)),
/// and a budget in the request's `_meta` ([`BUDGET_META`](crate::BUDGET_META))
/// caps the run from above, lowering the server's `max_tokens` and
/// `max_cost` for that call (never raising them). A served agent whose
/// model call that budget cannot afford stops as at any of its limits, and
/// the call answers as it does then. The relay's own turns are not model
/// calls: they hold, cost and count nothing.
///
/// A call that needs a person's approval (the tool's spec, a policy, the
/// gate) asks the MCP client, when it declared the `elicitation`
/// capability: one `elicitation/create` per waiting call, naming the tool,
/// why it waits, the run, the call and the SHA-256 of its arguments (the
/// arguments themselves only when the harness's payload capture shows tool
/// arguments, redacted as its events are), answered `approve: true` or
/// not. The decision is built from the suspended run, never from the
/// client's words: it binds that run, call, tool and arguments hash, and
/// the run is resumed once with it, so the approved call runs once; a
/// declined or cancelled elicitation, a refusal and no answer within
/// [`McpServerBuilder::request_timeout`] deny it. An answer is matched to
/// its request by its JSON-RPC id, used once: a second answer to the same
/// request, or one after the time ran out, finds nothing to answer and is
/// dropped. A client without elicitation gets an error result, as a nested
/// call does.
///
/// ```no_run
/// # async fn f(billing: tinyagents_orchestrator::Agent) -> Result<(), tinyagents_mcp::McpError> {
/// use tinyagents_mcp::McpServer;
/// let server = McpServer::builder("billing-desk")
///     .agent(billing.as_tool("billing", "Answers billing questions."))
///     .build()?;
/// server.serve_stdio().await
/// # }
/// ```
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Served>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.name)
            .field("tools", &self.shared.harness.tools().len())
            .finish_non_exhaustive()
    }
}

/// What every session of a server shares.
pub(crate) struct Served {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) instructions: Option<String>,
    pub(crate) harness: AgentHarness,
    /// The stores of the served agents' child sessions.
    pub(crate) session_stores: Vec<Arc<dyn SessionStore>>,
    /// The `Host` values Streamable HTTP accepts; `None`: loopback names.
    pub(crate) allowed_hosts: Option<Vec<String>>,
    /// The `Origin` values Streamable HTTP accepts; `None`: loopback
    /// origins.
    pub(crate) allowed_origins: Option<Vec<String>>,
    /// One permit per call that may run at once, over every session.
    pub(crate) calls: tokio::sync::Semaphore,
    /// How long the server waits for its client's answer to a request of
    /// its own (an approval).
    pub(crate) request_timeout: Duration,
    /// The host's prices ([`McpServerBuilder::prices`]), for the root a
    /// budget puts above a call's relay run.
    pub(crate) prices: Option<Arc<PriceTable>>,
}

/// Builds an [`McpServer`].
pub struct McpServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    harness: AgentHarnessBuilder,
    session_stores: Vec<Arc<dyn SessionStore>>,
    allowed_hosts: Option<Vec<String>>,
    allowed_origins: Option<Vec<String>>,
    max_concurrent_calls: usize,
    request_timeout: Duration,
    prices: Option<Arc<PriceTable>>,
}

impl std::fmt::Debug for McpServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server that calls itself `name` to its clients.
    pub fn builder(name: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder {
            name: name.into(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instructions: None,
            harness: AgentHarness::builder(RelayModel),
            session_stores: Vec::new(),
            allowed_hosts: None,
            allowed_origins: None,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            prices: None,
        }
    }

    /// The harness every call runs in (its tools, limits and policies).
    pub fn harness(&self) -> &AgentHarness {
        &self.shared.harness
    }

    /// Serves one client on this process's stdin and stdout until the
    /// client closes them.
    pub async fn serve_stdio(&self) -> Result<(), McpError> {
        self.serve_io(
            tokio::io::stdin(),
            tokio::io::stdout(),
            CancellationToken::new(),
        )
        .await
    }

    /// Serves one client on a byte stream (a pipe, a socket, an in-memory
    /// duplex) until it closes or `shutdown` fires. The connection is one
    /// MCP session.
    pub async fn serve_io<R, W>(
        &self,
        read: R,
        write: W,
        shutdown: CancellationToken,
    ) -> Result<(), McpError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let transport = AsyncRwTransport::new_server(read, write);
        let session = Session::new(Arc::clone(&self.shared));
        let running = session
            .serve_with_ct(transport, shutdown)
            .await
            .map_err(|e| self.serve_failed(format!("the session did not start: {e}")))?;
        running
            .waiting()
            .await
            .map_err(|e| self.serve_failed(format!("the session ended abnormally: {e}")))?;
        Ok(())
    }

    fn serve_failed(&self, message: String) -> McpError {
        McpError::Serve {
            server: self.shared.name.clone(),
            message,
            source: None,
        }
    }
}

impl McpServerBuilder {
    /// Serves an agent, made by [`Agent::as_tool`]: its name and description
    /// are the MCP tool's. Its child sessions live in the agent's store,
    /// under the MCP session, and are deleted when the session ends.
    ///
    /// [`Agent::as_tool`]: tinyagents_orchestrator::Agent::as_tool
    #[must_use]
    pub fn agent(mut self, agent: AgentTool) -> Self {
        let store = agent.session_store();
        if !self.session_stores.iter().any(|s| Arc::ptr_eq(s, store)) {
            self.session_stores.push(Arc::clone(store));
        }
        self.tool(agent)
    }

    /// Serves a plain tool. One that waits for an external tool is listed
    /// and answers every call with an error result: an MCP call cannot be
    /// deferred. One that waits for a person's approval asks the MCP client
    /// when it can be asked (see [`McpServer`]), and is refused otherwise.
    #[must_use]
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.harness = self.harness.tool(tool);
        self
    }

    /// Serves shared tools.
    #[must_use]
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.harness = self.harness.tools(tools);
        self
    }

    /// How many calls run at once, over every session
    /// ([`DEFAULT_MAX_CONCURRENT_CALLS`]); more wait their turn (a call
    /// cancelled while it waits never starts). At least 1.
    #[must_use]
    pub fn max_concurrent_calls(mut self, calls: usize) -> Self {
        self.max_concurrent_calls = calls.max(1);
        self
    }

    /// Bounds the wait for the client's answer to a request the server
    /// sends it, an approval asked by elicitation
    /// ([`DEFAULT_REQUEST_TIMEOUT`]): no answer in time denies the call,
    /// and the result says so. The time a person takes is not charged to
    /// the run's wall clock, and the call gives its turn
    /// ([`max_concurrent_calls`](Self::max_concurrent_calls)) back while it
    /// waits. At least 1 ms.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The `Host` header values (`example.com`, `example.com:8443`)
    /// Streamable HTTP accepts, instead of the loopback names
    /// (`localhost`, `127.0.0.1`, `::1`) it accepts by default: a server
    /// reachable under other names lists them.
    #[must_use]
    pub fn http_allowed_hosts<S: Into<String>>(
        mut self,
        hosts: impl IntoIterator<Item = S>,
    ) -> Self {
        self.allowed_hosts = Some(hosts.into_iter().map(Into::into).collect());
        self
    }

    /// The `Origin` header values (`https://app.example.com:443`,
    /// `http://localhost:*`; `null` for a browser's opaque origin)
    /// Streamable HTTP accepts from a request that carries one, instead of
    /// the loopback origins (`http://localhost:*`, `http://127.0.0.1:*`,
    /// `http://[::1]:*`) it accepts by default. Any other origin is refused
    /// (403), as the MCP transport requires: a web page must not reach a
    /// local server. A request without `Origin` (not from a browser) is
    /// not refused for that.
    #[must_use]
    pub fn http_allowed_origins<S: Into<String>>(
        mut self,
        origins: impl IntoIterator<Item = S>,
    ) -> Self {
        self.allowed_origins = Some(origins.into_iter().map(Into::into).collect());
        self
    }

    /// The limits of each call's run (its budget, tool timeout, depth):
    /// every MCP call is a run of its own, so they bound one call (with a
    /// served agent, everything that agent does for it).
    #[must_use]
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.harness = self.harness.limits(limits);
        self
    }

    /// Prices the model calls of each call's tree: a served agent's whose
    /// own harness sets no prices (see `AgentHarnessBuilder::prices`), so
    /// its cost is reported and a `max_cost` (the server's, or a client's
    /// budget) binds it. The relay's own turns are not model calls and cost
    /// nothing.
    #[must_use]
    pub fn prices(mut self, prices: impl Into<Arc<PriceTable>>) -> Self {
        let prices = prices.into();
        self.harness = self.harness.prices(Arc::clone(&prices));
        self.prices = Some(prices);
        self
    }

    /// Sets the rest of the harness every call runs in: its ledger,
    /// middleware, security gate, redaction, payload capture, detailed
    /// errors.
    #[must_use]
    pub fn configure(
        mut self,
        configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
    ) -> Self {
        self.harness = configure(self.harness);
        self
    }

    /// The version the server reports (the crate's by default).
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Instructions the server gives clients at initialization.
    #[must_use]
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Builds the server's harness: every problem of its tools (a bad name,
    /// a duplicate, a schema that does not compile) is reported here.
    pub fn build(self) -> Result<McpServer, McpError> {
        if self.name.trim().is_empty() {
            return Err(McpError::Config("an MCP server needs a name".to_owned()));
        }
        let harness = self.harness.build().map_err(|e| McpError::Serve {
            server: self.name.clone(),
            message: format!("its harness cannot be built: {e}"),
            source: Some(e.into()),
        })?;
        Ok(McpServer {
            shared: Arc::new(Served {
                name: self.name,
                version: self.version,
                instructions: self.instructions,
                harness,
                session_stores: self.session_stores,
                allowed_hosts: self.allowed_hosts,
                allowed_origins: self.allowed_origins,
                calls: tokio::sync::Semaphore::new(self.max_concurrent_calls),
                request_timeout: self.request_timeout,
                prices: self.prices,
            }),
        })
    }
}
