//! One MCP session: the protocol's side of a served set of tools.

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpToolEntry,
};
use rmcp::service::{RequestContext, RoleServer};
use tinyagents_core::{RunId, SessionId};
use tinyagents_orchestrator::SessionStore;

use super::Served;
use super::call::call_tool;
use crate::annotations::annotations_from_spec;

/// A session of the server, with an id of its own: over stdio the
/// connection, over Streamable HTTP one `Mcp-Session-Id` (rmcp makes a
/// handler per session). A served agent's child sessions hang under
/// `mcp-<id>`; when the session ends they are deleted, since no client can
/// name that session again.
#[derive(Clone)]
pub(crate) struct Session {
    served: Arc<Served>,
    end: Arc<SessionEnd>,
}

impl Session {
    pub(crate) fn new(served: Arc<Served>) -> Self {
        let end = Arc::new(SessionEnd {
            scope: SessionId::new(format!("mcp-{}", RunId::generate().as_str())),
            stores: served.session_stores.clone(),
        });
        Self { served, end }
    }
}

/// Forgets a session's conversations when its last handler is dropped.
struct SessionEnd {
    scope: SessionId,
    stores: Vec<Arc<dyn SessionStore>>,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (scope, stores) = (self.scope.clone(), std::mem::take(&mut self.stores));
        runtime.spawn(async move {
            for store in stores {
                let children = match store.children(&scope).await {
                    Ok(children) => children,
                    Err(error) => {
                        tracing::warn!(session = %scope, "cannot list the session's conversations: {error}");
                        continue;
                    }
                };
                for child in children {
                    if let Err(error) = store.delete(&child.id).await {
                        tracing::warn!(session = %child.id, "cannot delete a finished MCP session's conversation: {error}");
                    }
                }
            }
        });
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                self.served.name.clone(),
                self.served.version.clone(),
            ));
        if let Some(instructions) = &self.served.instructions {
            info = info.with_instructions(instructions.clone());
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .served
            .harness
            .tools()
            .iter()
            .filter(|registered| registered.is_model_visible())
            .map(|registered| {
                let definition = registered.definition();
                let schema = match &definition.parameters {
                    serde_json::Value::Object(map) => map.clone(),
                    _ => serde_json::Map::new(),
                };
                let mut entry = McpToolEntry::new(
                    definition.name.clone(),
                    definition.description.clone(),
                    Arc::new(schema),
                );
                entry.annotations = Some(annotations_from_spec(registered.spec()));
                entry
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        call_tool(&self.served, &self.end.scope, request, context)
            .await
            .map(CallToolResponse::from)
    }
}
