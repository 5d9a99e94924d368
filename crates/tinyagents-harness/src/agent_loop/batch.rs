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

/// An admitted call of a turn: its slot, the call, its tool and its
/// idempotency key's hash (when a ledger recorded its start).
type Runnable<'a> = (usize, &'a ToolCall, &'a RegisteredTool, Option<&'a str>);

/// What finished in a batch: a call of the batch, or a nested call.
enum Done {
    Call(usize, CallOutcome),
    Nested,
}

impl Run<'_> {
    /// Runs the admitted calls of a turn. The result has one entry per slot;
    /// `None` for slots that are not admitted calls, and for admitted calls
    /// that never started because the run was cancelled.
    pub(crate) async fn execute_turn(&self, slots: &[Slot<'_>]) -> Vec<Option<CallOutcome>> {
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
        let mut nested = (self.ctx.limits.max_nested_depth() > 0).then(|| {
            NestedRunner::new(self.events.clone(), self.ctx.cancellation().clone())
        });
        let harness = self.harness;
        let mut start = 0;
        while start < runnable.len() && !self.ctx.is_cancelled() {
            let mut end = start + 1;
            if harness.runs_shared(runnable[start].2) {
                while end < runnable.len() && harness.runs_shared(runnable[end].2) {
                    end += 1;
                }
            }
            let batch = &runnable[start..end];
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
        batch: &[Runnable<'_>],
        outcomes: &mut [Option<CallOutcome>],
        nested: Option<(
            &Arc<NestedRunner>,
            &mut mpsc::UnboundedReceiver<NestedRequest>,
        )>,
    ) -> bool {
        for (_, call, _, _) in batch {
            self.events.started(call).await;
        }
        let mut nested = nested;
        let runner = nested.as_ref().map(|(runner, _)| Arc::clone(runner));
        let mut running: FuturesUnordered<BoxFuture<'_, Done>> = batch
            .iter()
            .map(|&(index, call, entry, args_hash)| {
                let runner = runner.as_ref();
                let future: BoxFuture<'_, Done> = Box::pin(async move {
                    let site = CallSite {
                        parent_call_id: None,
                        nested: runner,
                        args_hash,
                    };
                    let outcome = self.execute_call(call.clone(), entry, site).await;
                    // Settled in the ledger as soon as it ends, so a crash
                    // later in the turn does not put a finished call in doubt.
                    self.harness
                        .record(&self.ctx, &self.events, &call.id, &outcome)
                        .await;
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
            for &(index, call, _, _) in batch {
                outcomes[index].get_or_insert_with(|| CallOutcome::cancelled(&call.name));
            }
        }
        cancelled
    }
}
