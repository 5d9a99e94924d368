//! The effect ledger in the loop: a run's claim, a turn's started rows
//! written together, answers from settled rows, and the run's finished
//! mark. Checkpoints are in `checkpoint.rs`, recovery in
//! `recover.rs`, calls in doubt in `reconcile.rs`.

use tinyagents_core::{RunId, TinyAgentsError, ToolCall, ToolResult};
use tinyagents_ledger::{LedgerError, LedgerFailure};

use super::Run;
use super::turn::Slot;
use crate::call::{Start, StartOf, call_hash, guarded};
use crate::harness::AgentHarness;

impl<'h> Run<'h> {
    /// Writes the started rows of a turn's admitted calls together, as
    /// admission decided them (`Admitted::args_hash`, `Admitted::replay`),
    /// so a durable backend commits them at once, and turns each call the
    /// ledger answers otherwise into its answer: recorded, or refused.
    pub(crate) async fn start_rows(&self, slots: &mut [Slot<'h>]) {
        let harness = self.harness;
        if harness.calls.ledger.is_none() {
            return;
        }
        let redaction = self.events.redaction();
        for slot in slots.iter_mut() {
            // Admission hashes every call it admits with a ledger; a call
            // without one is hashed here rather than run without its row.
            if let Slot::Run {
                call,
                args_hash: hash @ None,
                ..
            } = slot
            {
                *hash = Some(call_hash(redaction, &call.arguments));
            }
        }
        let first = slots.iter().position(|slot| slot.start_of().is_some());
        let alone = first.filter(|&at| slots[at + 1..].iter().all(|s| s.start_of().is_none()));
        if let Some(at) = alone {
            // The common turn, one call: its row written directly.
            let Some((call, entry, hash, replay)) = slots[at].start_of() else {
                return;
            };
            let start = harness
                .calls
                .start_row(&self.ctx, &self.events, call, entry, hash, replay)
                .await;
            self.apply_start(&mut slots[at], start).await;
            return;
        }
        let group: Vec<StartOf<'_>> = slots.iter().filter_map(Slot::start_of).collect();
        let starts = harness
            .calls
            .start_group(&self.ctx, &self.events, &group)
            .await;
        drop(group);
        let mut starts = starts.into_iter();
        for slot in slots.iter_mut() {
            if slot.start_of().is_none() {
                continue;
            }
            let Some(start) = starts.next() else {
                break;
            };
            self.apply_start(slot, start).await;
        }
    }

    /// What the ledger's answer to a call's start makes of its slot: it
    /// runs, or it is answered without running (recorded, or refused) and
    /// its call moves out of the slot into the answer.
    async fn apply_start(&self, slot: &mut Slot<'h>, start: Start) {
        let answer = match start {
            Start::Run => return,
            Start::Recorded(result) => Ok(result),
            Start::Refused(text) => Err(text),
        };
        if !matches!(slot, Slot::Run { .. }) {
            return;
        }
        let Slot::Run { call, .. } = std::mem::replace(slot, Slot::Vacant) else {
            return;
        };
        *slot = match answer {
            Ok(result) => Slot::Recorded { call, result },
            Err(text) => {
                let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
                self.refused_slot(call, &refusal).await
            }
        };
    }
}

impl Run<'_> {
    /// The recorded result of `call` when the ledger holds a settled row of
    /// the same call (tool and prepared arguments).
    pub(crate) async fn settled_answer(&self, call: &ToolCall) -> Option<ToolResult> {
        let ledger = self.harness.calls.ledger.as_ref()?;
        let row = guarded("get", ledger.get(&self.ctx.run_id, &call.id))
            .await
            .ok()??;
        let hash = call_hash(self.events.redaction(), &call.arguments);
        (row.status.is_settled() && row.tool_name == call.name && row.args_hash == hash)
            .then(|| row.result.map(|stored| stored.to_tool_result()))
            .flatten()
    }
}

impl Run<'_> {
    /// In a recovery, the decision a call that would wait for a person
    /// already has: an approval, when its started row (same tool and
    /// arguments, in doubt) shows it was admitted before the crash, so its
    /// admission goes on to its tool's reconciliation and is not asked
    /// again; else the decision a person made before the crash
    /// (`ResumeOptions::decisions`) on this call of this run.
    pub(crate) async fn earlier_decision(
        &self,
        pending: &crate::run::PendingCall,
    ) -> Option<crate::run::ApprovalDecision> {
        let decided = self.decided.as_ref()?;
        let call = &pending.call;
        if let Some(ledger) = &self.harness.calls.ledger
            && let Ok(Some(row)) = guarded("get", ledger.get(&self.ctx.run_id, &call.id)).await
            && row.is_in_doubt()
            && row.tool_name == call.name
            && row.args_hash == call_hash(self.events.redaction(), &call.arguments)
        {
            return Some(pending.approve());
        }
        decided
            .iter()
            .find(|d| d.run_id == self.ctx.run_id && d.call_id == call.id)
            .cloned()
    }
}

impl AgentHarness {
    /// Claims a new run's id in the ledger: an id the ledger already holds
    /// (another run's, finished or not) is refused, so a new run is never
    /// answered from an old run's rows. A ledger that cannot answer refuses
    /// the run under `LedgerFailure::Abort`.
    pub(crate) async fn claim_run(&self, run_id: &RunId) -> Result<(), TinyAgentsError> {
        let Some(ledger) = &self.calls.ledger else {
            return Ok(());
        };
        match guarded("begin_run", ledger.begin_run(run_id)).await {
            Ok(()) => Ok(()),
            Err(exists @ LedgerError::RunExists { .. }) => Err(TinyAgentsError::Ledger {
                source: exists.into(),
            }),
            Err(failure) => match self.calls.ledger_failure {
                LedgerFailure::Abort => Err(TinyAgentsError::LedgerClaim {
                    run: run_id.clone(),
                    source: failure.into(),
                }),
                LedgerFailure::Continue => Ok(()),
            },
        }
    }
}

impl<'h> Run<'h> {
    /// Marks a run finished in the ledger, so retention may prune it.
    pub(crate) async fn finish_in_ledger(&self) {
        let Some(ledger) = &self.harness.calls.ledger else {
            return;
        };
        let run_id = &self.ctx.run_id;
        let finished = match guarded("mark_run_finished", ledger.mark_run_finished(run_id)).await {
            // Settled rows ride on commits; make the run's last ones durable.
            Ok(()) => guarded("flush", ledger.flush()).await,
            Err(error) => Err(error),
        };
        if let Err(error) = finished {
            self.sink()
                .warn(|| format!("run {run_id} not marked finished: {error}"))
                .await;
        }
    }

    /// Makes every ledger write of the run so far durable (a suspension's
    /// checkpoint); a failure is a warning.
    pub(crate) async fn flush_ledger(&self) {
        let Some(ledger) = &self.harness.calls.ledger else {
            return;
        };
        if let Err(error) = guarded("flush", ledger.flush()).await {
            self.sink()
                .warn(|| format!("the effect ledger could not be flushed: {error}"))
                .await;
        }
    }
}
