//! One MCP tool as a `Tool`: a call is one `tools/call` request.

use std::sync::Arc;

use anyhow::anyhow;
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, ProgressToken, Request,
    RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Map, Value};
use tinyagents_core::ToolResult;
use tinytools::{Tool, ToolCallOptions, ToolRunContext, ToolSpec};

use super::budget::{self, Caller};
use super::content::tool_result;
use super::pin::PinnedTool;
use super::state::{Connection, Standing};

/// A tool of an MCP server, registered under its prefixed name.
pub(crate) struct McpTool {
    connection: Arc<Connection>,
    peer: Peer<RoleClient>,
    /// The server's name of the tool.
    remote: String,
    spec: ToolSpec,
    /// The definition the spec was made from.
    pin: PinnedTool,
}

impl McpTool {
    pub(crate) fn new(
        connection: Arc<Connection>,
        peer: Peer<RoleClient>,
        remote: String,
        spec: ToolSpec,
        pin: PinnedTool,
    ) -> Self {
        Self {
            connection,
            peer,
            remote,
            spec,
            pin,
        }
    }

    /// Why a call must not be sent, if it must not: the server no longer
    /// lists the tool, lists a definition the host has not vetted, or the
    /// host accepted another definition than this tool's.
    fn refusal(&self) -> Option<String> {
        let (server, tool) = (self.server(), &self.remote);
        match self.connection.standing(&self.remote, &self.pin) {
            Standing::Current => None,
            Standing::Gone => Some(format!(
                "MCP server '{server}' no longer offers the tool '{tool}' (its tool list \
                 changed); the call was not sent"
            )),
            Standing::Unvetted(changed) if changed.is_empty() => Some(format!(
                "MCP server '{server}' lists tool '{tool}' with a definition the host has not \
                 vetted; the call was not sent (the host accepts it with \
                 McpClient::accept_changes)"
            )),
            Standing::Unvetted(changed) => Some(format!(
                "MCP server '{server}' changed the {} of tool '{tool}' since the host vetted \
                 it; the call was not sent, on the old definition or the new, until the host \
                 accepts the change (McpClient::accept_changes)",
                changed.join(", ")
            )),
            Standing::Stale => Some(format!(
                "the host accepted a new definition of tool '{tool}' of MCP server '{server}' \
                 since this tool was made from the old one; the call was not sent (take the \
                 server's tools again: McpClient::tools)"
            )),
        }
    }

    fn server(&self) -> &str {
        &self.connection.server.name
    }

    /// The error of a request that did not get an answer.
    fn failed(&self, error: ServiceError) -> anyhow::Error {
        let (server, tool) = (self.server(), &self.remote);
        match error {
            ServiceError::McpError(data) => anyhow!(
                "MCP server '{server}' refused the call of '{tool}' (error {}): {}",
                data.code.0,
                data.message
            ),
            ServiceError::Timeout { timeout } => anyhow!(
                "MCP server '{server}' did not answer the call of '{tool}' within {timeout:?}; \
                 the call was cancelled at the server"
            ),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => anyhow!(
                "the connection to MCP server '{server}' closed during the call of '{tool}' \
                 (the server exited or the connection dropped)"
            ),
            ServiceError::UnexpectedResponse => anyhow!(
                "MCP server '{server}' answered the call of '{tool}' with something that is not \
                 a tool result"
            ),
            other => anyhow!("the call of '{tool}' on MCP server '{server}' failed: {other}"),
        }
    }
}

/// Sends `notifications/cancelled` for a request still armed when it is
/// dropped: a call the harness abandons (its timeout, the run's
/// cancellation, a sibling's failure) is stopped at the server too.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let reason = self.reason;
        runtime.spawn(async move {
            let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

/// Routes the request's progress to the call while it runs.
struct ProgressRoute<'a> {
    connection: &'a Connection,
    token: ProgressToken,
}

impl Drop for ProgressRoute<'_> {
    fn drop(&mut self) {
        self.connection.progress.remove(&self.token);
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        if let Some(refusal) = self.refusal() {
            if let Some(context) = context {
                context.warn(refusal.clone());
            }
            return Ok(ToolResult::error(refusal));
        }
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(anyhow!(
                    "the arguments of MCP tool '{}' must be a JSON object, not {}",
                    self.remote,
                    kind(&other)
                ));
            }
        };
        let bound = self.connection.server.request_timeout;
        let timeout = opts.timeout.map_or(bound, |t| t.min(bound));
        let params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        // What the calling run's tree has left goes with the call.
        let spend = budget::caller_spend(context);
        let mut options = PeerRequestOptions::with_timeout(timeout);
        options.meta = spend.as_ref().and_then(budget::budget_meta);
        let handle = self
            .peer
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(params)),
                options,
            )
            .await
            .map_err(|e| self.failed(e))?;
        let _route = context.map(|context| {
            self.connection
                .progress
                .register(handle.progress_token.clone(), context.clone());
            ProgressRoute {
                connection: &self.connection,
                token: handle.progress_token.clone(),
            }
        });
        let mut cancel = CancelOnDrop {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
            reason: "the call was abandoned by the tinyagents run",
        };
        let cancelled = async {
            match context {
                Some(context) => context.cancellation().cancelled().await,
                None => std::future::pending().await,
            }
        };
        let response = tokio::select! {
            biased;
            response = handle.await_response() => response,
            () = cancelled => {
                cancel.reason = "the tinyagents run was cancelled";
                return Err(anyhow!(
                    "the call of '{}' on MCP server '{}' was cancelled",
                    self.remote,
                    self.server()
                ));
            }
        };
        // Answered, or timed out (rmcp has told the server): nothing to
        // cancel any more.
        cancel.disarm();
        match response.map_err(|e| self.failed(e))? {
            ServerResult::CallToolResult(result) => {
                // What the served run spent is the calling run's tree's.
                if let (Some(spend), Some(context), Some(meta)) = (&spend, context, &result.meta) {
                    let caller = Caller {
                        spend,
                        context,
                        server: self.server(),
                        tool: &self.spec.name,
                    };
                    caller.record(meta);
                }
                Ok(tool_result(self.server(), &self.remote, result))
            }
            _ => Err(self.failed(ServiceError::UnexpectedResponse)),
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
