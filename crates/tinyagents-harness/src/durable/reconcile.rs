//! Reconciliation after the fact: a finished run's calls in doubt put to
//! their tools, and a delegated run abandoned by its caller's recovery.

use tinyagents_core::{CancellationToken, RunId, Spent, TinyAgentsError};
#[cfg(doc)]
use tinyagents_ledger::EffectLedger;
use tinyagents_ledger::RunState;

use crate::call::{Reconciliation, Redaction, Sweep, guarded, state_error};
use crate::harness::AgentHarness;

impl AgentHarness {
    /// Asks the tools of a finished run's calls whose effect is unknown
    /// whether it happened, and records what they found on each row (a
    /// call that never happened stays unrun: the run is over). Use it for
    /// runs that [`EffectLedger::unfinished_runs`] lists and whose
    /// [`EffectLedger::run_state`] is finished, for example after a
    /// reconciliation at recovery could not reach its service. A run that
    /// is not finished is refused: recover it (recovery reconciles its
    /// calls). Returns what became of each call asked, in start order.
    pub async fn reconcile(&self, run_id: &RunId) -> Result<Vec<Reconciliation>, TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
            return Err(TinyAgentsError::Config(
                "reconcile needs an effect ledger".to_owned(),
            ));
        };
        let state = guarded("run_state", ledger.run_state(run_id))
            .await
            .map_err(state_error)?;
        if state != RunState::Finished {
            return Err(TinyAgentsError::State(format!(
                "run {run_id} is not finished: recover it instead (recovery asks the tools of its calls in doubt)"
            )));
        }
        let redaction = Redaction::new(self.calls.middlewares.clone());
        self.calls
            .settle_orphans(
                run_id,
                Sweep::Finished,
                &redaction,
                &CancellationToken::new(),
            )
            .await
            .map_err(state_error)
    }

    /// What `run_id` had spent, it and the runs under it, as its last
    /// checkpoint holds it; `None` for a run without one (or a harness
    /// without a ledger). A delegating tool reads it to carry what an
    /// abandoned child spent into its caller's tree.
    pub async fn checkpointed_spend(
        &self,
        run_id: &RunId,
    ) -> Result<Option<Spent>, TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
            return Ok(None);
        };
        Ok(self
            .load_saved(ledger.as_ref(), run_id)
            .await?
            .map(|saved| saved.budget.spent()))
    }

    /// Ends a run that will never be continued, such as a delegated run
    /// whose caller was interrupted by a crash: marks it finished in the
    /// ledger (no call of it starts again), then asks its tools about its
    /// calls in doubt and records what they find, as
    /// [`reconcile`](Self::reconcile) does. A run the ledger does not know
    /// is left alone, and so is every run of a harness without a ledger
    /// (nothing of it was recorded). Call it only when nothing runs it any
    /// more.
    pub async fn abandon(&self, run_id: &RunId) -> Result<Vec<Reconciliation>, TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
            return Ok(Vec::new());
        };
        let state = guarded("run_state", ledger.run_state(run_id))
            .await
            .map_err(state_error)?;
        if state == RunState::Unknown {
            return Ok(Vec::new());
        }
        guarded("mark_run_finished", ledger.mark_run_finished(run_id))
            .await
            .map_err(state_error)?;
        self.reconcile(run_id).await
    }
}
