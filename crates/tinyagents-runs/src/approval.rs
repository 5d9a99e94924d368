//! Calls that wait for a person, and the decisions people make on them:
//! who, when, why, and what binds each (run, suspension, call, tool,
//! arguments' hash).

use serde_json::Value;
use tinyagents_core::{CallId, RunId};
use tinyagents_harness::ApprovalDecision;
use tinyagents_ledger::Timestamp;

/// One call a run waited on in one of its suspensions, and its decision
/// once made. Its binding (tool and arguments' hash) is read from the
/// run's sealed state when it suspended, never from the person deciding.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingCall {
    /// The run.
    pub run_id: RunId,
    /// The run's agent.
    pub agent: String,
    /// Which of the run's suspensions (1 for its first).
    pub suspension: u32,
    /// The call.
    pub call_id: CallId,
    /// Its tool.
    pub tool: String,
    /// Why it waits (who asked: a policy, the tool's spec, the gate).
    pub reason: String,
    /// The hash of its arguments: the approval binds to it.
    pub args_hash: String,
    /// Its arguments as the suspended state keeps them (redacted). Show
    /// them only where the run's capture setting allows.
    pub arguments: Value,
    /// When the run suspended.
    pub requested_at: Timestamp,
    /// The decision, once made.
    pub decision: Option<DecisionRecord>,
}

impl WaitingCall {
    /// The decision as the harness takes it, if made.
    pub fn approval(&self) -> Option<ApprovalDecision> {
        self.decision.as_ref().map(|d| ApprovalDecision {
            run_id: self.run_id.clone(),
            call_id: self.call_id.clone(),
            tool_name: self.tool.clone(),
            args_hash: self.args_hash.clone(),
            approved: d.approved,
            reason: d.reason.clone(),
        })
    }
}

/// A decision as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// Approved or denied.
    pub approved: bool,
    /// Why (what the model reads for a denied call).
    pub reason: Option<String>,
    /// Who decided.
    pub by: String,
    /// When.
    pub at: Timestamp,
}

/// A decision to record ([`RunStore::decide`](crate::RunStore::decide)):
/// one waiting call, approved or denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The call.
    pub call_id: CallId,
    /// Approve or deny.
    pub approved: bool,
    /// Why.
    pub reason: Option<String>,
}

impl Decision {
    /// Approves `call`.
    pub fn approve(call: impl Into<CallId>) -> Self {
        Self {
            call_id: call.into(),
            approved: true,
            reason: None,
        }
    }

    /// Denies `call`; the model reads `reason`.
    pub fn deny(call: impl Into<CallId>, reason: impl Into<String>) -> Self {
        Self {
            call_id: call.into(),
            approved: false,
            reason: Some(reason.into()),
        }
    }

    /// With a reason (also for an approval).
    #[must_use]
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// What [`RunStore::decide`](crate::RunStore::decide) recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The calls decided by this step, with their decisions.
    pub decided: Vec<WaitingCall>,
    /// Calls of the suspension still undecided.
    pub undecided: Vec<WaitingCall>,
}

impl Decided {
    /// Whether every waiting call is decided now: the run is queued to be
    /// resumed.
    pub fn is_complete(&self) -> bool {
        self.undecided.is_empty()
    }
}
