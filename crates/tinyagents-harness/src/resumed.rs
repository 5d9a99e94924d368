//! The one piece of process state a harness keeps: without an effect
//! ledger, which waiting calls a resume has decided, so that a suspended
//! state resumes once for the harness's lifetime (with a ledger, the
//! ledger's rows are that record, across processes).

use std::collections::HashSet;

use parking_lot::Mutex;
use tinyagents_core::{CallId, RunId, TinyAgentsError};

use crate::run::SuspendedRun;

/// The waiting calls resumes without a ledger decided, by run.
#[derive(Debug, Default)]
pub(crate) struct Resumed(Mutex<HashSet<(RunId, CallId)>>);

impl Resumed {
    /// Claims `suspended`'s waiting calls for this resume; refused when one
    /// was decided by an earlier resume.
    pub(crate) fn claim(&self, suspended: &SuspendedRun) -> Result<(), TinyAgentsError> {
        let run = &suspended.run_id;
        let mut used = self.0.lock();
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

    /// Gives back `call`'s claim: it asked for a person again while it ran
    /// and did not act, so the approval it ran under was not used.
    pub(crate) fn release(&self, run: &RunId, call: &CallId) {
        self.0.lock().remove(&(run.clone(), call.clone()));
    }
}
