//! Suspension for approval, and resuming with a person's decisions.

use tinyagents_core::{RunContext, RunStatus, State, TinyAgentsError, args_hash};

use super::{Admission, RunAcc, Slot};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{AgentRun, ApprovalDecision, SUSPENDED_RUN_FORMAT, SuspendedRun, TurnEntry};

/// Options of a resumed run segment.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// The resumed run's cancellation token; a fresh one when absent.
    pub cancel: Option<tinyagents_core::CancellationToken>,
}

impl AgentHarness {
    /// Ends a run segment waiting for approval: the calls that needed none
    /// have settled; the state holds what the host needs to resume.
    pub(crate) async fn suspend(
        &self,
        ctx: &RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        turn: Vec<TurnEntry>,
    ) -> AgentRun {
        let suspended = SuspendedRun {
            format: SUSPENDED_RUN_FORMAT,
            run_id: ctx.run_id.clone(),
            state: state.clone(),
            turn,
            budget: ctx.tracker().counts(),
            active_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            properties: (*ctx.properties).clone(),
            depth: ctx.depth,
            replay_blocked: Vec::new(),
        };
        let text = state.last_assistant_text().unwrap_or_default().to_owned();
        let mut run = self
            .finish(ctx, state, events, acc, RunStatus::AwaitingApproval, text)
            .await;
        run.suspended = Some(suspended);
        run
    }

    /// Resumes a run suspended for approval. Every pending call needs a
    /// decision: an approved call runs once (the approval binds to the
    /// call's id and the hash of its arguments), a denied call gets a
    /// refusal result. Time spent waiting is not charged to the run's
    /// wall-clock budget.
    pub async fn resume(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        // Issue 10 item 8: `restore` bounds the sink; failures are reported on it.
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
        events: &mut EventSink, // Issue 10 item 8: `restore` bounds it.
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
        let (mut ctx, mut state) = self.restore(suspended, options, events);
        let events = &*events; // Issue 10 item 8
        let mut acc = RunAcc::default();
        let assistant_text = state.last_assistant_text().unwrap_or_default().to_owned();
        let mut slots = Vec::with_capacity(turn.len());
        for entry in turn {
            let slot = match entry {
                TurnEntry::Settled { message } => Slot::Settled(message),
                TurnEntry::Pending { pending } => {
                    let decision = decisions.iter().find(|d| d.call_id == pending.call.id);
                    self.decide(&mut ctx, &state, events, pending.call, decision)
                        .await
                }
            };
            slots.push(slot);
        }
        self.start_rows(&ctx, events, &mut slots).await;
        let outcomes = self.execute_turn(&ctx, &state, events, &slots).await;
        let end = self
            .fold_turn(
                &mut ctx,
                &mut state,
                events,
                &mut acc,
                slots,
                outcomes,
                assistant_text,
                None,
            )
            .await?;
        match self.end_turn(&ctx, &mut state, events, &mut acc, end).await {
            Some(run) => run,
            None => self.drive(&mut ctx, &mut state, events, &mut acc).await,
        }
    }

    /// Applies a decision to a pending call: approved calls go through the
    /// policy stages again with the approval granted; others are refused.
    async fn decide<'h>(
        &'h self,
        ctx: &mut RunContext,
        state: &State,
        events: &EventSink,
        call: tinyagents_core::ToolCall,
        decision: Option<&ApprovalDecision>,
    ) -> Slot<'h> {
        let refusal = match decision {
            Some(d) if d.approved && d.args_hash == args_hash(&call.arguments) => {
                ctx.approvals.grant(call.id.clone(), d.args_hash.clone());
                let Some(entry) = self.lookup(&call.name) else {
                    let text = format!("tool not found: {}", call.name);
                    return self.refused_slot(ctx, events, call, text).await;
                };
                match self.authorize(ctx, state, call, entry).await {
                    Admission::Run(call, entry) => {
                        return Slot::Run {
                            call,
                            entry,
                            args_hash: None,
                        };
                    }
                    Admission::Pending(call, reason) => {
                        return Slot::Pending(crate::run::PendingCall { call, reason });
                    }
                    Admission::Refused(call, text) => {
                        return self.refused_slot(ctx, events, call, text).await;
                    }
                    Admission::Fatal(call, error) => {
                        return self
                            .refused_slot(ctx, events, call, error.to_string())
                            .await;
                    }
                }
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
        self.refused_slot(ctx, events, call, refusal).await
    }
}
