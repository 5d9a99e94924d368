//! Execution of a turn's admitted calls: consecutive concurrency-safe calls
//! run together, polled by the loop's own task (so it can service their
//! nested calls while borrowing the run); any other call runs alone.
//! Cancellation stops the batch.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tinyagents_core::ToolCall;
use tinytools::RegisteredTool;
use tokio::sync::mpsc;

use super::Run;
use super::nested::{NestedRequest, NestedRunner};
use super::turn::Slot;
use crate::call::{CallOutcome, CallSite};

/// An admitted call of a turn: its slot, the call (the slot's, lent so
/// its arguments can be moved into the execution), its tool and its
/// idempotency key's hash (when a ledger recorded its start).
type Runnable<'a> = (usize, &'a mut ToolCall, &'a RegisteredTool, Option<&'a str>);

/// A call of a batch as it runs: its slot, the call, its tool, its hash.
type Work<'a> = (usize, ToolCall, &'a RegisteredTool, Option<&'a str>);

/// What finished in a batch: a call of the batch, or a nested call.
enum Done {
    Call(usize, CallOutcome),
    Nested,
}

impl Run<'_> {
    /// Runs the admitted calls of a turn. The result has one entry per slot;
    /// `None` for slots that are not admitted calls, and for admitted calls
    /// that never started because the run was cancelled.
    pub(crate) async fn execute_turn(&self, slots: &mut [Slot<'_>]) -> Vec<Option<CallOutcome>> {
        let mut outcomes: Vec<Option<CallOutcome>> = slots.iter().map(|_| None).collect();
        let mut runnable: Vec<Runnable<'_>> = slots
            .iter_mut()
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
        let mut nested = (self.ctx.limits.max_nested_depth() > 0)
            .then(|| NestedRunner::new(self.events.clone(), self.ctx.cancellation().clone()));
        let harness = self.harness;
        let mut start = 0;
        while start < runnable.len() && !self.ctx.is_cancelled() {
            let mut end = start + 1;
            if harness.runs_shared(runnable[start].2) {
                while end < runnable.len() && harness.runs_shared(runnable[end].2) {
                    end += 1;
                }
            }
            let batch = &mut runnable[start..end];
            let channel = nested.as_mut().map(|(runner, rx)| (&*runner, rx));
            if self.run_batch(batch, &mut outcomes, channel).await {
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
        batch: &mut [Runnable<'_>],
        outcomes: &mut [Option<CallOutcome>],
        nested: Option<(
            &Arc<NestedRunner>,
            &mut mpsc::UnboundedReceiver<NestedRequest>,
        )>,
    ) -> bool {
        for (_, call, _, _) in batch.iter() {
            self.events.started(call).await;
        }
        // What each call runs with. The fold needs a call's arguments only
        // for `after_tool`, so without middlewares they move into the tool.
        let keep_arguments = !self.harness.middlewares.is_empty();
        let mut work: Vec<Work<'_>> = batch
            .iter_mut()
            .map(|(index, call, entry, args_hash)| {
                let runs = if keep_arguments {
                    (**call).clone()
                } else {
                    ToolCall {
                        id: call.id.clone(),
                        provider_id: None,
                        name: call.name.clone(),
                        arguments: std::mem::take(&mut call.arguments),
                        raw_arguments: None,
                    }
                };
                (*index, runs, *entry, *args_hash)
            })
            .collect();
        let Some((runner, rx)) = nested else {
            if let [_] = work.as_slice()
                && let Some((index, call, entry, args_hash)) = work.pop()
            {
                // One call and no nested calls to service: run it in place.
                let run = self.run_one(call, entry, args_hash, None);
                let cancelled = tokio::select! {
                    biased;
                    () = self.ctx.cancellation().cancelled() => true,
                    outcome = run => {
                        outcomes[index] = Some(outcome);
                        false
                    }
                };
                if cancelled {
                    outcomes[index] = Some(CallOutcome::cancelled(&batch[0].1.name));
                }
                return cancelled;
            }
            return self.run_together(batch, work, outcomes, None).await;
        };
        self.run_together(batch, work, outcomes, Some((runner, rx)))
            .await
    }

    /// Runs a batch's calls together in one `FuturesUnordered`, with the
    /// nested requests their tools make.
    async fn run_together(
        &self,
        batch: &[Runnable<'_>],
        work: Vec<Work<'_>>,
        outcomes: &mut [Option<CallOutcome>],
        nested: Option<(
            &Arc<NestedRunner>,
            &mut mpsc::UnboundedReceiver<NestedRequest>,
        )>,
    ) -> bool {
        let mut nested = nested;
        let runner = nested.as_ref().map(|(runner, _)| Arc::clone(runner));
        let mut running: FuturesUnordered<BoxFuture<'_, Done>> = work
            .into_iter()
            .map(|(index, call, entry, args_hash)| {
                let runner = runner.as_ref();
                let future: BoxFuture<'_, Done> = Box::pin(async move {
                    let outcome = self.run_one(call, entry, args_hash, runner).await;
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
                                    self.serve_nested(runner, request).await;
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
            () = self.ctx.cancellation().cancelled() => true,
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
            runner.report_abandoned(runner.abandon_all()).await;
        }
        if cancelled {
            for (index, call, _, _) in batch {
                outcomes[*index].get_or_insert_with(|| CallOutcome::cancelled(&call.name));
            }
        }
        cancelled
    }

    /// Runs one model-issued call and writes its settled row as soon as it
    /// ends, so a crash later in the turn does not put a finished call in
    /// doubt.
    async fn run_one(
        &self,
        call: ToolCall,
        entry: &RegisteredTool,
        args_hash: Option<&str>,
        runner: Option<&Arc<NestedRunner>>,
    ) -> CallOutcome {
        let id = call.id.clone();
        let site = CallSite {
            parent_call_id: None,
            nested: runner,
            args_hash,
        };
        let outcome = self.execute_call(call, entry, site).await;
        self.harness
            .record(&self.ctx, &self.events, &id, &outcome)
            .await;
        outcome
    }
}
