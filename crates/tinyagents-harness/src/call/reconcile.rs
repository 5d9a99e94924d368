//! Calls in doubt after a crash: asking a tool whether the effect of a call
//! happened (`Tool::reconcile`), recording what it found on the call's row
//! (`EffectLedger::resolve`), and settling the rows a recovery will never
//! meet again (the nested calls of a parent that does not run again, the
//! calls of a turn whose checkpoint was lost).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tinyagents_core::{
    CallId, CancellationToken, IdempotencyKey, RunContext, RunId, Spend, ToolCall, ToolReplay,
};
use tinyagents_ledger::{
    Effect, EffectLedger, Found, LedgerError, LedgerRow, Outcome, Resolve, StartedRow,
};
use tinytools::{Reconciled, RegisteredTool, ToolRunContext};

use super::ledger::{Start, guarded};
use super::{CallPath, Redaction, ToolEvents, panic_text};

/// How long a reconciliation may take when neither the tool nor the run
/// sets a tool timeout.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a tool's reconciliation found, with the words that say so.
pub(crate) struct Finding {
    pub(crate) found: Found,
    pub(crate) note: String,
}

/// A call in doubt, as a reconciliation names it: its idempotency key.
#[derive(Clone, Copy)]
pub(crate) struct Doubt<'a> {
    pub(crate) run_id: &'a RunId,
    pub(crate) call_id: &'a CallId,
    pub(crate) args_hash: &'a str,
    /// The run's node of its tree's spend, when a run meets the call
    /// again: its tool's context carries it, so a delegating tool can
    /// record what the work it abandons had spent.
    pub(crate) spend: Option<&'a Spend>,
}

impl<'a> Doubt<'a> {
    pub(crate) fn of(row: &'a LedgerRow) -> Self {
        Self {
            run_id: &row.run_id,
            call_id: &row.call_id,
            args_hash: &row.args_hash,
            spend: None,
        }
    }
}

/// Which rows still in doubt a sweep settles, and so why nothing will run
/// them again.
#[derive(Clone, Copy)]
pub(crate) enum Sweep<'a> {
    /// The started descendants of a parent that does not run again.
    Under(&'a CallId),
    /// Every started row of a recovered run, once its turn is answered.
    Started,
    /// Every unresolved row (started or unknown) of a finished run.
    Finished,
}

impl Sweep<'_> {
    fn why(self) -> String {
        match self {
            Self::Under(parent) => format!("its parent {parent} was not run again"),
            Self::Started => "nothing ran it again after the crash".to_owned(),
            Self::Finished => "its run has finished".to_owned(),
        }
    }

    fn takes(self, row: &LedgerRow) -> bool {
        match self {
            Self::Under(parent) => row.is_in_doubt() && row.call_id.is_descendant_of(parent),
            Self::Started => row.is_in_doubt(),
            Self::Finished => true,
        }
    }
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

impl CallPath {
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
        let doubt = Doubt {
            run_id: &ctx.run_id,
            call_id: &call.id,
            args_hash: hash,
            spend: Some(ctx.spend()),
        };
        let finding = self
            .ask(doubt, Some(entry), &call.name, ctx.cancellation())
            .await;
        let recorded = self
            .record_finding(ledger.as_ref(), redaction, doubt, &finding)
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
            .warn(|| {
                redaction.text(format!(
                    "call {} ({}) was in doubt after a crash: {}",
                    call.id, call.name, finding.note
                ))
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
                Sweep::Under(parent),
                events.redaction(),
                ctx.cancellation(),
            )
            .await;
        match settled {
            Ok(settled) => settled,
            Err(error) => {
                events
                    .sink()
                    .warn(|| {
                        format!(
                            "the nested calls in doubt under {parent} were not settled: {error}"
                        )
                    })
                    .await;
                Vec::new()
            }
        }
    }

    /// Asks `tool` whether the effect of the call `doubt` names happened.
    /// Contained and bounded: an error, a panic or a timeout is
    /// [`Found::Unknown`], saying which.
    async fn ask_reconcile(
        &self,
        doubt: Doubt<'_>,
        tool: &RegisteredTool,
        cancel: &CancellationToken,
    ) -> Finding {
        let name = &tool.spec().name;
        let mut context =
            ToolRunContext::new(doubt.run_id.clone(), doubt.call_id.clone(), cancel.clone())
                .with_agent(self.agent_id.clone())
                .with_idempotency_key(IdempotencyKey {
                    run_id: doubt.run_id.clone(),
                    call_id: doubt.call_id.clone(),
                    args_hash: doubt.args_hash.to_owned(),
                });
        if let Some(spend) = doubt.spend {
            // What `Tool::reconcile` documents: a run meeting the call
            // again lends its spend as the context's host extension.
            context = context.with_host_extension(std::sync::Arc::new(spend.clone()));
        }
        let timeout = tool
            .spec()
            .timeout
            .or(self.tool_timeout)
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
                format!(
                    "the reconciliation of tool '{name}' failed: {}",
                    tinyagents_core::error_chain(error.as_ref())
                ),
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

    /// Asks the tool of the call `doubt` names (`tool_name`: a tool that is
    /// not registered is not asked, and the effect stays unknown).
    pub(crate) async fn ask(
        &self,
        doubt: Doubt<'_>,
        tool: Option<&RegisteredTool>,
        tool_name: &str,
        cancel: &CancellationToken,
    ) -> Finding {
        match tool {
            Some(tool) => self.ask_reconcile(doubt, tool, cancel).await,
            None => Finding {
                found: Found::Unknown,
                note: format!("tool '{tool_name}' is not registered, so it was not asked"),
            },
        }
    }

    /// Records `finding` on the row of the call `doubt` names, the found
    /// result and the note redacted first (they are persisted).
    pub(crate) async fn record_finding(
        &self,
        ledger: &dyn EffectLedger,
        redaction: &Redaction,
        doubt: Doubt<'_>,
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
        guarded(
            "resolve",
            ledger.resolve(doubt.run_id, doubt.call_id, &resolve),
        )
        .await
    }

    /// Settles the rows of `run_id` that `sweep` takes, none of which will
    /// run again. A started `ToolReplay::Never` call's tool is asked first
    /// and what it found recorded (happened: completed with its result;
    /// never happened: deferred, it did not act; unknown: interrupted, and
    /// still in doubt); an interrupted one's tool is asked again and the
    /// finding recorded. A started replay-safe call is settled interrupted
    /// (running it again would be harmless, so it is not in doubt). Returns
    /// what became of each, in start order.
    pub(crate) async fn settle_orphans(
        &self,
        run_id: &RunId,
        sweep: Sweep<'_>,
        redaction: &Redaction,
        cancel: &CancellationToken,
    ) -> Result<Vec<Reconciliation>, LedgerError> {
        let Some(ledger) = &self.ledger else {
            return Ok(Vec::new());
        };
        let why = sweep.why();
        let rows = guarded("unresolved", ledger.unresolved(run_id)).await?;
        let mut settled = Vec::new();
        for row in rows.iter().filter(|row| sweep.takes(row)) {
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
                let outcome = Outcome::Interrupted(format!("interrupted: {note}"));
                guarded(
                    "record_settled",
                    ledger.record_settled(run_id, &row.call_id, &outcome),
                )
                .await?;
                settled.push(reconciliation(Effect::Unknown, note));
                continue;
            }
            let tool = self.tools.get(&row.tool_name);
            let asked = self.ask(Doubt::of(row), tool, &row.tool_name, cancel).await;
            let finding = Finding {
                note: format!("{why}; {}", asked.note),
                found: asked.found,
            };
            self.record_finding(ledger.as_ref(), redaction, Doubt::of(row), &finding)
                .await?;
            settled.push(reconciliation(finding.found.effect(), finding.note));
        }
        Ok(settled)
    }
}

/// The answer the model reads for a call whose row a reconciliation
/// settled without running it, `refused` being why it was not simply run.
pub(crate) fn unknown_answer(refused: &LedgerError, note: &str) -> String {
    format!("interrupted, outcome unknown: {refused}; {note}")
}
