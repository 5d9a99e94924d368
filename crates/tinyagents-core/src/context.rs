//! What every hook reads: the run's context and its conversation state.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::call::ToolCall;
use crate::error::TinyAgentsError;
use crate::extensions::{Approvals, Extensions};
use crate::ids::{AgentId, RunId};
use crate::limits::{LimitKind, RunLimits, Usage};
use crate::message::Message;
use crate::spend::{Spend, SpendCaps, Spent};
use crate::tracker::{BudgetCounts, LimitTracker};

/// Which payloads ride on events. Off by default: events carry ids, timings
/// and usage only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadCapture {
    /// Prompts and completions on model events.
    pub model_io: bool,
    /// Arguments and results on tool events.
    pub tool_io: bool,
}

impl PayloadCapture {
    /// Everything captured.
    pub fn all() -> Self {
        Self {
            model_io: true,
            tool_io: true,
        }
    }
}

/// The context of one run: identity, limits, the shared budget, the
/// cancellation token and the clock. Hooks and tools borrow it.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run.
    pub run_id: RunId,
    /// The agent running, when the harness has one.
    pub agent_id: Option<AgentId>,
    /// The run's bounds.
    pub limits: RunLimits,
    /// Sub-agent depth: 0 for a run a host started.
    pub depth: u32,
    /// Which payloads events carry.
    pub capture: PayloadCapture,
    /// Host metadata that travels with the run (and into delegated runs).
    pub properties: Arc<Map<String, Value>>,
    /// Approvals granted for this run's calls.
    pub approvals: Approvals,
    /// Typed values attached by the host or the harness.
    pub extensions: Extensions,
    tracker: Arc<LimitTracker>,
    spend: Spend,
    cancel: CancellationToken,
    segment_started: Instant,
    active_before: Duration,
}

impl RunContext {
    /// A context for a new run with a fresh budget.
    pub fn new(run_id: RunId, limits: RunLimits) -> Self {
        let tracker = Arc::new(LimitTracker::new(&limits));
        Self::with_tracker(run_id, limits, tracker)
    }

    /// A context that spends from an existing budget (a resumed run, or a
    /// tree-wide budget shared with delegated runs).
    /// Its tokens and money are a new tree's root; [`Self::with_spend`]
    /// puts it in another.
    pub fn with_tracker(run_id: RunId, limits: RunLimits, tracker: Arc<LimitTracker>) -> Self {
        let spend = Spend::root(
            run_id.clone(),
            None,
            SpendCaps::of(&limits),
            Spent::default(),
            None,
        );
        Self::with_budget(run_id, limits, tracker, spend)
    }

    /// A context that spends calls from `tracker` and tokens and money
    /// from `spend` (its node of a tree).
    pub fn with_budget(
        run_id: RunId,
        limits: RunLimits,
        tracker: Arc<LimitTracker>,
        spend: Spend,
    ) -> Self {
        Self {
            run_id,
            agent_id: None,
            limits,
            depth: 0,
            capture: PayloadCapture::default(),
            properties: Arc::new(Map::new()),
            approvals: Approvals::default(),
            extensions: Extensions::default(),
            tracker,
            spend,
            cancel: CancellationToken::new(),
            segment_started: Instant::now(),
            active_before: Duration::ZERO,
        }
    }

    /// Uses `token` as the run's cancellation token.
    #[must_use]
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Approves `call` of this run as it is (its id, tool and arguments).
    pub fn approve_call(&mut self, call: &ToolCall) {
        self.approvals.grant(&self.run_id, call);
    }

    /// Whether `call` of this run is approved, with this tool and these
    /// arguments.
    pub fn is_call_approved(&self, call: &ToolCall) -> bool {
        self.approvals.is_call_approved(&self.run_id, call)
    }

    /// The shared budget.
    pub fn tracker(&self) -> &LimitTracker {
        &self.tracker
    }

    /// The shared budget, to hand to something that outlives this borrow.
    pub fn tracker_arc(&self) -> &Arc<LimitTracker> {
        &self.tracker
    }

    /// Spends from `spend`: the run's node of a tree of runs (a delegated
    /// run's, or a resumed run's root holding what it had spent).
    #[must_use]
    pub fn with_spend(mut self, spend: Spend) -> Self {
        self.spend = spend;
        self
    }

    /// The run's tokens and money: its node of its tree.
    pub fn spend(&self) -> &Spend {
        &self.spend
    }

    /// What the run has spent, as its state persists it: its tool-call
    /// budget and the tokens and money of it and every run under it.
    pub fn budget(&self) -> BudgetCounts {
        let spent = self.spend.total();
        BudgetCounts {
            tokens: spent.usage.total(),
            spent,
            ..self.tracker.counts()
        }
    }

    /// The run's cancellation token.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Active time spent by the run (on tokio's clock, so tests can pause
    /// it): time waiting for approval between a
    /// deferral and its resume is not counted.
    pub fn elapsed(&self) -> Duration {
        self.active_before + self.segment_started.elapsed()
    }

    /// Continues the clock of a resumed run that had already been active for
    /// `active` before it was suspended.
    pub fn resume_clock(&mut self, active: Duration) {
        self.active_before = active;
        self.segment_started = Instant::now();
    }

    /// What is left of the wall-clock budget, `None` when there is none.
    pub fn remaining(&self) -> Option<Duration> {
        self.limits
            .wall_clock
            .map(|budget| budget.saturating_sub(self.elapsed()))
    }

    /// When the wall-clock budget runs out, `None` when there is none (or
    /// it lies past what the clock can hold). Reading it takes no clock
    /// reading: a call bounds itself by it without one.
    pub fn wall_clock_end(&self) -> Option<Instant> {
        let budget = self.limits.wall_clock?;
        self.segment_started
            .checked_add(budget.saturating_sub(self.active_before))
    }

    /// The wall-clock budget as an error if it is spent.
    pub fn check_wall_clock(&self) -> Result<(), TinyAgentsError> {
        match self.limits.wall_clock {
            Some(budget) if self.elapsed() >= budget => Err(TinyAgentsError::LimitExceeded {
                kind: LimitKind::WallClock,
                limit: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
                used: u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            _ => Ok(()),
        }
    }
}

/// The conversation state of a run: the transcript and what was spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The transcript, system message first. Appended to, never copied per turn.
    pub messages: Vec<Message>,
    /// Model turns taken.
    pub turn: u32,
    /// Tool calls the model has issued in this run (numbers the ids `p1`, `p2`, …).
    #[serde(default)]
    pub calls_issued: u64,
    /// Tokens used.
    pub usage: Usage,
    /// Scratch values middlewares may keep with the state (persisted with it).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub values: Map<String, Value>,
}

impl State {
    /// A state holding `messages`.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// The text of the last assistant message.
    pub fn last_assistant_text(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::Assistant { content, .. } => Some(content.as_str()),
            _ => None,
        })
    }
}
