//! The transcript: the messages a model reads.

use serde::{Deserialize, Serialize};

use crate::call::ToolCall;
use crate::ids::CallId;

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The standing instruction.
    System {
        /// Its text.
        content: String,
    },
    /// What the user said.
    User {
        /// Its text.
        content: String,
    },
    /// What the model said, with the tool calls it issued.
    Assistant {
        /// The visible text (may be empty when the turn only calls tools).
        content: String,
        /// The calls, with the harness's ids and the provider's ids.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Private reasoning the provider returned, kept for providers that
        /// need it echoed back; never shown to users by the harness.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    /// The answer to one tool call. Every call in an assistant message gets
    /// exactly one.
    Tool {
        /// The harness's id of the call answered.
        call_id: CallId,
        /// The provider's id of the call answered, echoed back to it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_id: Option<String>,
        /// The tool's name.
        name: String,
        /// The result text.
        content: String,
        /// Whether the result reports a failure.
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// An assistant message without tool calls.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
            reasoning: None,
        }
    }

    /// The message's text.
    pub fn text(&self) -> &str {
        match self {
            Self::System { content }
            | Self::User { content }
            | Self::Assistant { content, .. }
            | Self::Tool { content, .. } => content,
        }
    }
}
