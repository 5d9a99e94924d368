//! What a run may spend, and what happens when it reaches a bound.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::price::Cost;

/// Which bound a run reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// `max_model_calls`.
    ModelCalls,
    /// `max_tool_calls` (model-issued and nested calls together).
    ToolCalls,
    /// `max_tokens`: tokens of the whole tree of runs.
    Tokens,
    /// `max_cost`: money of the whole tree of runs, in billionths of the
    /// currency's smallest unit.
    Cost,
    /// The wall-clock budget.
    WallClock,
    /// `max_parallel_calls`: calls issued in one turn.
    ParallelCalls,
    /// `max_depth`: sub-agent recursion.
    Depth,
    /// `max_nested_depth`: nested tool calls.
    NestedDepth,
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ModelCalls => "max_model_calls",
            Self::ToolCalls => "max_tool_calls",
            Self::Tokens => "max_tokens",
            Self::Cost => "max_cost",
            Self::WallClock => "wall_clock",
            Self::ParallelCalls => "max_parallel_calls",
            Self::Depth => "max_depth",
            Self::NestedDepth => "max_nested_depth",
        })
    }
}

/// What a run does when it reaches a limit at a loop boundary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitBehavior {
    /// The run fails with [`TinyAgentsError::LimitExceeded`](crate::TinyAgentsError::LimitExceeded).
    #[default]
    Error,
    /// The run stops and returns what it has, with
    /// [`RunStatus::LimitReached`](crate::RunStatus::LimitReached).
    Stop,
}

/// The bounds of one run. Every bound is inclusive: a run may make exactly
/// `max_tool_calls` calls, and the next one is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Model calls per run.
    pub max_model_calls: u32,
    /// Tool calls per run, model-issued and nested together.
    pub max_tool_calls: u32,
    /// Tokens (input plus output) this run and every run it delegates to
    /// may spend together; `None` for no cap of its own (a parent's still
    /// binds). Each model call reserves its worst case before it is made.
    pub max_tokens: Option<u64>,
    /// Money this run and every run it delegates to may spend together, at
    /// the harness's [`PriceTable`](crate::PriceTable); `None` for no cap of
    /// its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<Cost>,
    /// Wall-clock budget of the run's active time; `None` for no cap.
    pub wall_clock: Option<Duration>,
    /// Tool calls one model turn may issue.
    pub max_parallel_calls: u32,
    /// Bytes of a tool result kept; the rest is cut with a marker.
    pub max_tool_result_bytes: usize,
    /// Default timeout of one tool call; a tool's spec may set its own.
    pub tool_timeout: Option<Duration>,
    /// Sub-agent recursion depth.
    pub max_depth: u32,
    /// Nested tool-call levels; 0 disables nesting.
    max_nested_depth: u32,
    /// What reaching a limit does.
    pub behavior: LimitBehavior,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_model_calls: 50,
            max_tool_calls: 200,
            max_tokens: None,
            max_cost: None,
            wall_clock: Some(Duration::from_secs(600)),
            max_parallel_calls: 64,
            max_tool_result_bytes: 64 * 1024,
            tool_timeout: Some(Duration::from_secs(120)),
            max_depth: 3,
            max_nested_depth: 0,
            behavior: LimitBehavior::Error,
        }
    }
}

impl RunLimits {
    /// The nested tool-call depth cap; 0 (the default) means disabled.
    pub fn max_nested_depth(&self) -> u32 {
        self.max_nested_depth
    }

    /// Enables nested tool calls up to `n` levels (3 is a reasonable choice).
    #[must_use]
    pub fn with_max_nested_depth(mut self, n: u32) -> Self {
        self.max_nested_depth = n;
        self
    }

    /// Sets `max_model_calls`.
    #[must_use]
    pub fn with_max_model_calls(mut self, n: u32) -> Self {
        self.max_model_calls = n;
        self
    }

    /// Sets `max_tool_calls`.
    #[must_use]
    pub fn with_max_tool_calls(mut self, n: u32) -> Self {
        self.max_tool_calls = n;
        self
    }

    /// Sets `max_tokens`.
    #[must_use]
    pub fn with_max_tokens(mut self, n: u64) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets `max_cost`.
    #[must_use]
    pub fn with_max_cost(mut self, cost: Cost) -> Self {
        self.max_cost = Some(cost);
        self
    }

    /// Sets the wall-clock budget (`None` for none).
    #[must_use]
    pub fn with_wall_clock(mut self, budget: Option<Duration>) -> Self {
        self.wall_clock = budget;
        self
    }

    /// Sets `max_parallel_calls`.
    #[must_use]
    pub fn with_max_parallel_calls(mut self, n: u32) -> Self {
        self.max_parallel_calls = n;
        self
    }

    /// Sets `max_tool_result_bytes`.
    #[must_use]
    pub fn with_max_tool_result_bytes(mut self, n: usize) -> Self {
        self.max_tool_result_bytes = n;
        self
    }

    /// Sets the default tool timeout (`None` for none).
    #[must_use]
    pub fn with_tool_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.tool_timeout = timeout;
        self
    }

    /// Sets `max_depth`, the sub-agent recursion cap.
    #[must_use]
    pub fn with_max_depth(mut self, n: u32) -> Self {
        self.max_depth = n;
        self
    }

    /// Sets what reaching a limit does.
    #[must_use]
    pub fn with_behavior(mut self, behavior: LimitBehavior) -> Self {
        self.behavior = behavior;
        self
    }
}

/// Tokens a model call used (or a run, or a tree of runs, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, those read from the provider's cache included.
    pub input_tokens: u64,
    /// Completion tokens, reasoning tokens included.
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's cache (0 when the
    /// provider does not say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of `output_tokens`, those spent reasoning (0 when the provider does
    /// not say).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// `input` prompt and `output` completion tokens.
    pub fn new(input: u64, output: u64) -> Self {
        Self {
            input_tokens: input,
            output_tokens: output,
            ..Self::default()
        }
    }

    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(rhs.cached_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(rhs.reasoning_tokens);
    }
}
