//! One claimed run, from its harness to its recorded end: started,
//! resumed or recovered as its claim and its ledger say (`next_segment`,
//! the same answer the command line gets), over the run's fenced ledger,
//! its end recorded in the run store under the claim's epoch, then the
//! ledger's finished mark. Its events are journaled in the run store under
//! the claim's epoch (`drive_journaled`), for a console to draw.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;

use tinyagents_core::CancellationToken;
use tinyagents_harness::{AgentHarness, ResumeOptions};
use tinyagents_ledger::SharedLedger;
use tinyagents_runs::{
    Claim, Ending, Journal, NextSegment, RunStore as _, SharedRunStore, drive_journaled,
    next_segment,
};

use super::ledger::RunLedger;
use super::{LeasedRun, Shared};
use crate::PostgresRunStore;

/// Runs one claimed run to its end, and records the end if the claim still
/// holds; then the ledger's finished mark of the run, if it asked for one.
pub(super) async fn execute(shared: Arc<Shared>, claim: Claim, token: CancellationToken) {
    let run_id = claim.record.run_id.clone();
    let ledger = Arc::new(RunLedger::new(
        shared.ledger.fenced(run_id.clone(), claim.epoch),
        run_id.clone(),
        token.clone(),
    ));
    let leased = LeasedRun {
        run_id: run_id.clone(),
        agent: claim.record.agent.clone(),
        epoch: claim.epoch,
        attempt: u32::try_from(claim.epoch).unwrap_or(u32::MAX),
        ledger: Arc::clone(&ledger) as SharedLedger,
    };
    // Host code may panic: the factory, or anything the harness does not
    // contain. The run then fails with that said, instead of its task
    // dying with the run left held.
    let built = std::panic::catch_unwind(AssertUnwindSafe(|| shared.factory.build(&leased)));
    let ending = match built {
        Ok(Ok(agent)) => {
            let driven = drive(agent.harness(), &claim, &ledger, &shared.store, &token);
            AssertUnwindSafe(driven)
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Ending::Failed {
                    error: format!("the run panicked: {}", panic_text(panic.as_ref())),
                })
        }
        Ok(Err(err)) => Ending::Failed {
            error: format!("the agent factory failed: {err}"),
        },
        Err(panic) => Ending::Failed {
            error: format!("the agent factory panicked: {}", panic_text(panic.as_ref())),
        },
    };
    let recorded = shared.store.end(&run_id, claim.epoch, &ending).await;
    shared.held.lock().remove(&run_id);
    // The verdicts of the run's last settles (a refusal of the fence).
    ledger.finish_background().await;
    let recorded = match recorded {
        // The store has the end: now the ledger may close the run (a
        // failure here leaves it open in the ledger for the startup sweep).
        Ok(true) => {
            if let Err(err) = ledger.finish_now().await {
                tracing::warn!(run = %run_id, error = %err, "the ledger did not mark the run finished");
            }
            Ok(true)
        }
        other => other,
    };
    let mut report = shared.report.lock();
    report.fenced_writes += ledger.fenced_writes();
    match recorded {
        Ok(true) => match ending {
            Ending::Ended { .. } => report.completed += 1,
            Ending::Failed { .. } => report.failed += 1,
            Ending::Suspended { .. } => report.awaiting_approval += 1,
            Ending::Released => report.released += 1,
        },
        Ok(false) => report.lost += 1,
        Err(err) => {
            // The lease expires and another worker recovers the run.
            tracing::warn!(run = %run_id, error = %err, "the run's end was not recorded");
            report.lost += 1;
        }
    }
}

/// Starts, resumes or recovers the run as its claim and its ledger say
/// (`next_segment`), and waits for it, its events journaled in `store`
/// under the claim's epoch.
async fn drive(
    harness: &AgentHarness,
    claim: &Claim,
    ledger: &RunLedger,
    store: &PostgresRunStore,
    token: &CancellationToken,
) -> Ending {
    let run_id = &claim.record.run_id;
    let options = |decisions| ResumeOptions {
        cancel: Some(token.clone()),
        decisions,
        ..ResumeOptions::default()
    };
    let next = match next_segment(claim, ledger).await {
        Ok(next) => next,
        Err(err) => {
            return Ending::Failed {
                error: format!("the ledger could not be read: {err}"),
            };
        }
    };
    let mut journal = Journal::new(
        Arc::new(store.clone()) as SharedRunStore,
        run_id.clone(),
        claim.epoch,
    );
    // The journal is a view: a write that fails is said, and the run goes on.
    let unwritten = |error: &tinyagents_runs::RunStoreError| {
        tracing::warn!(run = %run_id, error = %error, "the run's journal was not written");
    };
    let result = match next {
        NextSegment::Start(request) => {
            let mut handle = harness.start(request.with_cancellation(token.clone()));
            drive_journaled(&mut handle, &mut journal, unwritten).await
        }
        NextSegment::Resume { state, decisions } => {
            let mut handle = harness.start_resume(*state, &decisions, options(Vec::new()));
            drive_journaled(&mut handle, &mut journal, unwritten).await
        }
        NextSegment::Recover { decisions } => {
            let mut handle = harness.start_recover(run_id, options(decisions));
            drive_journaled(&mut handle, &mut journal, unwritten).await
        }
        NextSegment::Finished => {
            return Ending::Failed {
                error: "the run is finished in the effect ledger but its end was never \
                        recorded; its calls are in the ledger"
                    .to_owned(),
            };
        }
    };
    match result {
        Ok(done) => Ending::of(&done),
        Err(err) => Ending::Failed {
            error: err.to_string(),
        },
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
