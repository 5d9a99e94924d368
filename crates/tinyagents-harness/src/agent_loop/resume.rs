//! Suspension for approval, and resuming with a person's decisions.
//!
//! A resume is a trust boundary: the stored state and the decisions come
//! from the host's storage. The state is checked first (`resume_check`),
//! and every approved call goes through admission again like a new call:
//! its tool looked up, its arguments prepared again, every policy, the gate
//! and the budget; only the approval it waited for is answered, once.

use tinyagents_core::{RunStatus, TinyAgentsError, ToolCall, args_hash};
use tinyagents_ledger::RunState;
use tinytools::prepare_arguments;
use tracing::Instrument;

use super::Run;
use super::ledger::state_error;
use super::resume_check::{check_against_checkpoint, check_turn, match_decisions};
use super::turn::Slot;
use crate::call::{Admission, Scope};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{
    AgentRun, ApprovalDecision, HeldArguments, PendingCall, SUSPENDED_RUN_FORMAT, SuspendedRun,
    TurnEntry,
};
use crate::segment::SegmentGuard;
use crate::trace::{self, Segment};

/// Options of a resumed or recovered run segment.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// The resumed run's cancellation token; a fresh one when absent.
    pub cancel: Option<tinyagents_core::CancellationToken>,
    /// For a recovery only: the decisions a person made on the calls the
    /// run waited on, when the resume that was to use them was cut short
    /// (its process died). A call of the recovered turn that would wait
    /// for a person again is decided with its decision instead (bound, as
    /// in a resume, to the run, the call, the tool and the arguments), so
    /// nobody is asked twice; a call whose started row shows it was
    /// admitted before is answered from its row or its tool's
    /// reconciliation whatever the decisions say, so an approval is used
    /// once. A resume takes its decisions as an argument and refuses any
    /// here.
    pub decisions: Vec<ApprovalDecision>,
}

impl<'h> Run<'h> {
    /// Ends a run segment waiting for approval: the calls that needed none
    /// have settled; the state holds what the host needs to resume. A
    /// waiting call gives its budget slot back: resuming reserves it again.
    pub(crate) async fn suspend(&mut self, mut turn: Vec<TurnEntry>) -> AgentRun {
        let ctx = &self.ctx;
        let mut replay_blocked = Vec::new();
        for entry in &mut turn {
            if let TurnEntry::Pending { pending } = entry {
                ctx.tracker().release_tool_call();
                // The stored state keeps the waiting call as the transcript
                // does, redacted; a secret stays in this process only.
                let redacted = self.events.redaction().call(&pending.call);
                if redacted.changed || redacted.failed.is_some() {
                    replay_blocked.push(pending.call.id.clone());
                    let real = std::mem::replace(&mut pending.call, redacted.copy);
                    pending.held = HeldArguments(Some((real.arguments, real.raw_arguments)));
                }
            }
        }
        let suspended = SuspendedRun {
            format: SUSPENDED_RUN_FORMAT,
            run_id: ctx.run_id.clone(),
            state: self.state.clone(),
            turn,
            budget: ctx.tracker().counts(),
            active_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            properties: (*ctx.properties).clone(),
            depth: ctx.depth,
            replay_blocked,
        };
        let text = self
            .state
            .last_assistant_text()
            .unwrap_or_default()
            .to_owned();
        // A resume is held to the checkpoint of this turn: make it durable.
        self.flush_ledger().await;
        let mut run = self.finish(RunStatus::AwaitingApproval, text).await;
        run.suspended = Some(suspended);
        run
    }

    /// Applies a decision to a waiting call: an approved call is admitted
    /// again with the approval granted; others are refused.
    pub(super) async fn decide(
        &mut self,
        position: usize,
        pending: PendingCall,
        blocked: bool,
        decision: Option<&ApprovalDecision>,
    ) -> Slot<'h> {
        let PendingCall { mut call, held, .. } = pending;
        let held = blocked.then_some(held);
        let text = match decision {
            Some(d) if d.approved => match self.approve(&mut call, d, held) {
                Ok(()) => return self.admit_approved(position, call).await,
                Err(text) => text,
            },
            Some(d) => format!(
                "denied by a person{}",
                d.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            None => "refused: no decision was given for this call".to_owned(),
        };
        let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
        self.refused_slot(call, &refusal).await
    }

    /// Checks an approval against its call and grants it for the call's
    /// arguments prepared again (injection, the invalid-arguments policy,
    /// the schema), which is what admission and the policies see.
    /// A call whose stored arguments are redacted (`held` is `Some`) runs
    /// only with the real arguments this process kept.
    fn approve(
        &mut self,
        call: &mut ToolCall,
        decision: &ApprovalDecision,
        held: Option<HeldArguments>,
    ) -> Result<(), String> {
        let harness = self.harness;
        if decision.tool_name != call.name || decision.args_hash != args_hash(&call.arguments) {
            return Err("refused: the approval does not match this call's tool or arguments, so it was not run".to_owned());
        }
        match held.map(|held| held.0) {
            None => {}
            Some(Some((arguments, raw_arguments))) => {
                call.arguments = arguments;
                call.raw_arguments = raw_arguments;
            }
            Some(None) => {
                return Err(format!(
                    "refused: the arguments of call {} held a secret that redaction kept out of the stored state, so it cannot run from that state (resume from the state this process returned, or let the model issue the call again)",
                    call.id
                ));
            }
        }
        if let Some(entry) = harness.lookup(&call.name) {
            match prepare_arguments(entry, call, &harness.injected, harness.invalid_args) {
                Ok(prepared) => {
                    call.arguments = prepared;
                    call.raw_arguments = None;
                }
                Err(error) => return Err(TinyAgentsError::from(error).to_string()),
            }
        }
        self.ctx.approve_call(call);
        Ok(())
    }

    /// Admits an approved call like a new one, at its place in the turn.
    async fn admit_approved(&mut self, position: usize, call: ToolCall) -> Slot<'h> {
        let harness = self.harness;
        let scope = Scope::Model {
            ctx: &mut self.ctx,
            state: &self.state,
            position,
        };
        match harness.admit(scope, &self.events, call).await {
            Admission::Run(admitted) => {
                self.approved_once.push(admitted.call.id.clone());
                Slot::Run {
                    call: admitted.call,
                    entry: admitted.entry,
                    args_hash: None,
                    outcome: None,
                }
            }
            Admission::Pending(call, reason) => {
                Slot::Pending(PendingCall::waiting(self.ctx.run_id.clone(), call, reason))
            }
            Admission::Refused(call, error) | Admission::Fatal(call, error) => {
                self.refused_slot(call, &error).await
            }
        }
    }
}

impl AgentHarness {
    /// Resumes a run suspended for approval. Every pending call needs a
    /// decision. An approved call goes through admission again (its
    /// arguments prepared again, every policy, the gate, the budget) and
    /// runs at most once: the approval binds the run, the call id, the tool
    /// and the hash of the arguments, and is used once. With an effect
    /// ledger, the ledger is the record of that use, across processes;
    /// without one, this harness remembers it for its lifetime. A denied
    /// call gets a refusal result. A state that does not hold together (or,
    /// with a ledger, that the run's checkpoint contradicts) is refused and
    /// nothing runs. Time spent waiting is not charged to the run's wall
    /// clock.
    pub async fn resume(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        let (guard, mut events) = SegmentGuard::open(events, suspended.run_id.clone());
        // Its own `invoke_agent` span, under whatever is current where the
        // host resumes; `tinyagents.run.id` links it to the run's others.
        let span = trace::invoke_agent(
            self,
            &suspended.run_id,
            &suspended.properties,
            suspended.depth,
            Segment::Resume,
        );
        super::announce(&events, &suspended.run_id, self)
            .instrument(span.clone())
            .await;
        // Once the run is open, its failure is reported on its bounded sink.
        let result = self
            .resume_segment(suspended, decisions, options, &mut events)
            .instrument(span.clone())
            .await;
        let result = super::report_failure(&events, result).await;
        trace::run_ended(&span, &result, self);
        guard.disarm();
        result
    }

    async fn resume_segment(
        &self,
        mut suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &mut EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        if !options.decisions.is_empty() {
            return Err(TinyAgentsError::Config(
                "ResumeOptions::decisions is for a recovery: a resume takes its decisions as its own argument".to_owned(),
            ));
        }
        suspended.check_format()?;
        check_turn(&suspended)?;
        let decided = match_decisions(&suspended, decisions)?;
        self.check_with_ledger(&suspended).await?;
        self.claim_resume(&suspended)?;
        let turn = std::mem::take(&mut suspended.turn);
        let blocked = suspended.replay_blocked.clone();
        let (ctx, state) = self.restore(suspended, options);
        let mut run = self.open(ctx, state, events);
        *events = run.sink().clone();
        let mut slots = Vec::with_capacity(turn.len());
        for (position, (entry, decision)) in turn.into_iter().zip(decided).enumerate() {
            let slot = match entry {
                TurnEntry::Settled { message } => Slot::Settled(message),
                TurnEntry::Pending { pending } => {
                    let blocked = blocked.contains(&pending.call.id);
                    run.decide(position, pending, blocked, decision).await
                }
            };
            slots.push(slot);
        }
        let end = run.complete_turn(slots, None).await?;
        run.continue_after(end).await
    }

    /// Without a ledger, this harness is the record that a suspended state
    /// was resumed: a state whose waiting calls were decided by an earlier
    /// resume is refused whole, before anything runs (resuming it again
    /// would repeat every turn after it, and every effect in them). A call
    /// that asked for approval again while it ran (it did not act) is
    /// released from this record, so the state it waits in can be resumed.
    fn claim_resume(&self, suspended: &SuspendedRun) -> Result<(), TinyAgentsError> {
        if self.ledger.is_some() {
            return Ok(());
        }
        let run = &suspended.run_id;
        let mut used = self.approvals_used.lock();
        if let Some(pending) = suspended
            .pending()
            .find(|p| used.contains(&(run.clone(), p.call.id.clone())))
        {
            return Err(TinyAgentsError::State(format!(
                "run {run} was resumed from this suspended state before (call {} was decided then): a suspended state resumes once, and without an effect ledger this harness remembers that for its lifetime",
                pending.call.id
            )));
        }
        used.extend(
            suspended
                .pending()
                .map(|p| (run.clone(), p.call.id.clone())),
        );
        Ok(())
    }

    /// With a ledger, holds the suspended state to the run's checkpoint.
    async fn check_with_ledger(&self, suspended: &SuspendedRun) -> Result<(), TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        let run = &suspended.run_id;
        let state = ledger.run_state(run).await.map_err(state_error)?;
        if state == RunState::Finished {
            return Err(TinyAgentsError::State(format!(
                "run {run} has finished: this suspended state of it was resumed before, and an approval is used once"
            )));
        }
        // A waiting call that settled since was decided by an earlier
        // resume of this state. A call that asked again while it ran (and
        // did not act) is `deferred` again and may be resumed; one whose
        // resume was cut short is `started`, in doubt, and its admission
        // asks its tool what became of it.
        for pending in suspended.pending() {
            let id = &pending.call.id;
            if let Some(row) = ledger.get(run, id).await.map_err(state_error)?
                && row.status.is_settled()
            {
                return Err(TinyAgentsError::State(format!(
                    "run {run} was resumed from this suspended state before (call {id} is {} in the effect ledger): a suspended state resumes once",
                    row.status.as_str()
                )));
            }
        }
        let Some(checkpoint) = self.load_saved(ledger.as_ref(), &suspended.run_id).await? else {
            return Ok(());
        };
        check_against_checkpoint(suspended, &checkpoint)
    }
}
