//! The effect ledger in the loop: a started row before a call runs (durable
//! before the tool may act), a settled row after, a checkpoint per turn, and
//! recovery of a run whose process died.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tinyagents_core::{
    AgentEvent, CallId, LimitTracker, Message, RunContext, RunId, State, TinyAgentsError, ToolCall,
    ToolResult, args_hash,
};
use tinyagents_ledger::{LedgerError, LedgerFailure, Outcome, StartedRow};
use tinytools::ToolSpec;

use super::Run;
use super::turn::Slot;
use crate::ResumeOptions;
use crate::call::ToolEvents;
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{AgentRun, SuspendedRun};

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
                    let start = harness
                        .start_row(&self.ctx, &self.events, call, entry.spec(), hash)
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
            Err(exists @ LedgerError::RunExists { .. }) => {
                Err(TinyAgentsError::State(exists.to_string()))
            }
            Err(failure) => match self.ledger_failure {
                LedgerFailure::Abort => Err(TinyAgentsError::State(format!(
                    "the effect ledger could not claim run {run_id}, so it was not started: {failure}"
                ))),
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
        spec: &ToolSpec,
        hash: String,
    ) -> Start {
        let Some(ledger) = &self.ledger else {
            return Start::Run;
        };
        let row = StartedRow::new(
            ctx.run_id.clone(),
            call.id.clone(),
            call.name.clone(),
            hash.clone(),
            spec.replay,
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
            refused @ LedgerError::ReplayRefused { .. } => {
                let text = format!("interrupted, outcome unknown: {refused}");
                self.settle_row(ctx, events, &call.id, Outcome::Interrupted(text.clone()))
                    .await;
                Start::Refused(text)
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

    /// A recovered call whose arguments held a redacted secret: it cannot run
    /// again. A settled one is answered from its row.
    pub(crate) async fn blocked_replay(&self, call: ToolCall) -> Slot<'h> {
        let harness = self.harness;
        if let Some(ledger) = &harness.ledger
            && let Ok(Some(row)) = guarded("get", ledger.get(&self.ctx.run_id, &call.id)).await
        {
            if let Some(stored) = row.result {
                return Slot::Recorded {
                    call,
                    result: stored.to_tool_result(),
                };
            }
            let text = format!(
                "interrupted, outcome unknown: call {} started before the crash and its arguments held redacted secrets, so it cannot be replayed",
                call.id
            );
            harness
                .settle_row(
                    &self.ctx,
                    &self.events,
                    &call.id,
                    Outcome::Interrupted(text.clone()),
                )
                .await;
            let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
            return self.refused_slot(call, &refusal).await;
        }
        let text = format!(
            "refused: call {} cannot be replayed after a crash: its arguments held secrets that were never persisted",
            call.id
        );
        let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
        self.refused_slot(call, &refusal).await
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
        // Once the run is open, its failure is reported on its bounded sink.
        let mut events = events.clone();
        let result = self.recover_run(run_id, options, &mut events).await;
        super::report_failure(&events, result).await
    }

    async fn recover_run(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
        events: &mut EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Err(TinyAgentsError::Config(
                "recover needs an effect ledger".to_owned(),
            ));
        };
        let saved = self
            .load_saved(ledger.as_ref(), run_id)
            .await?
            .ok_or_else(|| {
                TinyAgentsError::State(format!("run {run_id} has no checkpoint to recover from"))
            })?;
        let blocked = saved.replay_blocked.clone();
        let (ctx, mut state) = self.restore(saved, options);
        // Calls issued after a checkpoint that was lost keep their rows; new
        // calls number on after every id the ledger has seen, so a different
        // call never reuses one.
        let rows = ledger
            .rows(run_id)
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?;
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
        *events = run.sink().clone();
        // The checkpoint holds the state a resume of this turn is checked
        // against: save it again with the ids numbered on.
        run.checkpoint(&blocked).await;
        let Some(calls) = open_calls else {
            return run.drive().await;
        };
        let end = run.run_calls(calls, None, &blocked, &[]).await?;
        run.continue_after(end).await
    }

    /// The context and state of a suspended or checkpointed run.
    pub(crate) fn restore(
        &self,
        saved: SuspendedRun,
        options: ResumeOptions,
    ) -> (RunContext, State) {
        let limits = self.limits.clone();
        let tracker = Arc::new(LimitTracker::restore(&limits, saved.budget));
        let mut ctx = RunContext::with_tracker(saved.run_id, limits, tracker);
        if let Some(token) = options.cancel {
            ctx = ctx.with_cancellation(token);
        }
        ctx.resume_clock(Duration::from_millis(saved.active_ms));
        ctx.agent_id = self.agent_id.clone();
        ctx.depth = saved.depth;
        ctx.capture = self.capture;
        ctx.properties = Arc::new(saved.properties);
        ctx.extensions.insert(Arc::clone(&self.tools));
        (ctx, saved.state)
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
        }),
    }
}
