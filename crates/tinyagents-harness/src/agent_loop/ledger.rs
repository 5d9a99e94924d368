//! The effect ledger in the loop: a run's claim, a started row before a
//! call runs (durable before the tool may act), a settled row after, and
//! the run's finished mark. Checkpoints are in `checkpoint.rs`, recovery in
//! `recover.rs`, calls in doubt in `reconcile.rs`.

use crate::mutation::{Mutation, planted};
use futures_util::future::join_all;
use tinyagents_core::{
    AgentEvent, CallId, RunContext, RunId, TinyAgentsError, ToolCall, ToolReplay, ToolResult,
    args_hash,
};
use tinyagents_ledger::{LedgerError, LedgerFailure, Outcome, StartedRow};
use tinytools::RegisteredTool;

use super::Run;
use super::turn::Slot;
use crate::call::ToolEvents;
use crate::harness::AgentHarness;

/// How the ledger answered a call's start.
pub(crate) enum Start {
    /// Run it.
    Run,
    /// It settled before: answer with its recorded result.
    Recorded(ToolResult),
    /// Do not run it; the text says why.
    Refused(String),
}

impl<'h> Run<'h> {
    /// Writes the started rows of a turn's admitted calls, all at once so a
    /// durable backend commits them together. Model-issued calls are hashed
    /// as persisted (redacted), so a recovery's copy matches its row.
    pub(crate) async fn start_rows(&self, slots: &mut [Slot<'h>]) {
        let harness = self.harness;
        if harness.ledger.is_none() {
            return;
        }
        let redaction = self.events.redaction();
        for slot in slots.iter_mut() {
            if let Slot::Run {
                call,
                args_hash: hash,
                ..
            } = slot
            {
                *hash = Some(args_hash(&redaction.copy(&call.arguments)));
            }
        }
        let starts = join_all(slots.iter().map(|slot| async move {
            match slot {
                Slot::Run {
                    call,
                    entry,
                    args_hash,
                    ..
                } => {
                    let hash = args_hash.clone().unwrap_or_default();
                    let replay = if self.approved_once.contains(&call.id) {
                        ToolReplay::Never
                    } else {
                        entry.spec().replay
                    };
                    let start = harness
                        .start_row(&self.ctx, &self.events, call, entry, hash, replay)
                        .await;
                    Some(start)
                }
                _ => None,
            }
        }))
        .await;
        for (slot, start) in slots.iter_mut().zip(starts) {
            let (Some(start), Slot::Run { call, .. }) = (start, &*slot) else {
                continue;
            };
            let call = call.clone();
            *slot = match start {
                Start::Run => continue,
                Start::Recorded(result) => Slot::Recorded { call, result },
                Start::Refused(text) => {
                    let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
                    self.refused_slot(call, &refusal).await
                }
            };
        }
    }
}

impl Run<'_> {
    /// The recorded result of `call` when the ledger holds a settled row of
    /// the same call (tool and prepared arguments).
    pub(crate) async fn settled_answer(&self, call: &ToolCall) -> Option<ToolResult> {
        let ledger = self.harness.ledger.as_ref()?;
        let row = guarded("get", ledger.get(&self.ctx.run_id, &call.id))
            .await
            .ok()??;
        let hash = args_hash(&self.events.redaction().copy(&call.arguments));
        (row.status.is_settled() && row.tool_name == call.name && row.args_hash == hash)
            .then(|| row.result.map(|stored| stored.to_tool_result()))
            .flatten()
    }
}

impl Run<'_> {
    /// In a recovery, the decision a call that would wait for a person
    /// already has: an approval, when its started row (same tool and
    /// arguments, in doubt) shows it was admitted before the crash, so its
    /// admission goes on to its tool's reconciliation and is not asked
    /// again; else the decision a person made before the crash
    /// (`ResumeOptions::decisions`) on this call of this run.
    pub(crate) async fn earlier_decision(
        &self,
        pending: &crate::run::PendingCall,
    ) -> Option<crate::run::ApprovalDecision> {
        let decided = self.decided.as_ref()?;
        let call = &pending.call;
        if let Some(ledger) = &self.harness.ledger
            && let Ok(Some(row)) = guarded("get", ledger.get(&self.ctx.run_id, &call.id)).await
            && row.is_in_doubt()
            && row.tool_name == call.name
            && row.args_hash == args_hash(&self.events.redaction().copy(&call.arguments))
        {
            return Some(pending.approve());
        }
        decided
            .iter()
            .find(|d| d.run_id == self.ctx.run_id && d.call_id == call.id)
            .cloned()
    }
}

impl AgentHarness {
    /// Claims a new run's id in the ledger: an id the ledger already holds
    /// (another run's, finished or not) is refused, so a new run is never
    /// answered from an old run's rows. A ledger that cannot answer refuses
    /// the run under `LedgerFailure::Abort`.
    pub(crate) async fn claim_run(&self, run_id: &RunId) -> Result<(), TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        match guarded("begin_run", ledger.begin_run(run_id)).await {
            Ok(()) => Ok(()),
            Err(exists @ LedgerError::RunExists { .. }) => Err(TinyAgentsError::Ledger {
                source: exists.into(),
            }),
            Err(failure) => match self.ledger_failure {
                LedgerFailure::Abort => Err(TinyAgentsError::LedgerClaim {
                    run: run_id.clone(),
                    source: failure.into(),
                }),
                LedgerFailure::Continue => Ok(()),
            },
        }
    }

    /// Writes one call's started row and interprets the ledger's answer.
    pub(crate) async fn start_row(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call: &ToolCall,
        entry: &RegisteredTool,
        hash: String,
        replay: ToolReplay,
    ) -> Start {
        let Some(ledger) = &self.ledger else {
            return Start::Run;
        };
        let row = StartedRow::new(
            ctx.run_id.clone(),
            call.id.clone(),
            call.name.clone(),
            hash.clone(),
            replay,
        );
        let error = match guarded("record_started", ledger.record_started(row)).await {
            Ok(()) => return Start::Run,
            Err(error) => error,
        };
        match error {
            // A settled call is answered from its row, also in a run that
            // has since finished; only the same call (tool and arguments)
            // is, whatever the backend answered.
            settled @ (LedgerError::AlreadySettled { .. } | LedgerError::RunFinished { .. }) => {
                match guarded("get", ledger.get(&ctx.run_id, &call.id)).await {
                    Ok(Some(row))
                        if row.status.is_settled()
                            && row.tool_name == call.name
                            && row.args_hash == hash =>
                    {
                        match row.result {
                            Some(stored) => Start::Recorded(stored.to_tool_result()),
                            None => Start::Refused(format!("refused: {settled}")),
                        }
                    }
                    Ok(Some(row)) if row.tool_name != call.name || row.args_hash != hash => {
                        Start::Refused(format!(
                            "refused: call {} of run {} was recorded for another call (tool '{}'), so it was not run",
                            call.id, ctx.run_id, row.tool_name
                        ))
                    }
                    Ok(_) => Start::Refused(format!("refused: {settled}")),
                    Err(read) => Start::Refused(format!(
                        "refused: {settled}; its recorded result could not be read: {read}"
                    )),
                }
            }
            LedgerError::ReplayRefused { .. } if planted(Mutation::ReplayNever) => Start::Run,
            refused @ LedgerError::ReplayRefused { .. } => {
                Box::pin(self.reconcile_in_doubt(ctx, events, call, entry, &hash, refused)).await
            }
            mismatch @ LedgerError::Mismatch { .. } => {
                Start::Refused(format!("refused: {mismatch}"))
            }
            failure => match self.ledger_failure {
                LedgerFailure::Abort => Start::Refused(format!(
                    "refused: the effect ledger could not record the call, so it was not run: {failure}"
                )),
                LedgerFailure::Continue => {
                    events
                        .sink()
                        .emit(|| AgentEvent::Warning {
                            message: format!(
                                "call {} runs without a started row (LedgerFailure::Continue): {failure}",
                                call.id
                            ),
                        })
                        .await;
                    Start::Run
                }
            },
        }
    }

    /// Writes a call's settled row. A failure cannot undo the call: it is
    /// reported as a warning, and recovery will see the call as in doubt.
    pub(crate) async fn settle_row(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call_id: &CallId,
        outcome: Outcome,
    ) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        if let Err(error) = guarded(
            "record_settled",
            ledger.record_settled(&ctx.run_id, call_id, &outcome),
        )
        .await
        {
            events
                .sink()
                .emit(|| AgentEvent::Warning {
                    message: format!("the settled row of call {call_id} was not written: {error}"),
                })
                .await;
        }
    }
}

impl AgentHarness {
    /// Makes a settled row durable now (`ToolSpec::durable_settle`): one
    /// commit, so a crash after the call returned does not leave it in
    /// doubt. A failure is a warning: the row may still be lost, and the
    /// call be in doubt after a crash.
    pub(crate) async fn flush_row(&self, events: &ToolEvents, call_id: &CallId) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        if let Err(error) = guarded("flush", ledger.flush()).await {
            events
                .sink()
                .emit(|| AgentEvent::Warning {
                    message: format!(
                        "the settled row of call {call_id} was not made durable: {error}"
                    ),
                })
                .await;
        }
    }
}

impl<'h> Run<'h> {
    /// Marks a run finished in the ledger, so retention may prune it.
    pub(crate) async fn finish_in_ledger(&self) {
        let Some(ledger) = &self.harness.ledger else {
            return;
        };
        let run_id = &self.ctx.run_id;
        let finished = match guarded("mark_run_finished", ledger.mark_run_finished(run_id)).await {
            // Settled rows ride on commits; make the run's last ones durable.
            Ok(()) => guarded("flush", ledger.flush()).await,
            Err(error) => Err(error),
        };
        if let Err(error) = finished {
            self.sink()
                .emit(|| AgentEvent::Warning {
                    message: format!("run {run_id} not marked finished: {error}"),
                })
                .await;
        }
    }

    /// Makes every ledger write of the run so far durable (a suspension's
    /// checkpoint); a failure is a warning.
    pub(crate) async fn flush_ledger(&self) {
        let Some(ledger) = &self.harness.ledger else {
            return;
        };
        if let Err(error) = guarded("flush", ledger.flush()).await {
            self.sink()
                .emit(|| AgentEvent::Warning {
                    message: format!("the effect ledger could not be flushed: {error}"),
                })
                .await;
        }
    }
}

/// A ledger failure as the error of a harness operation.
pub(crate) fn state_error(error: LedgerError) -> TinyAgentsError {
    TinyAgentsError::Ledger {
        source: error.into(),
    }
}

/// Awaits a ledger operation, containing a panic in the backend (host code,
/// for a custom ledger) as a storage failure, which every caller treats
/// fail-closed.
pub(crate) async fn guarded<T>(
    operation: &'static str,
    write: impl std::future::Future<Output = Result<T, LedgerError>>,
) -> Result<T, LedgerError> {
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(write).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(LedgerError::Storage {
            operation,
            detail: format!(
                "the ledger panicked: {}",
                crate::call::panic_text(panic.as_ref())
            ),
            source: None,
        }),
    }
}
