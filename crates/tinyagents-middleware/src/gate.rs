//! The host's security gate.

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{AgentId, CallId, RunContext, RunId, TinyAgentsError};
use tinytools::ToolSpec;

use crate::decision::ToolVerdict;

/// What a host gate is asked about one call.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallRequest<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// The agent, when the harness has one.
    pub agent_id: Option<&'a AgentId>,
    /// The call.
    pub call_id: &'a CallId,
    /// The immediate parent, for a nested call.
    pub parent_call_id: Option<&'a CallId>,
    /// The tool's spec.
    pub spec: &'a ToolSpec,
    /// The prepared arguments.
    pub arguments: &'a Value,
}

impl ToolCallRequest<'_> {
    /// Whether the call is nested (it cannot be prompted for).
    pub fn is_nested(&self) -> bool {
        self.parent_call_id.is_some()
    }
}

/// What a gate says about the run's final output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputVerdict {
    /// Deliver it.
    Allow,
    /// Deliver this text instead.
    Rewrite(String),
    /// Do not deliver it.
    Block {
        /// Why.
        reason: String,
    },
}

/// The host's authority over a hosted run. An error or a panic inside a
/// gate is a denial.
#[async_trait]
pub trait SecurityGate: Send + Sync {
    /// Authorises one tool call: `Allow`, `Deny`, or `Defer` to ask a
    /// person (a deferral for a model-issued call, a refusal for a nested
    /// one, which cannot be prompted for).
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError>;

    /// Screens the run's final output. An error blocks it.
    async fn screen_output(
        &self,
        _ctx: &RunContext,
        _output: &str,
    ) -> Result<OutputVerdict, TinyAgentsError> {
        Ok(OutputVerdict::Allow)
    }
}
