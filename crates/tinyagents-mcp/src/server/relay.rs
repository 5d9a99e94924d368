//! The MCP client in the seat of the model: a run of the server's harness
//! whose "model" issues the one call the client asked for and then ends
//! the run. So an MCP call is admitted, executed and settled by the same
//! path as any model-issued call: policies, gate, budget, ledger, timeout,
//! cancellation, redaction, events.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{ChatModel, ChatRequest, ChatResponse, Message, ModelError, ModelToolCall};

/// The name the relay gives itself in events (`ModelStarted`, spans).
pub(crate) const RELAY_MODEL_NAME: &str = "mcp-client";

/// One MCP call, as the run's input carries it to the relay.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct RelayedCall {
    pub(crate) tool: String,
    #[serde(default)]
    pub(crate) arguments: Map<String, Value>,
}

/// Turn 1 (the input is the last message): the call. Turn 2 (the call's
/// answer is): the end, with no text. Anything else is not a relay run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RelayModel;

#[async_trait]
impl ChatModel for RelayModel {
    fn name(&self) -> &str {
        RELAY_MODEL_NAME
    }

    /// No provider: the MCP client in the model's seat.
    fn provider(&self) -> &str {
        "tinyagents.mcp_relay"
    }

    /// Not a model call: the client's turn spends nothing of a budget.
    fn metered(&self) -> bool {
        false
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        match request.messages.last() {
            Some(Message::User { content }) => {
                let call: RelayedCall =
                    serde_json::from_str(content).map_err(|e| ModelError::InvalidRequest {
                        message: format!("not a relayed MCP call: {e}"),
                    })?;
                Ok(ChatResponse::tool_calls(vec![ModelToolCall::new(
                    None,
                    call.tool,
                    Value::Object(call.arguments),
                )]))
            }
            Some(Message::Tool { .. }) => Ok(ChatResponse::text("")),
            _ => Err(ModelError::InvalidRequest {
                message: "a relay run ends after its one call".to_owned(),
            }),
        }
    }
}
