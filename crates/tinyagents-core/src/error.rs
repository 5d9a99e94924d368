//! The error type of the framework.

use std::fmt;

use crate::ids::RunId;
use crate::limits::LimitKind;
use crate::model::ModelError;
use crate::source::ErrorSource;

/// A limit's figure as its message shows it: money in smallest units.
fn amount(kind: LimitKind, n: u64) -> String {
    match kind {
        LimitKind::Cost => crate::price::Cost::from_nanos(n).to_string(),
        _ => n.to_string(),
    }
}

/// An error of the framework. Each variant carries structured fields, so a
/// host can act on them without parsing text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TinyAgentsError {
    /// No tool of that name may be called here.
    #[error("tool not found: {name}")]
    ToolNotFound {
        /// The name asked for.
        name: String,
    },
    /// A tool call failed or was refused; `message` is what the model reads.
    #[error("{message}")]
    ToolFailed {
        /// The tool's name.
        tool: String,
        /// What went wrong, as the model reads it.
        message: String,
        /// The error's own text when `message` withholds it (detailed
        /// errors off): for the host (its events, the ledger row, the
        /// run's error), never for the model. `None` when `message` is the
        /// whole story.
        detail: Option<String>,
    },
    /// A tool's arguments were not acceptable. It displays as `message`
    /// alone, which already names the tool, so the tool is named once:
    /// `invalid arguments for tool 'add' at '/a': schema keyword 'type'
    /// expects "integer"`.
    #[error("{message}")]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// The JSON path of the first problem (empty for the whole value).
        path: String,
        /// The whole text: the tool, where its arguments went wrong and
        /// what was expected.
        message: String,
    },
    /// A model call was not made: its tree caps money (`max_cost`) and
    /// the price table does not name its model, so its cost could not be
    /// bounded.
    #[error(
        "model '{model}' has no price in the price table, and the run's tree caps its cost (max_cost): the call's cost cannot be bounded, so it was not made"
    )]
    ModelUnpriced {
        /// The model's name, as prices are looked up.
        model: String,
    },
    /// A run limit was reached.
    /// For `max_tokens` and `max_cost`, `used` counts what the tree had
    /// spent and held when a model call's reservation was refused (the
    /// limit less `used` is what was left); money is in billionths of the
    /// smallest unit, and displays in smallest units.
    #[error("limit exceeded: {kind} (limit {}, used {})", amount(*kind, *limit), amount(*kind, *used))]
    LimitExceeded {
        /// Which limit.
        kind: LimitKind,
        /// Its value.
        limit: u64,
        /// What had been used when the limit refused.
        used: u64,
    },
    /// A call or a run took longer than it was allowed.
    #[error("'{what}' timed out after {after_ms} ms")]
    Timeout {
        /// What timed out (a tool's name, or `run`).
        what: String,
        /// The bound, in milliseconds.
        after_ms: u64,
    },
    /// The run was cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// A tool needs a person's approval before it may run (raised by a tool
    /// or a wrap during execution). A model-issued call is deferred; a nested
    /// call cannot be, and is refused.
    #[error("tool '{tool}' requires approval: {reason}")]
    ApprovalRequired {
        /// The tool.
        tool: String,
        /// What the person is asked.
        reason: String,
    },
    /// Nested tool calls are off for this run (`max_nested_depth` is 0).
    #[error("cannot call tool '{tool}': nested tool calls are disabled (max_nested_depth = 0)")]
    NestedDisabled {
        /// The tool asked for.
        tool: String,
    },
    /// A nested call would go deeper than `max_nested_depth`.
    #[error("nested call '{tool}' exceeds max_nested_depth ({max})")]
    NestedDepthExceeded {
        /// The tool asked for.
        tool: String,
        /// The level the call would have had.
        depth: u32,
        /// The cap.
        max: u32,
    },
    /// A nested call to a tool that needs approval: it cannot wait for one.
    #[error("nested call '{tool}' requires approval; nested calls cannot be deferred")]
    NestedApprovalRequired {
        /// The tool asked for.
        tool: String,
    },
    /// The parent already had its quota of refused nested calls.
    #[error(
        "nested call '{tool}' refused without evaluation: parent {parent} already had {cap} refused nested calls"
    )]
    NestedRefusalCap {
        /// The tool asked for.
        tool: String,
        /// The calling call.
        parent: crate::ids::CallId,
        /// The quota.
        cap: u32,
    },
    /// The model provider failed.
    #[error("model error: {0}")]
    Model(#[from] ModelError),
    /// A policy refused (middleware, security gate, approval). Fail-closed
    /// errors land here with the name of what refused.
    #[error("denied by {by}: {reason}")]
    Denied {
        /// The middleware or gate that refused.
        by: String,
        /// Why.
        reason: String,
    },
    /// The host configured the harness in a way that cannot run.
    #[error("configuration error: {0}")]
    Config(String),
    /// Persisted state could not be read back.
    #[error("state error: {0}")]
    State(String),
    /// A tool could not be registered (its name is taken or malformed, its
    /// schema does not compile); `source` is the registry's error. Displays
    /// like [`Config`](Self::Config).
    #[error("configuration error: {source}")]
    ToolRegistration {
        /// The registry's error.
        #[source]
        source: ErrorSource,
    },
    /// The effect ledger refused or failed an operation the run needed: a
    /// run id it knows already (a new run needs a new id), a row or a
    /// checkpoint it could not read. `source` is the ledger's error.
    /// Displays like [`State`](Self::State).
    #[error("state error: {source}")]
    Ledger {
        /// The ledger's error.
        #[source]
        source: ErrorSource,
    },
    /// The effect ledger failed (it did not refuse) to claim a new run, so
    /// the run was not started.
    #[error(
        "state error: the effect ledger could not claim run {run}, so it was not started: {source}"
    )]
    LedgerClaim {
        /// The run.
        run: RunId,
        /// The ledger's error.
        #[source]
        source: ErrorSource,
    },
    /// A run's checkpoint in the effect ledger does not decode: its base, or
    /// the `entry`th entry appended after it (counted from 1).
    #[error("state error: checkpoint of run {run} cannot be read: {}{source}", EntryPrefix(*entry))]
    CheckpointUnreadable {
        /// The run.
        run: RunId,
        /// The entry after the base that does not decode; `None`: the base.
        entry: Option<usize>,
        /// The decoder's error.
        #[source]
        source: ErrorSource,
    },
    /// A suspended run could not be sealed: it does not serialise.
    #[error("state error: suspended run {run} cannot be sealed: it does not serialise: {source}")]
    SealEncode {
        /// The run.
        run: RunId,
        /// The encoder's error.
        #[source]
        source: ErrorSource,
    },
    /// A sealed run's MAC checks out but its payload does not decode as a
    /// suspended run (it was sealed by another version).
    #[error(
        "state error: sealed run's MAC checks out but its payload is not a suspended run: {source}"
    )]
    SealedPayload {
        /// The decoder's error.
        #[source]
        source: ErrorSource,
    },
}

/// `entry N after the base: ` for an appended entry, nothing for the base.
struct EntryPrefix(Option<usize>);

impl fmt::Display for EntryPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "entry {n} after the base: "),
            None => Ok(()),
        }
    }
}

impl TinyAgentsError {
    /// A `ToolFailed` error.
    pub fn tool_failed(tool: impl Into<String>, message: impl Into<String>) -> Self {
        Self::ToolFailed {
            tool: tool.into(),
            message: message.into(),
            detail: None,
        }
    }

    /// A `ToolFailed` error whose text the model does not read: it reads
    /// `message`, the host reads `detail`.
    pub fn tool_failed_withheld(
        tool: impl Into<String>,
        message: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self::ToolFailed {
            tool: tool.into(),
            message: message.into(),
            detail: Some(detail.into()),
        }
    }

    /// What the host reads of this error: a withheld tool error's own text
    /// (see [`ToolFailed::detail`](Self::ToolFailed)), else its message.
    pub fn host_text(&self) -> String {
        match self {
            Self::ToolFailed {
                detail: Some(detail),
                ..
            } => detail.clone(),
            other => other.to_string(),
        }
    }

    /// A stable, low-cardinality name of what went wrong, for OpenTelemetry's
    /// `error.type`: the variant (`tool_failed`, `denied`, `timeout`, …),
    /// and for a model error the model's kind (`model.rate_limited`, …).
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::ToolNotFound { .. } => "tool_not_found",
            Self::ToolFailed { .. } => "tool_failed",
            Self::InvalidArguments { .. } => "invalid_arguments",
            Self::LimitExceeded { .. } => "limit_exceeded",
            Self::ModelUnpriced { .. } => "model_unpriced",
            Self::Timeout { .. } => "timeout",
            Self::Cancelled => "cancelled",
            Self::ApprovalRequired { .. } => "approval_required",
            Self::NestedDisabled { .. } => "nested_disabled",
            Self::NestedDepthExceeded { .. } => "nested_depth_exceeded",
            Self::NestedApprovalRequired { .. } => "nested_approval_required",
            Self::NestedRefusalCap { .. } => "nested_refusal_cap",
            Self::Model(error) => error.error_type(),
            Self::Denied { .. } => "denied",
            Self::Config(_) | Self::ToolRegistration { .. } => "config",
            Self::State(_)
            | Self::Ledger { .. }
            | Self::LedgerClaim { .. }
            | Self::CheckpointUnreadable { .. }
            | Self::SealEncode { .. }
            | Self::SealedPayload { .. } => "state",
        }
    }
}
