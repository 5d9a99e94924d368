//! Reading a server's tool list into tools.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::PaginatedRequestParams;
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tinyagents_core::ErrorSource;
use tinytools::{Tool, ToolRegistry};

use super::pin::{PinnedTool, UnvettedTool, drift};
use super::remote::Trust;
use super::state::{Catalogue, Connection, Listed};
use super::tool::McpTool;
use crate::annotations::spec_from_annotations;
use crate::error::McpError;

/// What a refresh (or an acceptance) changed, by registered name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolListChange {
    /// Tools offered now and not before (listed with a vetted definition).
    pub added: Vec<String>,
    /// Tools no longer offered: calls of them fail, naming why.
    pub removed: Vec<String>,
    /// Tools listed with a definition the host has not vetted (new, or
    /// changed since): not offered, their calls refused, until accepted.
    pub unvetted: Vec<UnvettedTool>,
}

/// The most pages of tools a server may send: one that pages on past it
/// is cut off with an error.
pub(crate) const MAX_TOOL_PAGES: usize = 100;

/// Why the pages could not be read: what to say, and the client's error
/// when it was one.
type PagesFailure = (String, Option<ErrorSource>);

/// Every page of the server's tools, in order. A repeated cursor or more
/// than [`MAX_TOOL_PAGES`] pages is an error: the list must end.
async fn pages(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, PagesFailure> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_TOOL_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|error| (error.to_string(), Some(ErrorSource::new(error))))?;
        tools.extend(page.tools);
        match page.next_cursor {
            None => return Ok(tools),
            Some(next) if !seen.insert(next.clone()) => {
                return Err((format!("it sent the page cursor {next:?} twice"), None));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Err((format!("it kept paging past {MAX_TOOL_PAGES} pages"), None))
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
        .map_err(|(message, source)| McpError::Connect {
            server: server.name.clone(),
            during: "listing its tools",
            message,
            source,
        })?;
    let mut registry = ToolRegistry::new();
    let mut tools = Vec::with_capacity(listed.len());
    for remote in listed {
        let remote_name = remote.name.to_string();
        // Untrusted, a server's hints are claims: they loosen nothing.
        let annotations = remote
            .annotations
            .as_ref()
            .filter(|_| server.trust == Trust::Trusted);
        let pin = PinnedTool::of(&remote);
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
            pin.clone(),
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
            pin,
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

/// Vets the first list: against the server's lock when it is locked (any
/// difference fails, naming each), else as listed.
pub(crate) fn vet_first(connection: &Connection, tools: &[Listed]) -> Result<(), McpError> {
    let server = &connection.server;
    if let Some(pins) = &server.pins {
        let listed: Vec<(String, PinnedTool)> = tools
            .iter()
            .map(|t| (t.remote.clone(), t.pin.clone()))
            .collect();
        let changes = drift(&listed, pins);
        if !changes.is_empty() {
            return Err(McpError::Drift {
                server: server.name.clone(),
                changes,
            });
        }
    }
    connection.catalogue.write().vetted = tools
        .iter()
        .map(|t| (t.remote.clone(), t.pin.clone()))
        .collect();
    Ok(())
}

/// The tools listed with a definition the host has not vetted.
pub(crate) fn unvetted(catalogue: &Catalogue) -> Vec<UnvettedTool> {
    catalogue
        .tools
        .iter()
        .filter(|t| !catalogue.offers(t))
        .map(|t| UnvettedTool {
            name: t.spec.name.clone(),
            remote: t.remote.clone(),
            changed: catalogue
                .vetted
                .get(&t.remote)
                .map(|v| t.pin.changes_from(v))
                .unwrap_or_default(),
        })
        .collect()
}

/// Accepts the listed definitions of the tools named `names` (registered
/// names; every unvetted tool when empty): offered from now on, with the
/// spec the new definition maps to.
pub(crate) fn accept(connection: &Connection, names: &[&str]) -> ToolListChange {
    let mut catalogue = connection.catalogue.write();
    let before = offered_names(&catalogue);
    let chosen: Vec<(String, PinnedTool)> = catalogue
        .tools
        .iter()
        .filter(|t| names.is_empty() || names.contains(&t.spec.name.as_str()))
        .map(|t| (t.remote.clone(), t.pin.clone()))
        .collect();
    catalogue.vetted.extend(chosen);
    let change = difference(&before, &catalogue);
    drop(catalogue);
    change
}

fn offered_names(catalogue: &Catalogue) -> HashSet<String> {
    catalogue.offered().map(|t| t.spec.name.clone()).collect()
}

fn difference(before: &HashSet<String>, catalogue: &Catalogue) -> ToolListChange {
    let now = offered_names(catalogue);
    let mut change = ToolListChange {
        added: now.difference(before).cloned().collect(),
        removed: before.difference(&now).cloned().collect(),
        unvetted: unvetted(catalogue),
    };
    change.added.sort();
    change.removed.sort();
    change
}

/// Makes `tools` the catalogue (what the host vetted stays), returning
/// what changed.
pub(crate) fn install(connection: &Connection, tools: Vec<Listed>) -> ToolListChange {
    let mut catalogue = connection.catalogue.write();
    let before = offered_names(&catalogue);
    catalogue.generation += 1;
    catalogue.tools = tools;
    let change = difference(&before, &catalogue);
    let generation = catalogue.generation;
    drop(catalogue);
    connection.listed.send_replace(generation);
    change
}
