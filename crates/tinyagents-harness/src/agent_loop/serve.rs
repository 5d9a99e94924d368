//! Servicing a nested call: the same admission and execution as a
//! model-issued call, with the specification's exceptions. Stages, in
//! order: refusal quota, cancellation, depth, lookup (model dispatch and
//! the run's allow-list), arguments, approval, `check_nested_tool`, the
//! security gate, budget, the concurrency gate, execution through the
//! `wrap_tool` onion under the call's timeout, `observe_nested_result`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tinyagents_core::{
    AgentEvent, CallId, LimitKind, RunContext, State, TinyAgentsError, ToolCall,
};
use tinyagents_middleware::{GateDecision, ToolCallRequest};
use tinytools::{RegisteredTool, prepare_arguments};

use super::execute::{CallOutcome, CallSite};
use super::ledger::Start;
use super::nested::{Hold, HoldKind, NestedRequest, NestedRunner, NestedStatus};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use tinyagents_ledger::Outcome;

/// An admitted nested call, ready to run.
struct Admitted<'h> {
    call: ToolCall,
    entry: &'h RegisteredTool,
    hold: Hold,
    kind: HoldKind,
    /// Settled before a crash: its recorded result answers it.
    recorded: Option<tinyagents_core::ToolResult>,
    /// The idempotency key's hash, when a ledger recorded the start.
    args_hash: Option<String>,
}

impl AgentHarness {
    /// Services one nested request to its end: the reply carries the result
    /// or the refusal; events, summary and budget are settled here. Every
    /// request that reaches the loop gets its `ToolStarted` first and then
    /// exactly one terminal event, whoever ends it (see `NestedRunner`).
    pub(crate) async fn serve_nested(
        &self,
        ctx: &RunContext,
        state: &State,
        events: &EventSink,
        runner: &Arc<NestedRunner>,
        request: NestedRequest,
    ) {
        let NestedRequest {
            parent,
            id,
            name,
            arguments,
            mut reply,
        } = request;
        let capture = ctx.capture.tool_io;
        events
            .emit(|| AgentEvent::ToolStarted {
                call_id: id.clone(),
                parent_call_id: Some(parent.clone()),
                name: name.clone(),
                arguments: capture.then(|| arguments.clone()),
            })
            .await;
        let quota_spent = runner.started(&id, &parent, &name, runner.summary_args(&arguments));
        let call = ToolCall::new(id.clone(), name.clone(), arguments);
        let admission = tokio::select! {
            biased;
            admitted = self.admit_nested(ctx, state, events, runner, &parent, call, quota_spent) => Some(admitted),
            () = reply.closed() => None,
        };
        let Admitted {
            call,
            entry,
            hold,
            kind,
            recorded,
            args_hash,
        } = match admission {
            Some(Ok(admitted)) => admitted,
            Some(Err(error)) => {
                let text = error.to_string();
                runner.note_refusal(&parent);
                self.end_nested(
                    events,
                    runner,
                    &id,
                    &parent,
                    &name,
                    0,
                    NestedStatus::Failed,
                    text,
                )
                .await;
                let _ = reply.send(Err(error));
                return;
            }
            None => {
                let text =
                    format!("parent settled: {parent} stopped waiting for nested call '{name}'");
                self.end_nested(
                    events,
                    runner,
                    &id,
                    &parent,
                    &name,
                    0,
                    NestedStatus::Abandoned,
                    text,
                )
                .await;
                return;
            }
        };
        runner.admitted(&id, kind);
        // Observers see the call after it ran; copy it only when there are any.
        let observed = (!self.middlewares.is_empty()).then(|| call.clone());
        let replayed = recorded.is_some();
        let outcome = match recorded {
            // Settled before a crash: answered from its row, not run again.
            Some(result) => Some(CallOutcome {
                result: Ok(result),
                duration_ms: 0,
                dropped: false,
            }),
            None => {
                let site = CallSite {
                    parent_call_id: Some(&parent),
                    nested: Some(runner),
                    args_hash: args_hash.as_deref(),
                };
                let work = self.execute_call(ctx, call, entry, events, site);
                tokio::select! {
                    biased;
                    outcome = work => Some(outcome),
                    () = reply.closed() => None,
                }
            }
        };
        drop(hold);
        let Some(outcome) = outcome else {
            // The calling tool stopped waiting: the call is abandoned; its
            // ledger row (if any) stays started.
            let text = format!("parent settled: {parent} stopped waiting for nested call '{name}'");
            self.end_nested(
                events,
                runner,
                &id,
                &parent,
                &name,
                0,
                NestedStatus::Abandoned,
                text,
            )
            .await;
            return;
        };
        let answer = match outcome.result {
            Ok(mut result) => {
                // A nested result cannot steer the run.
                result.control = None;
                if self.ledger.is_some() && !replayed {
                    self.settle_row(ctx, events, &id, Outcome::Completed(result.clone()))
                        .await;
                }
                if let Some(call) = &observed {
                    for middleware in &self.middlewares {
                        middleware
                            .observe_nested_result(ctx, state, call, &result)
                            .await;
                    }
                }
                let status = if result.is_error {
                    NestedStatus::Error
                } else {
                    NestedStatus::Ok
                };
                if !runner.claim(
                    &id,
                    status,
                    result.is_error.then_some(result.content.as_str()),
                ) {
                    return;
                }
                events
                    .emit(|| AgentEvent::ToolCompleted {
                        call_id: id.clone(),
                        parent_call_id: Some(parent.clone()),
                        name: name.clone(),
                        duration_ms: outcome.duration_ms,
                        is_error: result.is_error,
                        result: capture.then(|| result.content.clone()),
                        metadata: result.metadata.clone(),
                    })
                    .await;
                runner.ended(&id);
                Ok(result)
            }
            Err(error) => {
                let error = match error {
                    TinyAgentsError::ApprovalRequired { tool, .. } => {
                        TinyAgentsError::NestedApprovalRequired { tool }
                    }
                    other => other,
                };
                let text = error.to_string();
                if !outcome.dropped {
                    self.settle_row(ctx, events, &id, Outcome::Failed(text.clone()))
                        .await;
                }
                self.end_nested(
                    events,
                    runner,
                    &id,
                    &parent,
                    &name,
                    outcome.duration_ms,
                    NestedStatus::Failed,
                    text,
                )
                .await;
                Err(error)
            }
        };
        let _ = reply.send(answer);
    }

    /// Claims a nested call's end and delivers its `ToolFailed`, unless its
    /// end was already claimed.
    #[allow(clippy::too_many_arguments)] // one call's identity and end
    async fn end_nested(
        &self,
        events: &EventSink,
        runner: &NestedRunner,
        id: &CallId,
        parent: &CallId,
        name: &str,
        duration_ms: u64,
        status: NestedStatus,
        error: String,
    ) {
        if runner.claim(id, status, Some(&error)) {
            self.emit_nested_failed(events, id, parent, name, duration_ms, error)
                .await;
            runner.ended(id);
        }
    }

    /// The admission stages of a nested call. A refusal after the budget
    /// stage gives the slot back.
    #[allow(clippy::too_many_arguments)] // the run's borrows and the call
    async fn admit_nested<'h>(
        &'h self,
        ctx: &RunContext,
        state: &State,
        events: &EventSink,
        runner: &NestedRunner,
        parent: &CallId,
        call: ToolCall,
        quota_spent: bool,
    ) -> Result<Admitted<'h>, TinyAgentsError> {
        if quota_spent {
            let error = TinyAgentsError::NestedRefusalCap {
                tool: call.name.clone(),
                parent: parent.clone(),
                cap: super::nested::REFUSAL_CAP,
            };
            return Err(error);
        }
        if ctx.is_cancelled() {
            let error = TinyAgentsError::tool_failed(
                call.name.clone(),
                format!("nested call '{}' refused: the run was cancelled", call.name),
            );
            return Err(error);
        }
        let max = ctx.limits.max_nested_depth();
        let depth = call.id.depth();
        if max == 0 {
            return Err(TinyAgentsError::NestedDisabled { tool: call.name });
        }
        if depth > max {
            let error = TinyAgentsError::NestedDepthExceeded {
                tool: call.name.clone(),
                depth,
                max,
            };
            return Err(error);
        }
        let Some(entry) = self.lookup(&call.name) else {
            let error = TinyAgentsError::ToolNotFound {
                name: call.name.clone(),
            };
            return Err(error);
        };
        let call = match prepare_arguments(entry, &call, &self.injected, self.invalid_args) {
            Ok(arguments) => ToolCall { arguments, ..call },
            Err(error) => return Err(error.into()),
        };
        let spec = entry.spec();
        if spec.external || spec.approval_required {
            return Err(TinyAgentsError::NestedApprovalRequired { tool: call.name });
        }
        for middleware in &self.middlewares {
            if let Err(error) = middleware.check_nested_tool(ctx, state, &call).await {
                let error = super::denied_by(middleware.name(), &error);
                return Err(error);
            }
        }
        if let Some(gate) = &self.gate {
            let request = ToolCallRequest {
                run_id: &ctx.run_id,
                agent_id: ctx.agent_id.as_ref(),
                call_id: &call.id,
                parent_call_id: Some(parent),
                spec,
                arguments: &call.arguments,
            };
            let refusal = match AssertUnwindSafe(gate.authorize_tool(&request))
                .catch_unwind()
                .await
            {
                Ok(Ok(GateDecision::Allow)) => None,
                Ok(Ok(GateDecision::Deny { reason })) => Some(reason),
                Ok(Ok(GateDecision::Ask { reason })) => Some(format!(
                    "{reason} (a nested call cannot be prompted for, so the gate's question is a refusal)"
                )),
                Ok(Err(error)) => Some(format!("the gate failed: {error}")),
                Err(_) => Some("the gate panicked".to_owned()),
            };
            if let Some(reason) = refusal {
                let error = TinyAgentsError::Denied {
                    by: "security gate".to_owned(),
                    reason,
                };
                return Err(error);
            }
        }
        let slot = match NestedSlot::reserve(ctx) {
            Ok(slot) => slot,
            Err(limit) => {
                if let TinyAgentsError::LimitExceeded {
                    limit: value, used, ..
                } = &limit
                {
                    events
                        .emit(|| AgentEvent::LimitReached {
                            kind: LimitKind::ToolCalls,
                            limit: *value,
                            used: *used,
                        })
                        .await;
                }
                return Err(limit);
            }
        };
        // From here a refusal, or the caller's leaving while this call waits
        // at the gate, drops `slot` and gives the budget back.
        let (hold, kind) = match runner
            .acquire(parent, &call.name, self.runs_shared(entry))
            .await
        {
            Ok(held) => held,
            Err(error) => return Err(error),
        };
        let args_hash = self.ledger_hash(&call, true);
        let hash = args_hash.clone().unwrap_or_default();
        let recorded = match self.start_row(ctx, events, &call, entry.spec(), hash).await {
            Start::Run => None,
            Start::Recorded(result) => Some(result),
            Start::Refused(text) => {
                let error = TinyAgentsError::ToolFailed {
                    tool: call.name.clone(),
                    message: text,
                };
                return Err(error);
            }
        };
        slot.keep();
        Ok(Admitted {
            call,
            entry,
            hold,
            kind,
            recorded,
            args_hash,
        })
    }

    pub(crate) async fn emit_nested_failed(
        &self,
        events: &EventSink,
        id: &CallId,
        parent: &CallId,
        name: &str,
        duration_ms: u64,
        error: String,
    ) {
        events
            .emit(|| AgentEvent::ToolFailed {
                call_id: id.clone(),
                parent_call_id: Some(parent.clone()),
                name: name.to_owned(),
                duration_ms,
                error,
            })
            .await;
    }
}

/// A nested call's budget slot: given back when dropped, unless kept (the
/// call ran). Dropping the admission of a caller that left releases it.
struct NestedSlot<'a> {
    tracker: &'a tinyagents_core::LimitTracker,
    kept: bool,
}

impl<'a> NestedSlot<'a> {
    fn reserve(ctx: &'a RunContext) -> Result<Self, TinyAgentsError> {
        ctx.tracker().try_reserve_nested_tool_call()?;
        Ok(Self {
            tracker: ctx.tracker(),
            kept: false,
        })
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for NestedSlot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.tracker.release_nested_tool_call();
        }
    }
}
