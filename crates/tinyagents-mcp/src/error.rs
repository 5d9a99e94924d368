//! What goes wrong talking MCP.

use std::time::Duration;

use tinyagents_core::ErrorSource;
use tinytools::RegistryError;

/// An MCP connection or server failure. Calls of MCP tools fail through the
/// call path (the harness's `ToolFailed`), not with this type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server's process could not be started.
    #[error("MCP server '{server}': cannot start `{command}`: {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// The program.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The connection failed before the server was ready (initialization).
    #[error("MCP server '{server}': the connection failed while {during}: {message}")]
    Connect {
        /// The server's name.
        server: String,
        /// What the client was doing.
        during: &'static str,
        /// What went wrong.
        message: String,
        /// The error underneath (`message` already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The server did not answer in time.
    #[error("MCP server '{server}' did not answer within {timeout:?} while {during}")]
    Timeout {
        /// The server's name.
        server: String,
        /// What the client was doing.
        during: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// A tool the server offers cannot be registered: its name does not map
    /// to a function name, two names collide, or its input schema does not
    /// compile.
    #[error("MCP server '{server}': its tool '{tool}' cannot be used: {source}")]
    UnusableTool {
        /// The server's name.
        server: String,
        /// The tool's name as the server gives it.
        tool: String,
        /// The registry's reason.
        source: RegistryError,
    },
    /// The server's configuration is wrong (an empty name, an empty
    /// program).
    #[error("MCP server configuration: {0}")]
    Config(String),
    /// Serving failed (binding, accepting, the transport).
    #[error("MCP server '{server}': {message}")]
    Serve {
        /// The served server's name.
        server: String,
        /// What went wrong.
        message: String,
        /// The error underneath (`message` already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A locked server's tools differ from its lock: each difference (a
    /// changed definition, naming what changed; a tool the lock does not
    /// name). Nothing of the server is offered.
    #[error(
        "MCP server '{server}' does not match its lock: {}; review the server's tools and write the lock again to accept them",
        changes.join("; ")
    )]
    Drift {
        /// The server.
        server: String,
        /// Each difference.
        changes: Vec<String>,
    },
    /// An MCP lock file could not be read or written.
    #[error("MCP lock {path}: {problem}")]
    Lock {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
        /// The error underneath (`problem` already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
}
