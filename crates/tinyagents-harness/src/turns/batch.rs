//! Execution of a turn's admitted calls: consecutive concurrency-safe calls
//! run together, polled by the loop's own task (so it can service their
//! nested calls while borrowing the run); any other call runs alone.
//! Cancellation stops the batch. Each call's outcome is left in its slot.

use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tinyagents_core::ToolCall;
use tinytools::RegisteredTool;
use tokio::sync::mpsc;

use super::Run;
use super::turn::Slot;
use crate::call::nested::{NestedRequest, NestedRunner};
use crate::call::{CallOutcome, CallSite};

/// A call of a batch as it runs: its slot, the call, its tool, its hash,
/// its provider's id.
type Work<'a> = (
    usize,
    &'a ToolCall,
    &'a RegisteredTool,
    Option<&'a str>,
    Option<&'a str>,
);

/// The runner of a turn's nested calls and the end the loop services.
type Nested<'a> = Option<(
    &'a Arc<NestedRunner>,
    &'a mut mpsc::UnboundedReceiver<NestedRequest>,
)>;

impl Run<'_> {
    /// Runs the admitted calls of a turn, leaving each one's outcome in its
    /// slot (none for a call that never started because the run was
    /// cancelled).
    pub(crate) async fn execute_turn(&self, slots: &mut [Slot<'_>]) {
        let nesting = self.ctx.limits.max_nested_depth() > 0;
        let runnable = slots
            .iter()
            .filter(|slot| matches!(slot, Slot::Run { .. }))
            .count();
        if self.ctx.is_cancelled() {
            // Nothing starts in a cancelled run; the fold answers each call.
            return;
        }
        if runnable == 1 && !nesting {
            // The common turn: one call and no nested calls to service.
            if let Some(slot) = slots.iter_mut().find(|s| matches!(s, Slot::Run { .. })) {
                self.run_alone(slot).await;
            }
            return;
        }
        let mut nested = nesting.then(|| {
            let cancel = self.ctx.cancellation().clone();
            NestedRunner::new(self.events.clone(), cancel, Arc::clone(&self.shared))
        });
        let harness = self.harness;
        let mut start = 0;
        while start < slots.len() && !self.ctx.is_cancelled() {
            // A batch: the next admitted call, and the concurrency-safe ones
            // right after it when it is one (other slots do not split it).
            let Some(first) = slots[start..]
                .iter()
                .position(|s| matches!(s, Slot::Run { .. }))
                .map(|i| start + i)
            else {
                break;
            };
            let mut end = first + 1;
            if slots[first].runs_shared(harness) {
                while end < slots.len()
                    && (!matches!(slots[end], Slot::Run { .. }) || slots[end].runs_shared(harness))
                {
                    end += 1;
                }
            }
            let channel = nested.as_mut().map(|(runner, rx)| (&*runner, rx));
            if self.run_batch(&mut slots[first..end], channel).await {
                break;
            }
            start = end;
        }
    }

    /// Runs one call in place: no `FuturesUnordered`, no box.
    async fn run_alone(&self, slot: &mut Slot<'_>) {
        let Slot::Run {
            call,
            entry,
            args_hash,
            outcome,
            ..
        } = slot
        else {
            return;
        };
        let call: &ToolCall = call;
        self.events.started(call).await;
        let provider_id = call.provider_id.as_deref();
        // The call's future is made inside the `select!`, so the run's
        // future holds it once (an argument passed down would be kept
        // twice). The call stays in its slot, lent to its execution.
        let done = tokio::select! {
            biased;
            done = self.run_one(call, entry, (args_hash.as_deref(), provider_id), None) => {
                // Cancellation wins a tie, as in a batch.
                (!self.ctx.is_cancelled()).then_some(done)
            }
            () = self.ctx.cancellation().cancelled() => None,
        };
        *outcome = Some(done.unwrap_or_else(|| CallOutcome::cancelled(&call.name)));
    }

    /// Runs one batch, servicing the nested calls its tools make; `true`
    /// when the run was cancelled during it.
    async fn run_batch(&self, slots: &mut [Slot<'_>], nested: Nested<'_>) -> bool {
        for slot in slots.iter() {
            if let Slot::Run { call, .. } = slot {
                self.events.started(call).await;
            }
        }
        let work: Vec<Work<'_>> = slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, slot)| match slot {
                Slot::Run {
                    call,
                    entry,
                    args_hash,
                    ..
                } => {
                    let call: &ToolCall = call;
                    let provider_id = call.provider_id.as_deref();
                    Some((i, call, *entry, args_hash.as_deref(), provider_id))
                }
                _ => None,
            })
            .collect();
        let left = work.len();
        let mut nested = nested;
        let runner = nested.as_ref().map(|(runner, _)| Arc::clone(runner));
        // The calls' futures are of one type: their set holds them
        // unboxed, so a call costs one allocation (its task), not two. The
        // nested calls being served keep their box in a set of their own:
        // their future is large, and copying it into its task costs more
        // than the box.
        let mut running: FuturesUnordered<_> = work
            .into_iter()
            .map(|(index, call, entry, args_hash, provider_id)| {
                let runner = runner.as_ref();
                // The call's future itself, mapped: an `async` block would
                // keep the call beside it.
                let ids = (args_hash, provider_id);
                self.run_one(call, entry, ids, runner)
                    .map(move |outcome| (index, outcome))
            })
            .collect();
        let mut served = FuturesUnordered::new();
        let mut outcomes: Vec<(usize, CallOutcome)> = Vec::with_capacity(left);
        let serving = runner.as_ref();
        let drive = async {
            match (&mut nested, serving) {
                (Some((_, rx)), Some(runner)) => {
                    while outcomes.len() < left {
                        // Biased, so that a seed fixes the interleaving (the
                        // simulator replays it): a call that ended is taken
                        // before a nested request, so a request whose parent
                        // ended finds its caller gone.
                        tokio::select! {
                            biased;
                            Some(done) = running.next() => outcomes.push(done),
                            Some(()) = served.next() => {}
                            Some(request) = rx.recv() => {
                                let serve: BoxFuture<'_, ()> = Box::pin(async move {
                                    self.env().serve_nested(runner, request).await;
                                });
                                served.push(serve);
                            }
                        }
                    }
                }
                _ => {
                    while let Some(done) = running.next().await {
                        outcomes.push(done);
                    }
                }
            }
        };
        // Cancellation first: a call that ends in the same poll as the
        // cancellation is answered as cancelled, like the rest.
        let cancelled = tokio::select! {
            biased;
            () = self.ctx.cancellation().cancelled() => true,
            () = drive => false,
        };
        // Drop what is left of the batch before reporting: a dropped call
        // gives back what it held (budget, gate, a reserved event slot),
        // and reporting may need it.
        drop(running);
        drop(served);
        for (index, done) in outcomes {
            if let Some(Slot::Run { outcome, .. }) = slots.get_mut(index) {
                *outcome = Some(done);
            }
        }
        if let Some((runner, rx)) = &mut nested {
            // Requests sent but never serviced: refused, with their events.
            while let Ok(request) = rx.try_recv() {
                runner.refuse_unserviced(request).await;
            }
        }
        if let Some(runner) = &runner {
            // Nested calls still in flight when the batch ends were left by
            // their parents (or the run was cancelled): each gets its end.
            runner.report_abandoned(runner.abandon_all()).await;
        }
        if cancelled {
            for slot in slots.iter_mut() {
                if let Slot::Run { call, outcome, .. } = slot {
                    outcome.get_or_insert_with(|| CallOutcome::cancelled(&call.name));
                }
            }
        }
        cancelled
    }

    /// Runs one model-issued call and writes its settled row as soon as it
    /// ends, so a crash later in the turn does not put a finished call in
    /// doubt.
    /// `ids` are its idempotency key's hash and its provider's id.
    fn run_one<'a>(
        &'a self,
        call: &'a ToolCall,
        entry: &'a RegisteredTool,
        ids: (Option<&'a str>, Option<&'a str>),
        runner: Option<&'a Arc<NestedRunner>>,
    ) -> impl std::future::Future<Output = CallOutcome> + 'a {
        let (args_hash, provider_id) = ids;
        let site = CallSite {
            parent_call_id: None,
            nested: runner,
            args_hash,
            provider_id,
            parent_span: None,
        };
        self.env().run_call(call, entry, site)
    }
}
