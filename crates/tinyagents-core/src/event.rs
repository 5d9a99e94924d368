//! Events a run emits while it runs.
//!
//! Events carry ids, timings and usage; prompts, completions, arguments and
//! results ride on them only when the host opts in with
//! [`PayloadCapture`](crate::PayloadCapture).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{AgentId, CallId, RunId};
use crate::limits::{LimitKind, Usage};
use crate::model::ModelDelta;
use crate::price::Cost;
use crate::spend::Spent;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "detail", rename_all = "snake_case")]
pub enum RunStatus {
    /// The model gave a final answer.
    Completed,
    /// A tool asked to end the run (`ToolControl`).
    Terminated,
    /// A limit was reached under `LimitBehavior::Stop`.
    LimitReached(LimitKind),
    /// The run's cancellation token fired.
    Cancelled,
    /// Some calls wait for a person's approval; resume the run to go on.
    AwaitingApproval,
}

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The run began.
    RunStarted {
        /// The run.
        run_id: RunId,
        /// The agent, when the harness has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_id: Option<AgentId>,
    },
    /// A model call began.
    ModelStarted {
        /// The 1-based turn.
        turn: u32,
    },
    /// A streamed piece of the model's answer.
    ModelDelta {
        /// The 1-based turn.
        turn: u32,
        /// The piece.
        delta: ModelDelta,
    },
    /// A model call ended.
    ModelCompleted {
        /// The 1-based turn.
        turn: u32,
        /// Tokens used by this call.
        usage: Usage,
        /// What it cost at the harness's prices; `None` when its model has
        /// no price (or no table is set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
        /// How long it took.
        duration_ms: u64,
        /// Tool calls the model issued.
        tool_calls: u32,
        /// The answer text, only under `PayloadCapture::model_io`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// A tool call began executing (or was admitted and refused at once).
    ToolStarted {
        /// The call.
        call_id: CallId,
        /// The immediate parent of a nested call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<CallId>,
        /// The tool's name.
        name: String,
        /// The arguments, only under `PayloadCapture::tool_io`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
    },
    /// A long tool reported progress.
    ToolProgress {
        /// The call.
        call_id: CallId,
        /// Fraction done, 0.0 to 1.0, when the tool knows it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fraction: Option<f32>,
        /// What it is doing.
        message: String,
    },
    /// A tool call produced a result (which may report the tool's own error).
    ToolCompleted {
        /// The call.
        call_id: CallId,
        /// The immediate parent of a nested call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<CallId>,
        /// The tool's name.
        name: String,
        /// How long it ran.
        duration_ms: u64,
        /// The tool reported its own failure.
        is_error: bool,
        /// The result text, only under `PayloadCapture::tool_io`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        /// The result's host-only metadata.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    /// A tool call was refused, raised an error, panicked, timed out or was
    /// cancelled. `error` is the error's own text (redacted), also when the
    /// model read only that the tool failed (detailed errors off).
    ToolFailed {
        /// The call.
        call_id: CallId,
        /// The immediate parent of a nested call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_call_id: Option<CallId>,
        /// The tool's name.
        name: String,
        /// How long it ran.
        duration_ms: u64,
        /// What went wrong.
        error: String,
    },
    /// A model-issued call waits for a person's decision: the run ends
    /// `AwaitingApproval` after its turn, and its `SuspendedRun` lists the
    /// call. One per waiting call, before the run's end; sent whatever the
    /// payload capture (the reason is redacted; the arguments ride only
    /// under `PayloadCapture::tool_io`, redacted as `ToolStarted`'s).
    ApprovalRequested {
        /// The waiting call.
        call_id: CallId,
        /// The tool it calls.
        tool: String,
        /// Why it waits, naming what asked for the approval: the tool's
        /// spec, a policy (by name) or the host's security gate.
        reason: String,
        /// The call's arguments, redacted, when tool payloads are captured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
    },
    /// A limit refused work.
    LimitReached {
        /// Which limit.
        kind: LimitKind,
        /// Its value.
        limit: u64,
        /// What had been used.
        used: u64,
    },
    /// Something went wrong that did not stop the run.
    Warning {
        /// What.
        message: String,
    },
    /// The run ended with an error (a model failure, a limit under
    /// `LimitBehavior::Error`, a hook that failed closed, a blocked output).
    RunFailed {
        /// What went wrong.
        error: String,
    },
    /// The run ended.
    RunCompleted {
        /// How.
        status: RunStatus,
        /// Tokens used by the run's own model calls.
        usage: Usage,
        /// Tokens and money of the run and every run it delegated to.
        #[serde(default)]
        spent: Spent,
    },
    /// An event of a delegated agent's run, forwarded into the stream of the
    /// run whose tool call started it.
    Delegated {
        /// The call of the parent run that delegated.
        parent_call_id: CallId,
        /// The agent that ran.
        agent_id: AgentId,
        /// The delegated run's depth (1 for a child of a top-level run).
        depth: u32,
        /// The child's event (itself `Delegated` for a grandchild's).
        event: Box<AgentEvent>,
    },
}

impl AgentEvent {
    /// The call this event is about, for tool events.
    pub fn call_id(&self) -> Option<&CallId> {
        match self {
            Self::ToolStarted { call_id, .. }
            | Self::ToolProgress { call_id, .. }
            | Self::ToolCompleted { call_id, .. }
            | Self::ToolFailed { call_id, .. } => Some(call_id),
            _ => None,
        }
    }

    /// Whether this is a tool call's terminal event.
    pub fn is_tool_terminal(&self) -> bool {
        matches!(self, Self::ToolCompleted { .. } | Self::ToolFailed { .. })
    }
}
