//! How a claimed run goes on: started, resumed with its decisions, or
//! recovered from its ledger, as its claim and its effect ledger say. The
//! command line and the workers ask this one function, so a run goes on
//! the same way whoever takes it.

use tinyagents_core::RunId;
use tinyagents_harness::{ApprovalDecision, RunRequest, SuspendedRun};
use tinyagents_ledger::{EffectLedger, LedgerResult, RunState};

use crate::record::Claim;

/// How a claimed run goes on ([`next_segment`]).
#[derive(Debug, Clone)]
pub enum NextSegment {
    /// Start it afresh: the ledger holds nothing of it but, at most, the
    /// claim of a holder that died before anything was recorded (run it
    /// over a ledger that lets that claim through: [`HeldLedger`](crate::HeldLedger)).
    Start(RunRequest),
    /// Resume the state its waiting calls were all decided on, with the
    /// decisions.
    Resume {
        /// The state.
        state: Box<SuspendedRun>,
        /// The decisions, one per waiting call.
        decisions: Vec<ApprovalDecision>,
    },
    /// Recover it from its last checkpoint: a holder died (or gave it
    /// back) part way. The decisions of its last suspension go with it
    /// (`ResumeOptions::decisions`), so a resume cut short asks nobody
    /// again and uses each approval at most once.
    Recover {
        /// The last suspension's decisions.
        decisions: Vec<ApprovalDecision>,
    },
    /// The ledger has the run finished: there is nothing to run (its
    /// holder died after the ledger's mark and before the store's).
    Finished,
}

impl NextSegment {
    /// Its name, as the history and the command line say it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Start(_) => "start",
            Self::Resume { .. } => "resume",
            Self::Recover { .. } => "recover",
            Self::Finished => "finished",
        }
    }
}

/// How the run `claim` took goes on, as its ledger says.
pub async fn next_segment(claim: &Claim, ledger: &dyn EffectLedger) -> LedgerResult<NextSegment> {
    let record = &claim.record;
    if let Some(state) = &claim.resume {
        return Ok(NextSegment::Resume {
            state: Box::new(state.clone()),
            decisions: claim.decisions.clone(),
        });
    }
    let request = || record.request.to_request(record.run_id.clone());
    Ok(match ledger.run_state(&record.run_id).await? {
        RunState::Unknown => NextSegment::Start(request()),
        RunState::Finished => NextSegment::Finished,
        RunState::Open if is_bare_claim(ledger, &record.run_id).await? => {
            NextSegment::Start(request())
        }
        RunState::Open => NextSegment::Recover {
            decisions: claim.decisions.clone(),
        },
    })
}

/// Whether the ledger holds nothing of `run` but its claim: no row, no
/// checkpoint (its holder died in its first model call).
pub async fn is_bare_claim(ledger: &dyn EffectLedger, run: &RunId) -> LedgerResult<bool> {
    Ok(ledger.run_state(run).await? == RunState::Open
        && ledger.rows(run).await?.is_empty()
        && ledger.load_checkpoint(run).await?.is_none())
}
