//! Execution of admitted calls: consecutive concurrency-safe calls run
//! together, polled by the loop's own task; any other call runs alone. Each
//! call runs through the `wrap_tool` onion under its timeout; a panic
//! becomes that call's failure; cancellation stops the batch.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::time::Instant;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tinyagents_core::{
    AgentEvent, CallId, RunContext, State, TinyAgentsError, ToolCall, ToolResult,
};
use tinyagents_middleware::{Next, ToolCallContext};
use tinytools::{IdempotencyKey, ProgressSink, RegisteredTool, ToolCallOptions, ToolRunContext};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::nested::{Abandoned, NestedRequest, NestedRunner, attach_summary};
use super::{Slot, millis, with_deadline};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::tool::{NESTED_SCOPE, NestedScope, NestedToolRunner, RunShared, ToolExecutionContext};

/// Where a call runs: under which parent, with which nested-call runner,
/// with which idempotency key's hash.
#[derive(Clone, Copy)]
pub(crate) struct CallSite<'a> {
    /// The immediate parent of a nested call.
    pub(crate) parent_call_id: Option<&'a CallId>,
    /// The runner its tool's nested calls go to (nesting on).
    pub(crate) nested: Option<&'a Arc<NestedRunner>>,
    /// The hash of its arguments, when a ledger recorded its start.
    pub(crate) args_hash: Option<&'a str>,
}

/// An admitted call of a turn: its slot, the call, its tool and its
/// idempotency key's hash (when a ledger recorded its start).
type Runnable<'a> = (usize, &'a ToolCall, &'a RegisteredTool, Option<&'a str>);

/// What finished in a batch: a call of the batch, or a nested call.
enum Done {
    Call(usize, CallOutcome),
    Nested,
}

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
    fn cancelled(tool: &str) -> Self {
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

impl AgentHarness {
    /// Runs the admitted calls of a turn. The result has one entry per slot;
    /// `None` for slots that are not admitted calls, and for admitted calls
    /// that never started because the run was cancelled.
    pub(crate) async fn execute_turn(
        &self,
        ctx: &RunContext,
        state: &State,
        events: &EventSink,
        slots: &[Slot<'_>],
    ) -> Vec<Option<CallOutcome>> {
        let mut outcomes: Vec<Option<CallOutcome>> = slots.iter().map(|_| None).collect();
        let runnable: Vec<Runnable<'_>> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| match slot {
                Slot::Run {
                    call,
                    entry,
                    args_hash,
                } => Some((i, call, *entry, args_hash.as_deref())),
                _ => None,
            })
            .collect();
        let mut nested = (ctx.limits.max_nested_depth() > 0).then(|| {
            NestedRunner::new(
                ctx.capture.tool_io,
                ctx.cancellation().clone(),
                events.clone(),
            )
        });
        let mut start = 0;
        while start < runnable.len() && !ctx.is_cancelled() {
            let mut end = start + 1;
            if self.runs_shared(runnable[start].2) {
                while end < runnable.len() && self.runs_shared(runnable[end].2) {
                    end += 1;
                }
            }
            let batch = &runnable[start..end];
            let channel = nested.as_mut().map(|(runner, rx)| (&*runner, rx));
            if self
                .run_batch(ctx, state, events, batch, &mut outcomes, channel)
                .await
            {
                break;
            }
            start = end;
        }
        outcomes
    }

    /// Runs one batch, servicing the nested calls its tools make; `true`
    /// when the run was cancelled during it.
    async fn run_batch(
        &self,
        ctx: &RunContext,
        state: &State,
        events: &EventSink,
        batch: &[Runnable<'_>],
        outcomes: &mut [Option<CallOutcome>],
        nested: Option<(
            &Arc<NestedRunner>,
            &mut mpsc::UnboundedReceiver<NestedRequest>,
        )>,
    ) -> bool {
        for (_, call, _, _) in batch {
            self.emit_started(ctx, events, call).await;
        }
        let mut nested = nested;
        let runner = nested.as_ref().map(|(runner, _)| Arc::clone(runner));
        let mut running: FuturesUnordered<BoxFuture<'_, Done>> = batch
            .iter()
            .map(|&(index, call, entry, args_hash)| {
                let runner = runner.as_ref();
                let call = call.clone();
                let future: BoxFuture<'_, Done> = Box::pin(async move {
                    let id = call.id.clone();
                    let outcome = self
                        .execute_call(
                            ctx,
                            call,
                            entry,
                            events,
                            CallSite {
                                parent_call_id: None,
                                nested: runner,
                                args_hash,
                            },
                        )
                        .await;
                    // Settled as soon as it ends, so a crash later in the turn
                    // does not put a finished call in doubt.
                    self.settle_model_call(ctx, events, &id, &outcome).await;
                    Done::Call(index, outcome)
                });
                future
            })
            .collect();
        let mut left = batch.len();
        let serving = runner.as_ref();
        let drive = async {
            match (&mut nested, serving) {
                (None, _) | (_, None) => {
                    while let Some(done) = running.next().await {
                        if let Done::Call(index, outcome) = done {
                            outcomes[index] = Some(outcome);
                        }
                    }
                }
                (Some((_, rx)), Some(runner)) => {
                    while left > 0 {
                        tokio::select! {
                            Some(done) = running.next() => {
                                if let Done::Call(index, outcome) = done {
                                    outcomes[index] = Some(outcome);
                                    left -= 1;
                                }
                            }
                            Some(request) = rx.recv() => {
                                running.push(Box::pin(async move {
                                    self.serve_nested(ctx, state, events, runner, request).await;
                                    Done::Nested
                                }));
                            }
                        }
                    }
                }
            }
        };
        let cancelled = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => true,
            () = drive => false,
        };
        // Drop what is left of the batch before reporting: a dropped call
        // gives back what it held (budget, gate, a reserved event slot),
        // and reporting may need it.
        drop(running);
        if let Some((runner, rx)) = &mut nested {
            // Requests sent but never serviced: refused, with their events.
            while let Ok(request) = rx.try_recv() {
                runner.refuse_unserviced(request).await;
            }
        }
        if let Some(runner) = &runner {
            // Nested calls still in flight when the batch ends were left by
            // their parents (or the run was cancelled): each gets its end.
            self.report_abandoned(events, runner, runner.abandon_all())
                .await;
        }
        if cancelled {
            for &(index, call, _, _) in batch {
                outcomes[index].get_or_insert_with(|| CallOutcome::cancelled(&call.name));
            }
        }
        cancelled
    }

    async fn emit_started(&self, ctx: &RunContext, events: &EventSink, call: &ToolCall) {
        if !events.is_active() {
            return;
        }
        let arguments = ctx.capture.tool_io.then(|| self.redacted(&call.arguments));
        events
            .emit(|| AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                parent_call_id: call.id.parent(),
                name: call.name.clone(),
                arguments,
            })
            .await;
    }

    /// Runs one call through the onion under its timeout (the tool's own or
    /// the run's default, and never past the run's wall-clock budget).
    pub(crate) async fn execute_call(
        &self,
        ctx: &RunContext,
        call: ToolCall,
        entry: &RegisteredTool,
        events: &EventSink,
        site: CallSite<'_>,
    ) -> CallOutcome {
        let CallSite {
            parent_call_id,
            nested,
            args_hash,
        } = site;
        let started = Instant::now();
        let spec = entry.spec();
        let timeout = match (spec.timeout.or(ctx.limits.tool_timeout), ctx.remaining()) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        };
        let call_id = call.id.clone();
        let scope = nested.map(|runner| {
            if parent_call_id.is_none() {
                // Nested calls were activated when admitted.
                runner.activate(&call_id);
            }
            let runner: Arc<dyn NestedToolRunner> = Arc::clone(runner) as Arc<dyn NestedToolRunner>;
            NestedScope {
                runner,
                call_id: call_id.clone(),
            }
        });
        let runner = scope.as_ref().map_or_else(
            || Arc::clone(&self.disabled_runner),
            |s| Arc::clone(&s.runner),
        );
        let shared = ctx.extensions.get_arc::<RunShared>();
        let extension = Arc::new(ToolExecutionContext::new(
            Some(runner),
            call_id.clone(),
            shared,
        ));
        let mut tool_context = self
            .tool_context(ctx, &call.id, events)
            .with_host_extension(extension);
        if let Some(hash) = args_hash {
            tool_context = tool_context.with_idempotency_key(IdempotencyKey {
                run_id: ctx.run_id.clone(),
                call_id: call_id.clone(),
                args_hash: hash.to_owned(),
            });
        }
        let wrap_context = ToolCallContext {
            run: ctx,
            spec,
            parent_call_id,
            tool_context: &tool_context,
            opts: ToolCallOptions::with_timeout(timeout),
            detailed_errors: self.detailed_errors,
        };
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", spec.name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %spec.name,
            gen_ai.tool.call.id = %call.id,
        );
        let onion = Next::new(&self.wraps, entry.tool().as_ref()).run(&wrap_context, call);
        let guarded = AssertUnwindSafe(onion).catch_unwind().instrument(span);
        let bounded = with_deadline(timeout, guarded);
        let finished = match scope {
            Some(scope) => NESTED_SCOPE.scope(scope, bounded).await,
            None => bounded.await,
        };
        let mut result = match finished {
            None => Err(TinyAgentsError::Timeout {
                what: spec.name.clone(),
                after_ms: timeout.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            }),
            Some(Err(panic)) => Err(TinyAgentsError::tool_failed(
                spec.name.clone(),
                if self.detailed_errors {
                    format!(
                        "tool '{}' panicked: {}",
                        spec.name,
                        panic_text(panic.as_ref())
                    )
                } else {
                    tinyagents_middleware::withheld(&spec.name)
                },
            )),
            Some(Ok(result)) => result,
        };
        if let Some(runner) = nested {
            let (summary, abandoned) = runner.finish_parent(&call_id);
            self.report_abandoned(events, runner, abandoned).await;
            if let (Some(summary), Ok(result)) = (summary, result.as_mut()) {
                attach_summary(result, summary);
            }
        }
        // A timeout (the harness's or a wrap's) dropped the tool mid-flight.
        let dropped = matches!(result, Err(TinyAgentsError::Timeout { .. }));
        CallOutcome {
            result,
            duration_ms: millis(started),
            dropped,
        }
    }

    /// Delivers the `ToolFailed` of nested calls whose end a sweep claimed.
    async fn report_abandoned(
        &self,
        events: &EventSink,
        runner: &NestedRunner,
        abandoned: Vec<Abandoned>,
    ) {
        for call in abandoned {
            self.emit_nested_failed(
                events,
                &call.id,
                &call.parent,
                &call.name,
                call.duration_ms,
                call.error,
            )
            .await;
            runner.ended(&call.id);
        }
    }

    fn tool_context(
        &self,
        ctx: &RunContext,
        call_id: &CallId,
        events: &EventSink,
    ) -> ToolRunContext {
        let context = ToolRunContext::new(
            ctx.run_id.clone(),
            call_id.clone(),
            ctx.cancellation().clone(),
        )
        .with_agent(ctx.agent_id.clone());
        if events.is_active() && !call_id.is_nested() {
            let sink = events.clone();
            let progress: ProgressSink = Arc::new(move |p| {
                sink.try_emit(AgentEvent::ToolProgress {
                    call_id: p.call_id,
                    fraction: p.fraction,
                    message: p.message,
                });
            });
            context.with_progress(Some(progress))
        } else {
            context
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
