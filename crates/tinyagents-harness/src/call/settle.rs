//! Settlement: one function reports how every call ended, whatever its
//! origin — truncation, the result hooks, the terminal event, the parent's
//! summary — and one writes its settled ledger row with every payload
//! redacted. Where origins differ (a model-issued result is truncated and
//! may be rewritten by `after_tool`; a nested one loses its control and is
//! only observed), one `match` decides.

use tinyagents_core::{CallId, RunContext, State, TinyAgentsError, ToolCall, ToolResult};
use tinyagents_ledger::Outcome;
use tinyagents_middleware::Hook;
use tinytools::{ToolSpec, cut};

use super::CallPath;
use super::contain::{contain, contain_unit};
use super::emit::ToolEvents;
use super::nested::{NestedRunner, NestedStatus};

/// What running one call gave.
#[derive(Debug)]
pub(crate) struct CallOutcome {
    pub(crate) result: Result<ToolResult, TinyAgentsError>,
    pub(crate) duration_ms: u64,
    /// The tool's future was dropped mid-flight (timeout, cancellation):
    /// whether its effect happened is unknown, so its ledger row stays
    /// started.
    pub(crate) dropped: bool,
}

impl CallOutcome {
    /// A call answered from its ledger row: it does not run again.
    pub(crate) fn recorded(result: ToolResult) -> Self {
        Self {
            result: Ok(result),
            duration_ms: 0,
            dropped: false,
        }
    }

    /// A nested call's outcome: it cannot wait for a person, so an
    /// approval asked for while it ran is its refusal.
    pub(crate) fn for_nested(mut self) -> Self {
        if let Err(TinyAgentsError::ApprovalRequired { tool, .. }) = self.result {
            self.result = Err(TinyAgentsError::NestedApprovalRequired { tool });
        }
        self
    }

    /// A call of a batch the run's cancellation stopped.
    pub(crate) fn cancelled(tool: &str) -> Self {
        Self {
            result: Err(TinyAgentsError::tool_failed(
                tool,
                format!("tool '{tool}' was cancelled: the run was cancelled"),
            )),
            duration_ms: 0,
            dropped: true,
        }
    }
}

/// Where a settling call's hooks run and its end is reported.
pub(crate) enum SettleScope<'a> {
    /// A model-issued call, settled in the fold: `after_tool` may rewrite it.
    Model {
        ctx: &'a mut RunContext,
        state: &'a State,
    },
    /// A nested call, settled as it ends: observed, never rewritten.
    Nested {
        ctx: &'a RunContext,
        state: &'a State,
        runner: &'a NestedRunner,
    },
}

/// How a call was settled.
pub(crate) enum Settlement {
    /// Its answer: `result` is what the transcript holds (for a failed call,
    /// the text the model reads); `error` is set when the call failed or was
    /// refused, and is what a nested caller gets.
    Answered {
        result: ToolResult,
        error: Option<TinyAgentsError>,
    },
    /// A model-issued call asked for approval while it ran: it waits.
    Deferred(String),
    /// A nested call whose end was already claimed (its parent settled):
    /// nobody waits for its answer.
    Claimed,
}

impl CallPath {
    /// Settles one call that ran (or was answered from its ledger row).
    pub(crate) async fn settle(
        &self,
        scope: SettleScope<'_>,
        events: &ToolEvents,
        call: &ToolCall,
        outcome: CallOutcome,
    ) -> Settlement {
        let duration_ms = outcome.duration_ms;
        let (mut result, mut error) = match outcome.result {
            Ok(result) => (result, None),
            // Raised during execution: a model-issued call waits for a
            // person like one deferred at admission (a nested call's was made
            // its refusal as it ended: `CallOutcome::for_nested`).
            Err(TinyAgentsError::ApprovalRequired { tool, reason })
                if matches!(scope, SettleScope::Model { .. }) =>
            {
                let text = format!(
                    "tool '{tool}' requires approval: {reason}; the run waits for a decision"
                );
                events
                    .failed(&call.id, &call.name, duration_ms, &text)
                    .await;
                return Settlement::Deferred(format!("{reason} (asked by the tool while it ran)"));
            }
            Err(error) => (ToolResult::error(error.to_string()), Some(error)),
        };
        match scope {
            SettleScope::Model { ctx, state } => {
                truncate(&mut result.content, ctx.limits.max_tool_result_bytes);
                for site in self.middlewares.with(Hook::AfterTool).rev() {
                    let name = site.name();
                    let hook = site.build(|m| m.after_tool(ctx, state, call, &mut result));
                    if let Err(withheld) = contain(name, hook).await {
                        let text = format!("result withheld: {withheld}");
                        result = ToolResult::error(text.clone());
                        error = Some(TinyAgentsError::tool_failed(call.name.clone(), text));
                        break;
                    }
                }
                events
                    .ended(
                        &call.id,
                        &call.name,
                        duration_ms,
                        &result,
                        host_failure(&error, ctx.limits.max_tool_result_bytes),
                    )
                    .await;
                Settlement::Answered { result, error }
            }
            SettleScope::Nested { ctx, state, runner } => {
                // A nested result cannot steer the run.
                result.control = None;
                if error.is_none() {
                    for site in self.middlewares.with(Hook::ObserveNestedResult) {
                        let hook =
                            site.build(|m| m.observe_nested_result(ctx, state, call, &result));
                        if let Err(failed) = contain_unit(site.name(), hook).await {
                            let text = format!("result withheld: {failed}");
                            result = ToolResult::error(text.clone());
                            error = Some(TinyAgentsError::tool_failed(call.name.clone(), text));
                            break;
                        }
                    }
                }
                let status = match (&error, result.is_error) {
                    (Some(_), _) => NestedStatus::Failed,
                    (None, true) => NestedStatus::Error,
                    (None, false) => NestedStatus::Ok,
                };
                let summary_error = (status != NestedStatus::Ok)
                    .then(|| events.redaction().text(result.content.clone()));
                if !runner.claim(&call.id, status, summary_error.as_deref()) {
                    return Settlement::Claimed;
                }
                events
                    .ended(
                        &call.id,
                        &call.name,
                        duration_ms,
                        &result,
                        host_failure(&error, ctx.limits.max_tool_result_bytes),
                    )
                    .await;
                runner.ended(&call.id);
                Settlement::Answered { result, error }
            }
        }
    }

    /// Writes a call's settled row as soon as it ends (so a crash later in
    /// the turn does not put a finished call in doubt), with every payload
    /// redacted; for a tool that asks it (`ToolSpec::durable_settle`), made
    /// durable before the result is folded. A call dropped mid-flight, or a
    /// model-issued one that asked for approval (it runs once approved),
    /// stays started.
    pub(crate) async fn record(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call_id: &CallId,
        spec: &ToolSpec,
        outcome: &CallOutcome,
    ) {
        if self.ledger.is_none() || outcome.dropped {
            return;
        }
        // Boxed: the ledger's future is large, and only a run with a ledger
        // pays for it.
        Box::pin(self.record_outcome(ctx, events, call_id, spec.durable_settle, outcome)).await;
    }

    async fn record_outcome(
        &self,
        ctx: &RunContext,
        events: &ToolEvents,
        call_id: &CallId,
        durable: bool,
        outcome: &CallOutcome,
    ) {
        let redaction = events.redaction();
        let settled = match &outcome.result {
            Ok(result) => {
                let mut stored = result.clone();
                redaction.result(&mut stored);
                Outcome::Completed(stored)
            }
            // It did not act: it waits for a person, and runs once
            // approved (the ledger lets a deferred row start again).
            Err(TinyAgentsError::ApprovalRequired { reason, .. }) => {
                Outcome::Deferred(redaction.text(reason.clone()))
            }
            Err(error) => Outcome::Failed(redaction.text(error.host_text())),
        };
        self.settle_row(ctx, events, call_id, settled).await;
        if durable {
            self.flush_row(events, call_id).await;
        }
    }
}

/// Cuts `content` to `max` bytes and says so.
pub(crate) fn truncate(content: &mut String, max: usize) {
    if content.len() <= max {
        return;
    }
    let total = content.len();
    let kept = cut(content, max);
    let kept_len = kept.len();
    *content = kept;
    content.push_str(&format!("\n[truncated: kept {kept_len} of {total} bytes]"));
}

/// What the host's `ToolFailed` reads of a failed call: `None` for a call
/// that did not fail, `Some(None)` for the model's text, `Some(Some(text))`
/// for the error's own text (cut to `max` bytes, as a result is) when the
/// model's withholds it.
fn host_failure(error: &Option<TinyAgentsError>, max: usize) -> Option<Option<String>> {
    error.as_ref().map(|error| match error {
        TinyAgentsError::ToolFailed {
            detail: Some(detail),
            ..
        } => {
            let mut detail = detail.clone();
            truncate(&mut detail, max);
            Some(detail)
        }
        _ => None,
    })
}
