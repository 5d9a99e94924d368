//! One claimed run, from its harness to its recorded end: started,
//! resumed or recovered as its claim says, over the run's fenced ledger,
//! its end recorded in the queue under the claim's epoch, then the
//! ledger's finished mark.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use tinyagents_core::{CancellationToken, RunStatus};
use tinyagents_harness::{AgentHarness, AgentRun, ResumeOptions, SuspendedRun};
use tinyagents_ledger::{EffectLedger, RunState, SharedLedger};

use super::ledger::RunLedger;
use super::{LeasedRun, Shared};
use crate::queue::RunOutcome;
use crate::queue::claim::{self, Claimed, Ending};

/// Runs one claimed run to its end, and records the end if the claim still
/// holds; then the ledger's finished mark of the run, if it asked for one.
pub(super) async fn execute(shared: Arc<Shared>, run: Claimed, token: CancellationToken) {
    let ledger = Arc::new(RunLedger::new(
        shared.ledger.fenced(run.run_id.clone(), run.epoch),
        run.run_id.clone(),
        token.clone(),
    ));
    let leased = LeasedRun {
        run_id: run.run_id.clone(),
        epoch: run.epoch,
        attempt: run.attempts,
        ledger: Arc::clone(&ledger) as SharedLedger,
    };
    // Host code may panic: the factory, or anything the harness does not
    // contain. The run then fails with that said, instead of its task
    // dying with the run left held.
    let built = std::panic::catch_unwind(AssertUnwindSafe(|| shared.factory.build(&leased)));
    let ending = match built {
        Ok(Ok(harness)) => AssertUnwindSafe(drive(&harness, &run, &ledger, &token))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                Ending::Failed(format!("the run panicked: {}", panic_text(panic.as_ref())))
            }),
        Ok(Err(err)) => Ending::Failed(format!("the agent factory failed: {err}")),
        Err(panic) => Ending::Failed(format!(
            "the agent factory panicked: {}",
            panic_text(panic.as_ref())
        )),
    };
    let recorded = claim::end(&shared.db, &run.run_id, run.epoch, &ending).await;
    shared.held.lock().remove(&run.run_id);
    // The verdicts of the run's last settles (a refusal of the fence).
    ledger.finish_background().await;
    let recorded = match recorded {
        // The queue has the end: now the ledger may close the run (a
        // failure here leaves it open in the ledger for the startup sweep).
        Ok(true) => match ledger.finish_now().await {
            Ok(()) => Ok(true),
            Err(err) => {
                tracing::warn!(run = %run.run_id, error = %err, "the ledger did not mark the run finished");
                Ok(true)
            }
        },
        other => other,
    };
    let mut report = shared.report.lock();
    report.fenced_writes += ledger.fenced_writes();
    match recorded {
        Ok(true) => match ending {
            Ending::Completed(_) => report.completed += 1,
            Ending::Failed(_) => report.failed += 1,
            Ending::AwaitingApproval(_) => report.awaiting_approval += 1,
            Ending::Released => report.released += 1,
        },
        Ok(false) => report.lost += 1,
        Err(err) => {
            // The lease expires and another worker recovers the run.
            tracing::warn!(run = %run.run_id, error = %err, "the run's end was not recorded");
            report.lost += 1;
        }
    }
}

/// Starts, resumes or recovers the run as its claim says, and waits for it:
/// decisions on a suspended state resume it (or recover it, when a resume
/// before got past its waiting calls); a first claim, or a claim
/// whose earlier owner left nothing in the ledger but a bare claim, starts
/// it; any other later claim recovers it from its checkpoint.
async fn drive(
    harness: &AgentHarness,
    run: &Claimed,
    ledger: &RunLedger,
    token: &CancellationToken,
) -> Ending {
    let options = || ResumeOptions {
        cancel: Some(token.clone()),
        ..ResumeOptions::default()
    };
    let start = || {
        let request = run
            .request
            .to_request(run.run_id.clone())
            .with_cancellation(token.clone());
        harness.start(request)
    };
    let result = match (&run.suspended, &run.decisions) {
        // A worker that resumed it before died after the waiting calls
        // settled: the resume went on past them, and its checkpoint is
        // where the run goes on from.
        (Some(suspended), Some(_)) if resumed_before(ledger, suspended).await => {
            harness.start_recover(&run.run_id, options()).wait().await
        }
        (Some(suspended), Some(decisions)) => {
            harness
                .start_resume(suspended.clone(), decisions, options())
                .wait()
                .await
        }
        _ if run.attempts <= 1 => start().wait().await,
        _ => match ledger.run_state(&run.run_id).await {
            // The worker before stopped before the ledger saw the run.
            Ok(RunState::Unknown) => start().wait().await,
            Ok(RunState::Open) => match ledger.is_bare_claim().await {
                Ok(true) => start().wait().await,
                Ok(false) => harness.start_recover(&run.run_id, options()).wait().await,
                Err(err) => return Ending::Failed(format!("the ledger could not be read: {err}")),
            },
            Ok(RunState::Finished) => {
                return Ending::Failed(
                    "the run is finished in the effect ledger but not in the queue; its calls \
                     are in the ledger"
                        .to_owned(),
                );
            }
            Err(err) => return Ending::Failed(format!("the ledger could not be read: {err}")),
        },
    };
    match result {
        Ok(done) => ending_of(done),
        Err(err) => Ending::Failed(err.to_string()),
    }
}

/// Whether a waiting call of `suspended` has settled in the ledger: an
/// earlier resume of this state got past it (a state resumes once).
async fn resumed_before(ledger: &RunLedger, suspended: &SuspendedRun) -> bool {
    for pending in suspended.pending() {
        if let Ok(Some(row)) = ledger.get(&suspended.run_id, &pending.call.id).await
            && row.status.is_settled()
        {
            return true;
        }
    }
    false
}

fn ending_of(run: AgentRun) -> Ending {
    match run.status {
        RunStatus::AwaitingApproval => match run.suspended {
            Some(state) => Ending::AwaitingApproval(Box::new(state)),
            None => Ending::Failed("the run awaits approval without a suspended state".into()),
        },
        RunStatus::Completed | RunStatus::Terminated => Ending::Completed(RunOutcome {
            final_text: run.final_text,
            status: status_text(run.status),
            total_tokens: run.usage.total(),
        }),
        other => Ending::Failed(format!("the run ended {}", status_text(other))),
    }
}

fn status_text(status: RunStatus) -> String {
    match status {
        RunStatus::Completed => "completed".into(),
        RunStatus::Terminated => "terminated".into(),
        RunStatus::Cancelled => "cancelled".into(),
        RunStatus::AwaitingApproval => "awaiting approval".into(),
        RunStatus::LimitReached(kind) => format!("at its {kind:?} limit"),
    }
}

/// What a panic said, when it said it as text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
