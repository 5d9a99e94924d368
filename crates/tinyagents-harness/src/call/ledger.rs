//! The effect ledger on the call path: a call's started row before it runs
//! (durable before the tool may act) and how the ledger's answer is read,
//! its settled row after, and the guard every ledger operation runs under.

use futures_util::FutureExt;
use futures_util::future::join_all;
use tinyagents_core::{CallId, RunContext, TinyAgentsError, ToolCall, ToolReplay, ToolResult};
use tinyagents_ledger::{LedgerError, LedgerFailure, Outcome, StartedRow};
use tinytools::RegisteredTool;

use super::{CallPath, ToolEvents};
use crate::mutation::{Mutation, planted};

/// How the ledger answered a call's start.
pub(crate) enum Start {
    /// Run it.
    Run,
    /// It settled before: answer with its recorded result.
    Recorded(ToolResult),
    /// Do not run it; the text says why.
    Refused(String),
}

/// One call of a turn's group of started rows: the call, its tool, its
/// hash and its replay class, as admission decided them.
pub(crate) type StartOf<'a> = (&'a ToolCall, &'a RegisteredTool, &'a str, ToolReplay);

impl CallPath {
    /// Writes the started rows of a turn's admitted calls together, so a
    /// durable backend commits them at once; each call's start, in order.
    pub(crate) async fn start_group(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        group: &[StartOf<'_>],
    ) -> Vec<Start> {
        join_all(group.iter().map(|&(call, entry, hash, replay)| {
            self.start_row(ctx, events, call, entry, hash, replay)
        }))
        .await
    }

    /// Writes one call's started row and interprets the ledger's answer.
    pub(crate) async fn start_row(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call: &ToolCall,
        entry: &RegisteredTool,
        hash: &str,
        replay: ToolReplay,
    ) -> Start {
        let Some(ledger) = &self.ledger else {
            return Start::Run;
        };
        let row = StartedRow::new(
            ctx.run_id.clone(),
            call.id.clone(),
            call.name.clone(),
            hash.to_owned(),
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
                Box::pin(self.reconcile_in_doubt(ctx, events, call, entry, hash, refused)).await
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
                        .warn(|| {
                            format!(
                                "call {} runs without a started row (LedgerFailure::Continue): {failure}",
                                call.id
                            )
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
                .warn(|| format!("the settled row of call {call_id} was not written: {error}"))
                .await;
        }
    }
}

impl CallPath {
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
                .warn(|| format!("the settled row of call {call_id} was not made durable: {error}"))
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
