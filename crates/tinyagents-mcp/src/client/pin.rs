//! Pinning: each remote tool's definition (name, description, input
//! schema, annotations) fingerprinted, so a definition that changes after
//! the host vetted it is never run on the old spec nor silently on the new
//! one; and the lock a host commits to pin definitions across processes.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tinyagents_core::args_hash;

use crate::error::McpError;

/// What a tool's definition is, by the SHA-256 of its parts (canonical
/// JSON): the whole, and each part a change can be named by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedTool {
    /// The whole definition: name, description, input schema, annotations.
    pub definition: String,
    /// The description alone.
    pub description: String,
    /// The input schema alone.
    pub input_schema: String,
    /// The annotations alone (`null` when none).
    pub annotations: String,
}

impl PinnedTool {
    /// The pin of `tool` as the server lists it.
    pub(crate) fn of(tool: &rmcp::model::Tool) -> Self {
        let description = Value::String(tool.description.as_deref().unwrap_or_default().to_owned());
        let input_schema = Value::Object((*tool.input_schema).clone());
        let annotations = tool
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok())
            .unwrap_or(Value::Null);
        let whole = json!({
            "name": tool.name,
            "description": description,
            "inputSchema": input_schema,
            "annotations": annotations,
        });
        Self {
            definition: args_hash(&whole),
            description: args_hash(&description),
            input_schema: args_hash(&input_schema),
            annotations: args_hash(&annotations),
        }
    }

    /// What differs from `before`, by part: `description`, `input schema`,
    /// `annotations` (the name, when only the whole differs).
    pub(crate) fn changes_from(&self, before: &Self) -> Vec<&'static str> {
        let mut what = Vec::new();
        if self.description != before.description {
            what.push("description");
        }
        if self.input_schema != before.input_schema {
            what.push("input schema");
        }
        if self.annotations != before.annotations {
            what.push("annotations");
        }
        if what.is_empty() && self.definition != before.definition {
            what.push("definition");
        }
        what
    }
}

/// A tool listed and not offered: new since the host vetted the list, or
/// changed since. Its calls are refused until the host accepts it
/// ([`McpClient::accept_changes`](crate::McpClient::accept_changes)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnvettedTool {
    /// Its registered name (`{prefix}_{tool}`).
    pub name: String,
    /// The server's name of it.
    pub remote: String,
    /// What changed (`description`, `input schema`, `annotations`); empty
    /// for a tool the host has not seen before.
    pub changed: Vec<&'static str>,
}

impl UnvettedTool {
    /// How a person reads it.
    pub fn describe(&self) -> String {
        if self.changed.is_empty() {
            format!("tool '{}' is new", self.remote)
        } else {
            format!(
                "tool '{}' changed its {}",
                self.remote,
                self.changed.join(", ")
            )
        }
    }
}

/// The format name a lock file carries.
pub const MCP_LOCK_FORMAT: &str = "tinyagents.mcp-lock/1";

/// Definitions pinned across processes: per server, each tool's
/// [`PinnedTool`]. A host writes it once it has reviewed its servers'
/// tools ([`pin`](Self::pin), [`write`](Self::write)) and commits it; a
/// server connected with [`RemoteServer::locked`] whose tools differ from
/// it (a changed definition, a tool it does not name) fails to connect,
/// naming each difference.
///
/// [`RemoteServer::locked`]: crate::RemoteServer::locked
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpLock {
    format: String,
    /// Server name → the server's tool name → its pin.
    pub servers: BTreeMap<String, BTreeMap<String, PinnedTool>>,
}

impl Default for McpLock {
    fn default() -> Self {
        Self::new()
    }
}

impl McpLock {
    /// An empty lock.
    pub fn new() -> Self {
        Self {
            format: MCP_LOCK_FORMAT.to_owned(),
            servers: BTreeMap::new(),
        }
    }

    /// The lock at `path`; `None` when there is no file. A file that is
    /// not a lock is an error naming it and what is wrong.
    pub fn read(path: &Path) -> Result<Option<Self>, McpError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(McpError::Lock {
                    path: path.display().to_string(),
                    problem: e.to_string(),
                    source: Some(e.into()),
                });
            }
        };
        let lock: Self = serde_json::from_str(&text).map_err(|e| McpError::Lock {
            path: path.display().to_string(),
            problem: format!("not an MCP lock: {e}"),
            source: Some(e.into()),
        })?;
        if lock.format != MCP_LOCK_FORMAT {
            return Err(McpError::Lock {
                path: path.display().to_string(),
                problem: format!(
                    "its format is '{}', this build reads '{MCP_LOCK_FORMAT}'",
                    lock.format
                ),
                source: None,
            });
        }
        Ok(Some(lock))
    }

    /// Writes the lock to `path` (pretty JSON, sorted, so a change reads
    /// well in a diff).
    pub fn write(&self, path: &Path) -> Result<(), McpError> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| McpError::Lock {
            path: path.display().to_string(),
            problem: e.to_string(),
            source: Some(e.into()),
        })?;
        text.push('\n');
        std::fs::write(path, text).map_err(|e| McpError::Lock {
            path: path.display().to_string(),
            problem: e.to_string(),
            source: Some(e.into()),
        })
    }

    /// Records the definitions `client` has vetted (what it offers), in
    /// place of what the lock held for its server.
    pub fn pin(&mut self, client: &crate::McpClient) {
        self.servers
            .insert(client.name().to_owned(), client.vetted_pins());
    }

    /// The pins of server `server`, if the lock names it.
    pub fn server(&self, server: &str) -> Option<&BTreeMap<String, PinnedTool>> {
        self.servers.get(server)
    }
}

/// How each listed tool stands against `pins` (a lock): the differences,
/// as a person reads them.
pub(crate) fn drift(
    listed: &[(String, PinnedTool)],
    pins: &BTreeMap<String, PinnedTool>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (remote, pin) in listed {
        match pins.get(remote) {
            None => out.push(format!("tool '{remote}' is not in the lock")),
            Some(locked) if locked.definition != pin.definition => out.push(format!(
                "tool '{remote}' changed its {} since the lock was written",
                pin.changes_from(locked).join(", ")
            )),
            Some(_) => {}
        }
    }
    out
}
