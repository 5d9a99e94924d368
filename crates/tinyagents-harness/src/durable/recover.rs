//! Recovery of a run whose process died: the checkpointed turn's calls
//! admitted again, what the ledger and the tools' reconciliation say of the
//! calls in doubt, and the rows nothing will meet again settled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Map;
use tinyagents_core::{
    LimitTracker, Message, RunContext, RunId, Spend, SpendCaps, State, TinyAgentsError,
};
use tinyagents_ledger::{CallStatus, EffectLedger, RunState};

use crate::ResumeOptions;
use crate::call::Sweep;
use crate::call::{guarded, state_error};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::mutation::{Mutation, planted};
use crate::run::{AgentRun, SuspendedRun};
use crate::trace::{self, Segment};
use crate::turns::Run;
use crate::turns::turn::Slot;

impl<'h> Run<'h> {
    /// Settles the run's rows still in doubt that a recovery will not meet
    /// again (nested calls of a parent that did not run again, calls of a
    /// turn whose checkpoint was lost), asking the tools of those that must
    /// not repeat. A failure is a warning: the rows stay in doubt, in view.
    pub(crate) async fn settle_left_in_doubt(&self) {
        if planted(Mutation::LeaveInDoubtStarted) {
            return;
        }
        let harness = self.harness;
        let settled = harness
            .calls
            .settle_orphans(
                &self.ctx.run_id,
                Sweep::Started,
                self.events.redaction(),
                self.ctx.cancellation(),
            )
            .await;
        let message = match settled {
            Ok(settled) if settled.is_empty() => return,
            Ok(settled) => format!(
                "recovery settled {} call(s) left in doubt: {}",
                settled.len(),
                settled
                    .iter()
                    .map(|r| format!("{} ({}): {}", r.call_id, r.tool_name, r.note))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Err(error) => format!("the calls left in doubt were not settled: {error}"),
        };
        let message = self.events.redaction().text(message);
        self.sink().warn(|| message).await;
    }
}

impl AgentHarness {
    /// Resumes a run from its last checkpoint after its process died. The
    /// calls of the checkpointed turn go through admission again: a call
    /// that settled is answered from its row and never runs again; a call in
    /// doubt runs again only if its tool is replay-safe, otherwise it gets an
    /// "interrupted, outcome unknown" result; a call whose tool or arguments
    /// differ from its row is refused.
    pub async fn recover(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        // Its own `invoke_agent` span (the checkpoint's properties and depth
        // are not read yet); `tinyagents.run.id` links it to the run's others.
        let span = trace::invoke_agent(self, run_id, &Map::new(), 0, Segment::Recover);
        super::restored_segment(self, run_id.clone(), span, events, async |events| {
            self.recover_run(run_id, options, events).await
        })
        .await
    }

    async fn recover_run(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
        events: &mut EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
            return Err(TinyAgentsError::Config(
                "recover needs an effect ledger".to_owned(),
            ));
        };
        self.refuse_finished(ledger.as_ref(), run_id).await?;
        let saved = self
            .load_saved(ledger.as_ref(), run_id)
            .await?
            .ok_or_else(|| {
                TinyAgentsError::State(format!("run {run_id} has no checkpoint to recover from"))
            })?;
        if saved.depth > 0 {
            // Its caller will never read its answer: continuing it would
            // act for nobody. Its caller's recovery ends it (`abandon`).
            return Err(TinyAgentsError::State(format!(
                "run {run_id} is a delegated run (depth {}): it is not recovered on its own; recover the run that delegated to it, whose recovery ends this one and reconciles its calls in doubt",
                saved.depth
            )));
        }
        trace::restored(&tracing::Span::current(), &saved.properties, saved.depth);
        let blocked = saved.replay_blocked.clone();
        let rows = ledger.rows(run_id).await.map_err(state_error)?;
        // The checkpoint holds the budget as its turn began. The turn's
        // model-issued calls spend again as they are admitted again, but the
        // nested calls of a parent answered from its row are not made again:
        // each nested row is a slot the run spent (issue 13: without this a
        // recovered run could spend its budget a second time). A deferred
        // row waits for a person and holds no slot.
        let count = |nested: bool| {
            let n = rows
                .iter()
                .filter(|row| row.call_id.is_nested() == nested)
                .filter(|row| row.status != CallStatus::Deferred)
                .count();
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        let (model_rows, nested_rows) = (count(false), count(true));
        let mut options = options;
        let decided = std::mem::take(&mut options.decisions);
        let (ctx, mut state) = self.restore(saved, options);
        ctx.tracker().charge_at_least(0, nested_rows);
        // Calls issued after a checkpoint that was lost keep their rows; new
        // calls number on after every id the ledger has seen, so a different
        // call never reuses one.
        let highest = rows
            .iter()
            .filter(|row| !row.call_id.is_nested())
            .filter_map(|row| row.call_id.as_str().strip_prefix('p')?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        state.calls_issued = state.calls_issued.max(highest);
        let open_calls = match state.messages.last() {
            Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty() => {
                Some(tool_calls.clone())
            }
            _ => None,
        };
        let mut run = self.open(ctx, state, events);
        run.decided = Some(decided);
        *events = run.sink().clone();
        // The checkpoint holds the state a resume of this turn is checked
        // against: save it again with the ids numbered on.
        run.checkpoint(&blocked).await;
        let Some(calls) = open_calls else {
            run.settle_left_in_doubt().await;
            return run.drive().await;
        };
        let slots = calls.into_iter().map(Slot::Issued).collect();
        let end = run.run_calls(slots, None, &blocked, &[]).await?;
        // A call answered from its row, a reconciliation or a blocked replay
        // spent its slot before the crash, whether or not it was admitted
        // again.
        run.ctx.tracker().charge_at_least(model_rows, nested_rows);
        // Every call the checkpointed turn meets again has been answered;
        // what is still in doubt nothing will run again.
        run.settle_left_in_doubt().await;
        run.continue_after(end).await
    }

    /// A finished run is not recovered (its model would be asked again in a
    /// run that may start no call); the error names its calls in doubt.
    async fn refuse_finished(
        &self,
        ledger: &dyn EffectLedger,
        run_id: &RunId,
    ) -> Result<(), TinyAgentsError> {
        let state = guarded("run_state", ledger.run_state(run_id))
            .await
            .map_err(state_error)?;
        if state != RunState::Finished {
            return Ok(());
        }
        let in_doubt = guarded("unresolved", ledger.unresolved(run_id))
            .await
            .map_err(state_error)?;
        if in_doubt.is_empty() {
            return Err(TinyAgentsError::State(format!(
                "run {run_id} has finished: there is nothing to recover"
            )));
        }
        let calls: Vec<String> = in_doubt
            .iter()
            .map(|row| format!("{} ({}, {})", row.call_id, row.tool_name, row.status))
            .collect();
        Err(TinyAgentsError::State(format!(
            "run {run_id} has finished, so there is nothing to recover; {} of its calls are in doubt: {}; ask their tools with AgentHarness::reconcile, or record what a person found with EffectLedger::resolve",
            calls.len(),
            calls.join(", ")
        )))
    }

    /// The context and state of a suspended or checkpointed run.
    pub(crate) fn restore(
        &self,
        saved: SuspendedRun,
        options: ResumeOptions,
    ) -> (RunContext, State) {
        let limits = self.limits.clone();
        let tracker = Arc::new(LimitTracker::restore(&limits, saved.budget));
        // What it had spent, it and the runs it delegated to, is where the
        // tree goes on from: counted once, never forgotten.
        let (run_id, agent, caps) = (
            saved.run_id.clone(),
            self.calls.agent_id.clone(),
            SpendCaps::of(&limits),
        );
        let spend = match &options.spend {
            Some(parent) => parent.child_resumed(run_id, agent, caps, saved.budget.spent()),
            None => Spend::root(
                run_id,
                agent,
                caps,
                saved.budget.spent(),
                self.pricing.prices.clone(),
            ),
        };
        let mut ctx = RunContext::with_budget(saved.run_id, limits, tracker, spend);
        if let Some(token) = options.cancel {
            ctx = ctx.with_cancellation(token);
        }
        ctx.resume_clock(Duration::from_millis(saved.active_ms));
        ctx.agent_id = self.calls.agent_id.clone();
        ctx.depth = saved.depth;
        ctx.capture = self.capture;
        ctx.properties = Arc::new(saved.properties);
        ctx.extensions.insert(Arc::clone(&self.calls.tools));
        (ctx, saved.state)
    }
}
