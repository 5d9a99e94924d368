//! Suspension for approval, and resuming with a person's decisions.

use tinyagents_core::{RunStatus, TinyAgentsError, ToolCall, args_hash};

use super::Run;
use super::turn::Slot;
use crate::call::{Admission, Scope};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{
    AgentRun, ApprovalDecision, PendingCall, SUSPENDED_RUN_FORMAT, SuspendedRun, TurnEntry,
};

/// Options of a resumed run segment.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// The resumed run's cancellation token; a fresh one when absent.
    pub cancel: Option<tinyagents_core::CancellationToken>,
}

impl<'h> Run<'h> {
    /// Ends a run segment waiting for approval: the calls that needed none
    /// have settled; the state holds what the host needs to resume.
    pub(crate) async fn suspend(&mut self, turn: Vec<TurnEntry>) -> AgentRun {
        let ctx = &self.ctx;
        let suspended = SuspendedRun {
            format: SUSPENDED_RUN_FORMAT,
            run_id: ctx.run_id.clone(),
            state: self.state.clone(),
            turn,
            budget: ctx.tracker().counts(),
            active_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            properties: (*ctx.properties).clone(),
            depth: ctx.depth,
            replay_blocked: Vec::new(),
        };
        let text = self
            .state
            .last_assistant_text()
            .unwrap_or_default()
            .to_owned();
        let mut run = self.finish(RunStatus::AwaitingApproval, text).await;
        run.suspended = Some(suspended);
        run
    }

    /// Applies a decision to a pending call: an approved call goes through
    /// admission again with the approval granted; others are refused.
    async fn decide(&mut self, call: ToolCall, decision: Option<&ApprovalDecision>) -> Slot<'h> {
        let harness = self.harness;
        let refusal = match decision {
            Some(d) if d.approved && d.args_hash == args_hash(&call.arguments) => {
                self.ctx
                    .approvals
                    .grant(call.id.clone(), d.args_hash.clone());
                let scope = Scope::Model {
                    ctx: &mut self.ctx,
                    state: &self.state,
                    position: 0,
                };
                return match harness.readmit(scope, &self.events, call).await {
                    Admission::Run(admitted) => Slot::Run {
                        call: admitted.call,
                        entry: admitted.entry,
                        args_hash: None,
                        outcome: None,
                    },
                    Admission::Pending(call, reason) => Slot::Pending(PendingCall { call, reason }),
                    Admission::Refused(call, error) | Admission::Fatal(call, error) => {
                        self.refused_slot(call, &error).await
                    }
                };
            }
            Some(d) if d.approved => {
                "refused: the approval does not match this call's arguments, so it was not run"
                    .to_owned()
            }
            Some(d) => format!(
                "denied by a person{}",
                d.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            None => "refused: no decision was given for this call".to_owned(),
        };
        let refusal = TinyAgentsError::tool_failed(call.name.clone(), refusal);
        self.refused_slot(call, &refusal).await
    }
}

impl AgentHarness {
    /// Resumes a run suspended for approval. Every pending call needs a
    /// decision: an approved call runs once (the approval binds to the
    /// call's id and the hash of its arguments), a denied call gets a
    /// refusal result. Time spent waiting is not charged to the run's
    /// wall clock.
    pub async fn resume(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        // Once the run is open, its failure is reported on its bounded sink.
        let mut events = events.clone();
        let result = self
            .resume_segment(suspended, decisions, options, &mut events)
            .await;
        super::report_failure(&events, result).await
    }

    async fn resume_segment(
        &self,
        mut suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &mut EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        suspended.check_format()?;
        for pending in suspended.pending() {
            if !decisions.iter().any(|d| d.call_id == pending.call.id) {
                return Err(TinyAgentsError::State(format!(
                    "no decision for pending call {} ({}); every pending call needs one",
                    pending.call.id, pending.call.name
                )));
            }
        }
        let turn = std::mem::take(&mut suspended.turn);
        let (ctx, state) = self.restore(suspended, options);
        let mut run = self.open(ctx, state, events);
        *events = run.sink().clone();
        let mut slots = Vec::with_capacity(turn.len());
        for entry in turn {
            let slot = match entry {
                TurnEntry::Settled { message } => Slot::Settled(message),
                TurnEntry::Pending { pending } => {
                    let decision = decisions.iter().find(|d| d.call_id == pending.call.id);
                    run.decide(pending.call, decision).await
                }
            };
            slots.push(slot);
        }
        let end = run.complete_turn(slots, None).await?;
        run.continue_after(end).await
    }
}
