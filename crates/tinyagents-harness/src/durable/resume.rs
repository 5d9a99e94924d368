//! Suspension for approval, and resuming with a person's decisions.
//!
//! A resume is a trust boundary: the stored state and the decisions come
//! from the host's storage. The state is checked first (`resume_check`),
//! and every approved call goes through admission again like a new call:
//! its tool looked up, its arguments prepared again, every policy, the gate
//! and the budget; only the approval it waited for is answered, once.

use tinyagents_core::TinyAgentsError;
use tinyagents_ledger::RunState;

use super::resume_check::{check_against_checkpoint, check_turn, match_decisions};
use crate::call::state_error;
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{AgentRun, ApprovalDecision, SuspendedRun, TurnEntry};
use crate::trace::{self, Segment};
use crate::turns::turn::Slot;

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
    /// The node of the tree the run spent in before it was suspended, when
    /// it is resumed in that same tree (a server resuming a served call
    /// under the budget its caller sent): the resumed run's node is made
    /// under it, starting from what the run had spent, which the nodes
    /// above already count, and every cap above binds it. `None` (the
    /// default): the run is the root of its own tree again, starting from
    /// what its state says it spent.
    pub spend: Option<tinyagents_core::Spend>,
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
        // Its own `invoke_agent` span, under whatever is current where the
        // host resumes; `tinyagents.run.id` links it to the run's others.
        let span = trace::invoke_agent(
            self,
            &suspended.run_id,
            &suspended.properties,
            suspended.depth,
            Segment::Resume,
        );
        let run_id = suspended.run_id.clone();
        super::restored_segment(self, run_id, span, events, async |events| {
            self.resume_segment(suspended, decisions, options, events)
                .await
        })
        .await
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
        if self.calls.ledger.is_some() {
            return Ok(());
        }
        self.resumed.claim(suspended)
    }

    /// With a ledger, holds the suspended state to the run's checkpoint.
    async fn check_with_ledger(&self, suspended: &SuspendedRun) -> Result<(), TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
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
