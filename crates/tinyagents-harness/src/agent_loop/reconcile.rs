//! Calls in doubt after a crash: asking a tool whether the effect of a call
//! happened (`Tool::reconcile`), recording what it found on the call's row
//! (`EffectLedger::resolve`), and settling the rows a recovery will never
//! meet again (the nested calls of a parent that does not run again, the
//! calls of a turn whose checkpoint was lost).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tinyagents_core::{
    AgentEvent, CallId, CancellationToken, IdempotencyKey, RunContext, RunId, TinyAgentsError,
    ToolCall, ToolReplay,
};
use tinyagents_ledger::{
    Effect, EffectLedger, Found, LedgerError, LedgerRow, Outcome, Resolve, RunState, StartedRow,
};
use tinytools::{Reconciled, RegisteredTool, ToolRunContext};

use super::ledger::{Start, guarded};
use crate::call::{Redaction, ToolEvents, panic_text};
use crate::harness::AgentHarness;

/// How long a reconciliation may take when neither the tool nor the run
/// sets a tool timeout.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a tool's reconciliation found, with the words that say so.
pub(crate) struct Finding {
    pub(crate) found: Found,
    pub(crate) note: String,
}

/// What became of one call in doubt that a recovery settled or resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    /// The call.
    pub call_id: CallId,
    /// Its tool.
    pub tool_name: String,
    /// Its replay class: a replay-safe call is settled without asking its
    /// tool (running it again would be harmless).
    pub replay: ToolReplay,
    /// What is known of its effect now.
    pub effect: Effect,
    /// How it was found out (or why it is still unknown).
    pub note: String,
}

impl Reconciliation {
    fn line(&self) -> String {
        match self.replay {
            ToolReplay::Safe => format!(
                "{} ({}): not run again (replay-safe)",
                self.call_id, self.tool_name
            ),
            ToolReplay::Never => format!("{} ({}): {}", self.call_id, self.tool_name, self.effect),
        }
    }
}

/// The calls of `reconciled` as one clause of an answer to the model.
pub(crate) fn listing(reconciled: &[Reconciliation]) -> String {
    let lines: Vec<String> = reconciled.iter().map(Reconciliation::line).collect();
    format!("its nested calls: {}", lines.join("; "))
}

impl AgentHarness {
    /// A call met again (by a recovery or a resume) whose row is in doubt
    /// and whose tool must not repeat (`refused` is the ledger's refusal to
    /// start it again). Its tool is asked whether the effect happened, and
    /// the finding is recorded on the row before the call is answered:
    /// happened, it is answered with the result found; never happened, it
    /// starts again and runs once; unknown (or an error, a panic, a
    /// timeout), it is answered "interrupted, outcome unknown". A parent
    /// that does not run again has its nested calls in doubt settled too
    /// ([`settle_orphans`](Self::settle_orphans)), and the unknown answer
    /// lists them. Fails closed: a finding that cannot be recorded runs
    /// nothing.
    pub(crate) async fn reconcile_in_doubt(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call: &ToolCall,
        entry: &RegisteredTool,
        hash: &str,
        refused: LedgerError,
    ) -> Start {
        let Some(ledger) = &self.ledger else {
            return Start::Refused(format!("interrupted, outcome unknown: {refused}"));
        };
        let redaction = events.redaction();
        let finding = self
            .ask_reconcile(&ctx.run_id, &call.id, hash, entry, ctx.cancellation())
            .await;
        let recorded = self
            .record_finding(ledger.as_ref(), redaction, &ctx.run_id, &call.id, &finding)
            .await;
        if let Err(error) = recorded {
            let text = format!(
                "{}; it could not be recorded, so the call was not run: {error}",
                unknown_answer(&refused, &finding.note)
            );
            self.settle_row(ctx, events, &call.id, Outcome::Interrupted(text.clone()))
                .await;
            return Start::Refused(text);
        }
        events
            .sink()
            .emit(|| AgentEvent::Warning {
                message: redaction.text(format!(
                    "call {} ({}) was in doubt after a crash: {}",
                    call.id, call.name, finding.note
                )),
            })
            .await;
        match finding.found {
            Found::Happened(result) => {
                self.settle_nested_orphans(ctx, events, &call.id).await;
                Start::Recorded(result)
            }
            Found::NotHappened => {
                // Its row is deferred now (it did not act): it starts again.
                let row = StartedRow::new(
                    ctx.run_id.clone(),
                    call.id.clone(),
                    call.name.clone(),
                    hash.to_owned(),
                    entry.spec().replay,
                );
                match guarded("record_started", ledger.record_started(row)).await {
                    Ok(()) => Start::Run,
                    Err(error) => Start::Refused(format!(
                        "refused: the effect ledger could not start the call again, so it was not run: {error}"
                    )),
                }
            }
            Found::Unknown => {
                let mut text = unknown_answer(&refused, &finding.note);
                let orphans = self.settle_nested_orphans(ctx, events, &call.id).await;
                if !orphans.is_empty() {
                    text.push_str("; ");
                    text.push_str(&listing(&orphans));
                }
                Start::Refused(text)
            }
        }
    }

    /// [`settle_orphans`](Self::settle_orphans) under `parent`, a failure
    /// reported as a warning (the rows stay in doubt, and in view).
    async fn settle_nested_orphans(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        parent: &CallId,
    ) -> Vec<Reconciliation> {
        let settled = self
            .settle_orphans(
                &ctx.run_id,
                Some(parent),
                events.redaction(),
                ctx.cancellation(),
            )
            .await;
        match settled {
            Ok(settled) => settled,
            Err(error) => {
                events
                    .sink()
                    .emit(|| AgentEvent::Warning {
                        message: format!(
                            "the nested calls in doubt under {parent} were not settled: {error}"
                        ),
                    })
                    .await;
                Vec::new()
            }
        }
    }

    /// Asks `tool` whether the effect of call `call_id` (arguments hashed
    /// as `args_hash`) happened. Contained and bounded: an error, a panic
    /// or a timeout is [`Found::Unknown`], saying which.
    pub(crate) async fn ask_reconcile(
        &self,
        run_id: &RunId,
        call_id: &CallId,
        args_hash: &str,
        tool: &RegisteredTool,
        cancel: &CancellationToken,
    ) -> Finding {
        let name = &tool.spec().name;
        let context = ToolRunContext::new(run_id.clone(), call_id.clone(), cancel.clone())
            .with_agent(self.agent_id.clone())
            .with_idempotency_key(IdempotencyKey {
                run_id: run_id.clone(),
                call_id: call_id.clone(),
                args_hash: args_hash.to_owned(),
            });
        let timeout = tool
            .spec()
            .timeout
            .or(self.limits.tool_timeout)
            .unwrap_or(RECONCILE_TIMEOUT);
        let asked = AssertUnwindSafe(tool.tool().reconcile(&context)).catch_unwind();
        let (found, note) = match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(Ok(Reconciled::Done(result)))) => (
                Found::Happened(result),
                format!("the reconciliation of tool '{name}' found that the effect happened"),
            ),
            Ok(Ok(Ok(Reconciled::NotDone))) => (
                Found::NotHappened,
                format!("the reconciliation of tool '{name}' found that the effect never happened"),
            ),
            Ok(Ok(Ok(Reconciled::Unknown))) => (
                Found::Unknown,
                format!("the reconciliation of tool '{name}' could not tell"),
            ),
            Ok(Ok(Err(error))) => (
                Found::Unknown,
                format!("the reconciliation of tool '{name}' failed: {error:#}"),
            ),
            Ok(Err(panic)) => (
                Found::Unknown,
                format!(
                    "the reconciliation of tool '{name}' panicked: {}",
                    panic_text(panic.as_ref())
                ),
            ),
            Err(_) => (
                Found::Unknown,
                format!(
                    "the reconciliation of tool '{name}' did not answer within {} ms",
                    timeout.as_millis()
                ),
            ),
        };
        Finding { found, note }
    }

    /// Records `finding` on the row of `call_id`, the found result and the
    /// note redacted first (they are persisted).
    pub(crate) async fn record_finding(
        &self,
        ledger: &dyn EffectLedger,
        redaction: &Redaction,
        run_id: &RunId,
        call_id: &CallId,
        finding: &Finding,
    ) -> Result<(), LedgerError> {
        let found = match &finding.found {
            Found::Happened(result) => {
                let mut stored = result.clone();
                redaction.result(&mut stored);
                Found::Happened(stored)
            }
            other => other.clone(),
        };
        let resolve = Resolve::by_reconcile(found).with_note(redaction.text(finding.note.clone()));
        guarded("resolve", ledger.resolve(run_id, call_id, &resolve)).await
    }

    /// Settles every row of `run_id` still in doubt (status started) that
    /// nothing will run again: the descendants of `under`, or with `None`
    /// every such row of the run. A `ToolReplay::Never` call's tool is
    /// asked first: what it found is recorded (happened: completed with
    /// its result; never happened: deferred, it did not act; unknown:
    /// interrupted, and still in doubt). A replay-safe call is settled
    /// interrupted (running it again would be harmless, so it is not in
    /// doubt). Returns what became of each, in start order.
    pub(crate) async fn settle_orphans(
        &self,
        run_id: &RunId,
        under: Option<&CallId>,
        redaction: &Redaction,
        cancel: &CancellationToken,
    ) -> Result<Vec<Reconciliation>, LedgerError> {
        let why = match under {
            Some(parent) => format!("its parent {parent} was not run again"),
            None => "nothing ran it again after the crash".to_owned(),
        };
        let Some(ledger) = &self.ledger else {
            return Ok(Vec::new());
        };
        let rows = guarded("unresolved", ledger.unresolved(run_id)).await?;
        let mut settled = Vec::new();
        for row in rows.into_iter().filter(|row| row.is_in_doubt()) {
            if under.is_some_and(|parent| !row.call_id.is_descendant_of(parent)) {
                continue;
            }
            let outcome = self
                .settle_orphan(ledger.as_ref(), &row, &why, redaction, cancel)
                .await?;
            settled.push(outcome);
        }
        Ok(settled)
    }

    /// Settles one row in doubt that will not run again (`why` says why),
    /// asking its tool first when it must not repeat; or, for a row
    /// already answered "interrupted, outcome unknown", asks and records.
    async fn settle_orphan(
        &self,
        ledger: &dyn EffectLedger,
        row: &LedgerRow,
        why: &str,
        redaction: &Redaction,
        cancel: &CancellationToken,
    ) -> Result<Reconciliation, LedgerError> {
        let tool = self.tools.get(&row.tool_name);
        let reconciliation = |effect, note: String| Reconciliation {
            call_id: row.call_id.clone(),
            tool_name: row.tool_name.clone(),
            replay: row.replay,
            effect,
            note,
        };
        if row.replay == ToolReplay::Safe {
            let note = format!(
                "{why}; it was not run again (replay-safe: running it again would be harmless)"
            );
            let text = format!("interrupted: {note}");
            guarded(
                "record_settled",
                ledger.record_settled(&row.run_id, &row.call_id, &Outcome::Interrupted(text)),
            )
            .await?;
            return Ok(reconciliation(Effect::Unknown, note));
        }
        let finding = match tool {
            Some(tool) => {
                self.ask_reconcile(&row.run_id, &row.call_id, &row.args_hash, tool, cancel)
                    .await
            }
            None => Finding {
                found: Found::Unknown,
                note: format!(
                    "tool '{}' is not registered, so it was not asked",
                    row.tool_name
                ),
            },
        };
        let finding = Finding {
            note: format!("{why}; {}", finding.note),
            found: finding.found,
        };
        self.record_finding(ledger, redaction, &row.run_id, &row.call_id, &finding)
            .await?;
        Ok(reconciliation(finding.found.effect(), finding.note))
    }

    /// Asks the tools of a finished run's calls whose effect is unknown
    /// whether it happened, and records what they found on each row (a
    /// call that never happened stays unrun: the run is over). Use it for
    /// runs that [`EffectLedger::unfinished_runs`] lists and whose
    /// [`EffectLedger::run_state`] is finished, for example after a
    /// reconciliation at recovery could not reach its service. A run that
    /// is not finished is refused: recover it (recovery reconciles its
    /// calls). Returns what became of each call asked, in start order.
    pub async fn reconcile(&self, run_id: &RunId) -> Result<Vec<Reconciliation>, TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Err(TinyAgentsError::Config(
                "reconcile needs an effect ledger".to_owned(),
            ));
        };
        let state = guarded("run_state", ledger.run_state(run_id))
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?;
        if state != RunState::Finished {
            return Err(TinyAgentsError::State(format!(
                "run {run_id} is not finished: recover it instead (recovery asks the tools of its calls in doubt)"
            )));
        }
        let rows = guarded("unresolved", ledger.unresolved(run_id))
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?;
        let redaction = Redaction::new(self.middlewares.clone());
        let cancel = CancellationToken::new();
        let mut reconciled = Vec::new();
        for row in &rows {
            let done = self
                .settle_orphan(
                    ledger.as_ref(),
                    row,
                    "its run has finished",
                    &redaction,
                    &cancel,
                )
                .await
                .map_err(|e| TinyAgentsError::State(e.to_string()))?;
            reconciled.push(done);
        }
        Ok(reconciled)
    }
}

impl AgentHarness {
    /// Ends a run that will never be continued, such as a delegated run
    /// whose caller was interrupted by a crash: marks it finished in the
    /// ledger (no call of it starts again), then asks its tools about its
    /// calls in doubt and records what they find, as
    /// [`reconcile`](Self::reconcile) does. A run the ledger does not know
    /// is left alone, and so is every run of a harness without a ledger
    /// (nothing of it was recorded). Call it only when nothing runs it any
    /// more.
    pub async fn abandon(&self, run_id: &RunId) -> Result<Vec<Reconciliation>, TinyAgentsError> {
        let Some(ledger) = &self.ledger else {
            return Ok(Vec::new());
        };
        let state = guarded("run_state", ledger.run_state(run_id))
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?;
        if state == RunState::Unknown {
            return Ok(Vec::new());
        }
        guarded("mark_run_finished", ledger.mark_run_finished(run_id))
            .await
            .map_err(|e| TinyAgentsError::State(e.to_string()))?;
        self.reconcile(run_id).await
    }
}

/// The answer the model reads for a call whose row a reconciliation
/// settled without running it, `refused` being why it was not simply run.
pub(crate) fn unknown_answer(refused: &LedgerError, note: &str) -> String {
    format!("interrupted, outcome unknown: {refused}; {note}")
}
