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

use super::execute::CallOutcome;
use super::{RunAcc, Slot};
use crate::ResumeOptions;
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{AgentRun, SUSPENDED_RUN_FORMAT, SuspendedRun};

/// How the ledger answered a call's start.
pub(crate) enum Start {
    /// Run it.
    Run,
    /// It settled before: answer with its recorded result.
    Recorded(ToolResult),
    /// Do not run it; the text says why.
    Refused(String),
}

impl AgentHarness {
    /// The idempotency key's argument hash of a call, when a ledger records
    /// calls. Model-issued calls are hashed as persisted (redacted).
    pub(crate) fn ledger_hash(&self, call: &ToolCall, nested: bool) -> Option<String> {
        self.ledger.as_ref()?;
        Some(if nested {
            args_hash(&call.arguments)
        } else {
            args_hash(&self.redacted(&call.arguments))
        })
    }

    /// Writes the started rows of a turn's admitted calls, all at once so a
    /// durable backend commits them together.
    pub(crate) async fn start_rows<'h>(
        &'h self,
        ctx: &RunContext,
        events: &EventSink,
        slots: &mut [Slot<'h>],
    ) {
        if self.ledger.is_none() {
            return;
        }
        for slot in slots.iter_mut() {
            if let Slot::Run {
                call, args_hash, ..
            } = slot
            {
                *args_hash = self.ledger_hash(call, false);
            }
        }
        let starts = join_all(slots.iter().map(|slot| async move {
            match slot {
                Slot::Run {
                    call,
                    entry,
                    args_hash,
                } => {
                    let hash = args_hash.clone().unwrap_or_default();
                    Some(self.start_row(ctx, events, call, entry.spec(), hash).await)
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
                Start::Refused(text) => self.refused_slot(ctx, events, call, text).await,
            };
        }
    }

    /// Writes one call's started row and interprets the ledger's answer.
    pub(crate) async fn start_row(
        &self,
        ctx: &RunContext,
        events: &EventSink,
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
            hash,
            spec.replay,
        );
        let error = match ledger.record_started(row).await {
            Ok(()) => return Start::Run,
            Err(error) => error,
        };
        match error {
            // A settled call is answered from its row, also in a run that
            // has since finished (a deferred state resumed twice).
            settled @ (LedgerError::AlreadySettled { .. } | LedgerError::RunFinished { .. }) => {
                match ledger.get(&ctx.run_id, &call.id).await {
                    Ok(Some(row)) => match row.result {
                        Some(stored) => Start::Recorded(stored.to_tool_result()),
                        None => Start::Refused(format!("refused: {settled}")),
                    },
                    Ok(None) => Start::Refused(format!("refused: {settled}")),
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
        events: &EventSink,
        call_id: &CallId,
        outcome: Outcome,
    ) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        if let Err(error) = ledger.record_settled(&ctx.run_id, call_id, &outcome).await {
            events
                .emit(|| AgentEvent::Warning {
                    message: format!("the settled row of call {call_id} was not written: {error}"),
                })
                .await;
        }
    }

    /// Settles a model-issued call's row as it ends, with every middleware's
    /// redaction applied to what is stored. A call dropped mid-flight, or
    /// one that asked for approval (it will run once approved), stays started.
    pub(crate) async fn settle_model_call(
        &self,
        ctx: &RunContext,
        events: &EventSink,
        call_id: &CallId,
        outcome: &CallOutcome,
    ) {
        if self.ledger.is_none() || outcome.dropped {
            return;
        }
        let settled = match &outcome.result {
            Ok(result) => {
                let mut stored = result.clone();
                stored.content = self.scrubbed(stored.content);
                stored.metadata = stored.metadata.as_ref().map(|m| self.redacted(m));
                Outcome::Completed(stored)
            }
            Err(TinyAgentsError::ApprovalRequired { .. }) => return,
            Err(error) => Outcome::Failed(self.scrubbed(error.to_string())),
        };
        self.settle_row(ctx, events, call_id, settled).await;
    }

    /// Checkpoints the run at a turn boundary: the transcript up to the
    /// model's calls of this turn, the budget, the active time. Losing one
    /// to a crash means recovery starts from the turn before.
    pub(crate) async fn checkpoint(
        &self,
        ctx: &RunContext,
        state: &State,
        replay_blocked: &[CallId],
        events: &EventSink,
    ) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        let saved = SuspendedRun {
            format: SUSPENDED_RUN_FORMAT,
            run_id: ctx.run_id.clone(),
            state: state.clone(),
            turn: Vec::new(),
            budget: ctx.tracker().counts(),
            active_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            properties: (*ctx.properties).clone(),
            depth: ctx.depth,
            replay_blocked: replay_blocked.to_vec(),
        };
        let written = match serde_json::to_vec(&saved) {
            Ok(bytes) => ledger
                .save_checkpoint(&ctx.run_id, u64::from(state.turn), bytes)
                .await
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = written {
            events
                .emit(|| AgentEvent::Warning {
                    message: format!("checkpoint of turn {} not written: {error}", state.turn),
                })
                .await;
        }
    }

    /// Marks a run finished in the ledger, so retention may prune it.
    pub(crate) async fn finish_in_ledger(&self, run_id: &RunId, events: &EventSink) {
        let Some(ledger) = &self.ledger else {
            return;
        };
        let finished = match ledger.mark_run_finished(run_id).await {
            // Settled rows ride on commits; make the run's last ones durable.
            Ok(()) => ledger.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = finished {
            events
                .emit(|| AgentEvent::Warning {
                    message: format!("run {run_id} not marked finished: {error}"),
                })
                .await;
        }
    }

    /// A recovered call whose arguments held a redacted secret: it cannot run
    /// again. A settled one is answered from its row.
    pub(crate) async fn blocked_replay<'h>(
        &'h self,
        ctx: &RunContext,
        events: &EventSink,
        call: ToolCall,
    ) -> Slot<'h> {
        if let Some(ledger) = &self.ledger
            && let Ok(Some(row)) = ledger.get(&ctx.run_id, &call.id).await
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
            self.settle_row(ctx, events, &call.id, Outcome::Interrupted(text.clone()))
                .await;
            return self.refused_slot(ctx, events, call, text).await;
        }
        let text = format!(
            "refused: call {} cannot be replayed after a crash: its arguments held secrets that were never persisted",
            call.id
        );
        self.refused_slot(ctx, events, call, text).await
    }

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
        // Issue 10 item 8: `restore` bounds the sink; failures are reported on it.
        let mut events = events.clone();
        let result = self.recover_run(run_id, options, &mut events).await;
        super::report_failure(&events, result).await
    }

    async fn recover_run(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
        events: &mut EventSink, // Issue 10 item 8: `restore` bounds it.
    ) -> Result<AgentRun, TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Err(TinyAgentsError::Config(
                "recover needs an effect ledger".to_owned(),
            ));
        };
        let checkpoint = ledger
            .load_checkpoint(run_id)
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?
            .ok_or_else(|| {
                TinyAgentsError::State(format!("run {run_id} has no checkpoint to recover from"))
            })?;
        let saved: SuspendedRun = serde_json::from_slice(&checkpoint.data).map_err(|e| {
            TinyAgentsError::State(format!("checkpoint of run {run_id} cannot be read: {e}"))
        })?;
        saved.check_format()?;
        let blocked = saved.replay_blocked.clone();
        let (mut ctx, mut state) = self.restore(saved, options, events);
        let events = &*events; // Issue 10 item 8
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
        let mut acc = RunAcc::default();
        let open_calls = match state.messages.last() {
            Some(Message::Assistant {
                tool_calls,
                content,
                ..
            }) if !tool_calls.is_empty() => Some((tool_calls.clone(), content.clone())),
            _ => None,
        };
        let Some((calls, text)) = open_calls else {
            return self.drive(&mut ctx, &mut state, events, &mut acc).await;
        };
        let end = self
            .run_calls(
                &mut ctx, &mut state, events, &mut acc, calls, text, None, &blocked,
            )
            .await?;
        match self.end_turn(&ctx, &mut state, events, &mut acc, end).await {
            Some(run) => run,
            None => self.drive(&mut ctx, &mut state, events, &mut acc).await,
        }
    }

    /// The context and state of a suspended or checkpointed run.
    pub(crate) fn restore(
        &self,
        saved: SuspendedRun,
        options: ResumeOptions,
        events: &mut EventSink, // Issue 10 item 8: bounded here.
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
        // Issue 10 item 8: the run's events give way to its cancellation and wall clock.
        *events = events.bounded_by(&ctx);
        self.share_with_tools(&mut ctx, events);
        (ctx, saved.state)
    }
}
