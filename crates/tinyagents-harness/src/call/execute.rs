//! Execution of one admitted call: the `wrap_tool` onion under the call's
//! timeout (the tool's own or the run's default, never past the run's
//! wall-clock budget), with the nested-call runner installed for its tool.
//! A panic, in the tool or in a wrap layer, becomes the call's failure.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tinyagents_core::{AgentEvent, CallId, TinyAgentsError, ToolCall};
use tinyagents_middleware::{Next, ToolCallContext};
use tinytools::{IdempotencyKey, ProgressSink, RegisteredTool, ToolCallOptions, ToolRunContext};
use tokio::time::Instant;
use tracing::Instrument;

use super::CallEnv;
use super::contain::panic_text;
use super::nested::{NestedRunner, attach_summary};
use super::settle::CallOutcome;
use super::timing::{millis, until};
use super::{NESTED_SCOPE, NestedScope, NestedToolRunner};
use super::{ToolSpan, tool_ended};

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
    /// The provider's id of a model-issued call.
    pub(crate) provider_id: Option<&'a str>,
    /// The calling tool's span, for a nested call.
    pub(crate) parent_span: Option<&'a tracing::Span>,
}

impl<'e> CallEnv<'e> {
    /// Runs one call through the onion under its timeout.
    pub(crate) async fn execute_call(
        self,
        call: &ToolCall,
        entry: &RegisteredTool,
        site: CallSite<'_>,
    ) -> CallOutcome {
        let harness = self.path;
        let ctx = self.ctx;
        let CallSite {
            parent_call_id,
            nested,
            args_hash,
            provider_id,
            parent_span,
        } = site;
        // One clock reading per call: its start, its deadline from it.
        let started = Instant::now();
        let spec = entry.spec();
        let own = spec
            .timeout
            .or(ctx.limits.tool_timeout)
            .and_then(|own| started.checked_add(own));
        let end = match (own, ctx.wall_clock_end()) {
            (Some(own), Some(run)) => Some(own.min(run)),
            (own, run) => own.or(run),
        };
        let timeout = end.map(|end| end.saturating_duration_since(started));
        let call_id = call.id.clone();
        let scope = nested.map(|runner| {
            if parent_call_id.is_none() {
                // Nested calls were activated when admitted.
                runner.activate(&call_id);
            }
            NestedScope {
                runner: NestedToolRunner::Loop(Arc::downgrade(runner)),
                call_id: call_id.clone(),
            }
        });
        let runner = scope
            .as_ref()
            .map_or(NestedToolRunner::Disabled, |s| s.runner.clone());
        let tool_span = ToolSpan {
            id: &call_id,
            name: &spec.name,
            provider_id,
            parent: parent_span,
            run: self.shared,
        };
        let span = tool_span.open(self.events, || self.events.redaction().arguments(call));
        let extension = self
            .contexts
            .take(runner, call_id.clone(), self.shared, span.clone());
        let mut tool_context = self
            .tool_context(&call.id)
            .with_host_extension(Arc::clone(&extension) as _);
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
            detailed_errors: harness.detailed_errors,
        };
        let onion = Next::new(&harness.wraps, entry.tool().as_ref()).run(&wrap_context, call);
        let guarded = AssertUnwindSafe(onion)
            .catch_unwind()
            .instrument(span.clone());
        let bounded = until(end, guarded);
        // One await point whatever the scope: the future then holds the
        // call's execution once. Without nesting the scope's runner refuses.
        let scope = scope.unwrap_or_else(|| NestedScope {
            runner: NestedToolRunner::Disabled,
            call_id: call_id.clone(),
        });
        let finished = NESTED_SCOPE.scope(scope, bounded).await;
        // The tool is done with its context; the next call may have it.
        drop(tool_context);
        self.contexts.give_back(extension);
        let mut result = match finished {
            None => Err(TinyAgentsError::Timeout {
                what: spec.name.clone(),
                after_ms: timeout.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            }),
            Some(Err(panic)) => {
                let text = format!(
                    "tool '{}' panicked: {}",
                    spec.name,
                    panic_text(panic.as_ref())
                );
                Err(if harness.detailed_errors {
                    TinyAgentsError::tool_failed(spec.name.clone(), text)
                } else {
                    let withheld = tinyagents_middleware::withheld(&spec.name);
                    TinyAgentsError::tool_failed_withheld(spec.name.clone(), withheld, text)
                })
            }
            Some(Ok(result)) => result,
        };
        let max_bytes = ctx.limits.max_tool_result_bytes;
        tool_ended(&span, &result, self.events, max_bytes);
        drop(span);
        if let Some(runner) = nested {
            let (summary, abandoned) = runner.finish_parent(&call_id);
            if !abandoned.is_empty() {
                // Boxed: rare, and its events' future would otherwise size
                // every call's future (and every loop future moved with it).
                Box::pin(runner.report_abandoned(abandoned)).await;
            }
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

    /// Runs one admitted call and writes its settled row as soon as it
    /// ends, so a crash later in the turn does not put a finished call in
    /// doubt.
    ///
    /// Not an `async fn`: the call's execution is made first and moved into
    /// the future whole.
    pub(crate) fn run_call<'a>(
        self,
        call: &'a ToolCall,
        entry: &'a RegisteredTool,
        site: CallSite<'a>,
    ) -> impl std::future::Future<Output = CallOutcome> + use<'a, 'e>
    where
        'e: 'a,
    {
        // `then` keeps the execution and the row's write in one slot, one
        // after the other (an `async` block would keep the execution twice:
        // as its capture and as what it awaits).
        self.execute_call(call, entry, site)
            .then(move |outcome| async move {
                self.path
                    .record(self.ctx, self.events, &call.id, entry.spec(), &outcome)
                    .await;
                outcome
            })
    }

    fn tool_context(&self, call_id: &CallId) -> ToolRunContext {
        let ctx = self.ctx;
        let context = ToolRunContext::new(
            ctx.run_id.clone(),
            call_id.clone(),
            ctx.cancellation().clone(),
        )
        .with_agent(ctx.agent_id.clone());
        let events = self.events.sink();
        if events.is_active() && !call_id.is_nested() {
            // Weak: a tool may keep its context past its call, and must not
            // keep the run's stream open with it.
            let sink = events.downgrade();
            let progress: ProgressSink = Arc::new(move |p| {
                sink.upgrade().try_emit(if p.warning {
                    AgentEvent::Warning { message: p.message }
                } else {
                    AgentEvent::ToolProgress {
                        call_id: p.call_id,
                        fraction: p.fraction,
                        message: p.message,
                    }
                });
            });
            context.with_progress(Some(progress))
        } else {
            context
        }
    }
}
