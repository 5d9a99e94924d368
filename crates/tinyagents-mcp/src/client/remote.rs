//! `RemoteServer`: an MCP server to connect to, and how to treat its tools.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tinytools::ToolSpec;

/// How long the client waits for the server to start, initialize and
/// list its tools.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the client waits for one answer (a tool list page, a call)
/// when the harness sets no shorter timeout: a hung server cannot hold a
/// call past it. The request is then cancelled at the server.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest message the client reads from a stdio server (16 MiB): a
/// longer line is dropped, and the call it answered fails by its timeout.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

use super::pin::{McpLock, PinnedTool};

/// Whether a server's annotations are facts or claims.
///
/// A server's annotations are its word about its tools. Untrusted (the
/// default), they are claims, and a claim cannot loosen the cautious
/// reading of a tool: every tool is exclusive, destructive, open-world and
/// never replayed, whatever its hints say, so a server that lies about a
/// tool being read-only cannot open plan mode or pass a deny mask. Trusted,
/// they are read as [`spec_from_annotations`](crate::spec_from_annotations)
/// says. Either way the host's [`override_tool`](RemoteServer::override_tool)
/// has the last word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Trust {
    /// Annotations are claims: they loosen nothing.
    #[default]
    Untrusted,
    /// Annotations are facts: `readOnlyHint`, `destructiveHint: false`,
    /// `idempotentHint` and `openWorldHint: false` loosen the spec.
    Trusted,
}

/// A host's change to the spec mapped from a tool's annotations.
pub(crate) type SpecOverride = Arc<dyn Fn(&mut ToolSpec) + Send + Sync>;

/// How to reach the server.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        program: OsString,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: Option<PathBuf>,
        /// A file its stderr is appended to (inherited when `None`).
        stderr: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http { url: String },
    /// A byte stream the host opened ([`McpClient::connect_stream`]).
    ///
    /// [`McpClient::connect_stream`]: crate::McpClient::connect_stream
    Stream,
}

/// An MCP server to connect to with [`McpClient::connect`]: its name, how
/// to reach it, and how to treat its tools.
///
/// Its tools are registered as `{prefix}_{tool}` (the prefix is the
/// server's name unless [`prefix`](Self::prefix) sets another or none),
/// with the flags mapped from their annotations by
/// [`spec_from_annotations`] and then changed by the host's
/// [`override_tool`](Self::override_tool).
///
/// [`McpClient::connect`]: crate::McpClient::connect
/// [`spec_from_annotations`]: crate::spec_from_annotations
#[derive(Clone)]
pub struct RemoteServer {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) prefix: Option<String>,
    pub(crate) trust: Trust,
    /// The lock's pins for this server, when it is locked.
    pub(crate) pins: Option<BTreeMap<String, PinnedTool>>,
    pub(crate) overrides: HashMap<String, SpecOverride>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_message_bytes: usize,
}

impl std::fmt::Debug for RemoteServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("prefix", &self.prefix)
            .field("trust", &self.trust)
            .field("locked", &self.pins.is_some())
            .field("overrides", &self.overrides.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RemoteServer {
    fn new(name: impl Into<String>, transport: Transport) -> Self {
        let name = name.into();
        Self {
            prefix: Some(name.clone()),
            name,
            transport,
            trust: Trust::Untrusted,
            pins: None,
            overrides: HashMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// A server the client starts as `program`, speaking MCP on its stdin
    /// and stdout. Its stderr is inherited (or goes to a file: [`stderr_to`](Self::stderr_to)). It is stopped (and reaped) when
    /// the client closes or is dropped.
    pub fn stdio(name: impl Into<String>, program: impl Into<OsString>) -> Self {
        Self::new(
            name,
            Transport::Stdio {
                program: program.into(),
                args: Vec::new(),
                env: Vec::new(),
                cwd: None,
                stderr: None,
            },
        )
    }

    /// A server at a Streamable HTTP endpoint (`http://127.0.0.1:3001/mcp`).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(name, Transport::Http { url: url.into() })
    }

    /// A server the host reaches over a byte stream of its own (a socket,
    /// a pipe, an in-memory duplex), given to
    /// [`McpClient::connect_stream`](crate::McpClient::connect_stream).
    pub fn stream(name: impl Into<String>) -> Self {
        Self::new(name, Transport::Stream)
    }

    /// Adds an argument of a stdio server's program.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.push(arg.into());
        }
        self
    }

    /// Adds arguments of a stdio server's program.
    #[must_use]
    pub fn args<A: Into<OsString>>(mut self, more: impl IntoIterator<Item = A>) -> Self {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.extend(more.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of a stdio server's process.
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets the working directory of a stdio server's process.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Appends a stdio server's stderr to the file `path` (created when
    /// missing) instead of this process's stderr: for hosts that draw on
    /// the terminal, where a server's log lines would break the picture.
    #[must_use]
    pub fn stderr_to(mut self, path: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { stderr, .. } = &mut self.transport {
            *stderr = Some(path.into());
        }
        self
    }

    /// Prefixes tool names with `prefix` and `_` instead of the server's
    /// name; `None` registers the server's names as they are.
    #[must_use]
    pub fn prefix(mut self, prefix: Option<&str>) -> Self {
        self.prefix = prefix.map(str::to_owned);
        self
    }

    /// Ignores the server's annotations: every tool is treated as one
    /// without any (exclusive, destructive, open-world, never replayed),
    /// before the host's overrides. The default ([`Trust::Untrusted`]).
    #[must_use]
    pub fn ignore_annotations(mut self) -> Self {
        self.trust = Trust::Untrusted;
        self
    }

    /// Takes the server's annotations as facts ([`Trust::Trusted`]) or as
    /// claims that loosen nothing ([`Trust::Untrusted`], the default).
    #[must_use]
    pub fn trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// Pins the server's tools to `lock`: at connect, a tool whose
    /// definition differs from its pin, or that the lock does not name,
    /// fails the connect ([`McpError::Drift`](crate::McpError::Drift)); a
    /// lock that does not name the server pins it to no tool at all.
    #[must_use]
    pub fn locked(mut self, lock: &McpLock) -> Self {
        self.pins = Some(lock.server(&self.name).cloned().unwrap_or_default());
        self
    }

    /// Changes the spec of the server's tool `tool` (its name as the
    /// server gives it) after the annotations are mapped: a host that knows
    /// better than the server's hints sets what it knows
    /// (`spec.approval_required = true`, `spec.side_effects = …`).
    #[must_use]
    pub fn override_tool(
        mut self,
        tool: impl Into<String>,
        change: impl Fn(&mut ToolSpec) + Send + Sync + 'static,
    ) -> Self {
        self.overrides.insert(tool.into(), Arc::new(change));
        self
    }

    /// Bounds the wait for the server to start, initialize and list its
    /// tools ([`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bounds the wait for any one answer ([`DEFAULT_REQUEST_TIMEOUT`]);
    /// the harness's tool timeout, when shorter, ends a call first.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Bounds the size of one message from a stdio server
    /// ([`DEFAULT_MAX_MESSAGE_BYTES`]).
    #[must_use]
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name a tool of this server is registered under: the prefix,
    /// `_`, and the server's name with each character outside ASCII
    /// letters, digits, `_` and `-` replaced by `_`.
    pub fn tool_name(&self, remote: &str) -> String {
        let clean: String = remote
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        match &self.prefix {
            Some(prefix) => format!("{prefix}_{clean}"),
            None => clean,
        }
    }
}
