//! Reading a server's tool list into tools.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::PaginatedRequestParams;
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tinytools::{Tool, ToolRegistry};

use super::state::{Connection, Listed};
use super::tool::McpTool;
use crate::annotations::spec_from_annotations;
use crate::error::McpError;

/// What a refresh changed, by registered name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolListChange {
    /// Tools the server offers now and did not before.
    pub added: Vec<String>,
    /// Tools it no longer offers: calls of them fail, naming why.
    pub removed: Vec<String>,
}

/// The most pages of tools a server may send: one that pages on past it
/// is cut off with an error.
pub(crate) const MAX_TOOL_PAGES: usize = 100;

/// Every page of the server's tools, in order. A repeated cursor or more
/// than [`MAX_TOOL_PAGES`] pages is an error: the list must end.
async fn pages(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_TOOL_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|error| error.to_string())?;
        tools.extend(page.tools);
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) if !seen.insert(next.clone()) => {
                return Err(format!("it sent the page cursor {next:?} twice"));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Err(format!("it kept paging past {MAX_TOOL_PAGES} pages"))
}

/// Lists every page of the server's tools within `timeout` and maps each
/// to a tool. Every tool is registered in a scratch registry first, with
/// the harness's own rules: a name that is not a function name, two names
/// that collide, or a schema that does not compile is an error naming the
/// tool.
pub(crate) async fn list(
    connection: &Arc<Connection>,
    peer: &Peer<RoleClient>,
    timeout: std::time::Duration,
) -> Result<Vec<Listed>, McpError> {
    let server = &connection.server;
    let listed = tokio::time::timeout(timeout, pages(peer))
        .await
        .map_err(|_| McpError::Timeout {
            server: server.name.clone(),
            during: "listing its tools",
            timeout,
        })?
        .map_err(|message| McpError::Connect {
            server: server.name.clone(),
            during: "listing its tools",
            message,
        })?;
    let mut registry = ToolRegistry::new();
    let mut tools = Vec::with_capacity(listed.len());
    for remote in listed {
        let remote_name = remote.name.to_string();
        let annotations = remote
            .annotations
            .as_ref()
            .filter(|_| server.trust_annotations);
        let mut spec = spec_from_annotations(
            &server.tool_name(&remote_name),
            remote.description.as_deref().unwrap_or_default(),
            Value::Object((*remote.input_schema).clone()),
            annotations,
        );
        if let Some(change) = server.overrides.get(&remote_name) {
            change(&mut spec);
        }
        // Registered once here, with the harness's rules, and dropped.
        let probe = McpTool::new(
            Arc::clone(connection),
            peer.clone(),
            remote_name.clone(),
            spec.clone(),
        );
        if let Err(source) = registry.register(Arc::new(probe) as Arc<dyn Tool>) {
            return Err(McpError::UnusableTool {
                server: server.name.clone(),
                tool: remote_name,
                source,
            });
        }
        tools.push(Listed {
            remote: remote_name,
            spec,
        });
    }
    Ok(tools)
}

/// Lists the tools again and installs the new catalogue. Refreshes run one
/// at a time, so the catalogue is the list read last.
pub(crate) async fn refresh(
    connection: &Arc<Connection>,
    peer: &Peer<RoleClient>,
) -> Result<ToolListChange, McpError> {
    let _one_at_a_time = connection.refreshing.lock().await;
    let tools = list(connection, peer, connection.server.request_timeout).await?;
    Ok(install(connection, tools))
}

/// Makes `tools` the catalogue, returning what changed.
pub(crate) fn install(connection: &Connection, tools: Vec<Listed>) -> ToolListChange {
    let offered: HashSet<String> = tools.iter().map(|t| t.remote.clone()).collect();
    let mut catalogue = connection.catalogue.write();
    let before: HashSet<&str> = catalogue
        .tools
        .iter()
        .map(|t| t.spec.name.as_str())
        .collect();
    let now: HashSet<&str> = tools.iter().map(|t| t.spec.name.as_str()).collect();
    let mut change = ToolListChange {
        added: now.difference(&before).map(|s| (*s).to_owned()).collect(),
        removed: before.difference(&now).map(|s| (*s).to_owned()).collect(),
    };
    change.added.sort();
    change.removed.sort();
    catalogue.generation += 1;
    catalogue.offered = offered;
    catalogue.tools = tools;
    let generation = catalogue.generation;
    drop(catalogue);
    connection.listed.send_replace(generation);
    change
}
