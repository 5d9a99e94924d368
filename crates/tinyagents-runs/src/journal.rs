//! A run's journal: the events its segments emitted, kept in the run store
//! so that another process (a console, `show`) can draw the run's model
//! turns, its calls with their timings, refusals and payloads, while it
//! runs and after it ended.
//!
//! The journal is a view, not a record that decides anything: what each
//! call did is the effect ledger's, what may run is the sealed state's and
//! the decisions'. It holds what the events held, so the payload capture
//! and redaction of the run that emitted them decide what it shows:
//! arguments and results are in it only when that run captured them.
//! Streamed text deltas are left out (a turn's text is on its
//! `ModelCompleted` when captured). A holder writes under its claim's
//! epoch: a holder that lost the run adds nothing.

use std::time::Duration;

use tinyagents_core::{AgentEvent, RunId};
use tinyagents_harness::RunHandle;
use tinyagents_ledger::Timestamp;

use crate::error::RunStoreResult;
use crate::store::SharedRunStore;

/// One event of a run's journal.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// Its place in the store's journal (rising, not dense per run).
    pub seq: u64,
    /// When the holder saw it.
    pub at: Timestamp,
    /// The event, or why the stored text is not one (an edit, a newer
    /// writer): an unreadable entry is shown as such, never dropped.
    pub event: Result<AgentEvent, String>,
}

/// An event to append, with when it was seen.
pub type NewJournalEvent = (Timestamp, AgentEvent);

/// Whether `event` is kept in a journal: all but streamed deltas, at any
/// depth of delegation.
pub fn journaled(event: &AgentEvent) -> bool {
    match event {
        AgentEvent::ModelDelta { .. } => false,
        AgentEvent::Delegated { event, .. } => journaled(event),
        _ => true,
    }
}

/// The events one held segment emits, on their way to the store: taken in
/// as they come, written in batches ([`flush`](Self::flush)).
#[derive(Debug)]
pub struct Journal {
    store: SharedRunStore,
    run: RunId,
    epoch: u64,
    pending: Vec<NewJournalEvent>,
    lost: bool,
}

impl Journal {
    /// The journal of `run`, written under `epoch`.
    pub fn new(store: SharedRunStore, run: RunId, epoch: u64) -> Self {
        Self {
            store,
            run,
            epoch,
            pending: Vec::new(),
            lost: false,
        }
    }

    /// Takes in `event` (kept if [`journaled`]), stamped now.
    pub fn record(&mut self, event: &AgentEvent) {
        if !self.lost && journaled(event) {
            self.pending.push((Timestamp::now(), event.clone()));
        }
    }

    /// Writes what was taken in. After an error the batch is dropped (the
    /// journal is a view: the run goes on) and the error returned; once
    /// another claim took the run, nothing more is kept.
    pub async fn flush(&mut self) -> RunStoreResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.pending);
        let held = self
            .store
            .append_journal(&self.run, self.epoch, &batch)
            .await?;
        self.lost = !held;
        Ok(())
    }
}

/// How often a driven run's journal is written.
pub const JOURNAL_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Waits for `handle`'s run, its events journaled (written every
/// [`JOURNAL_FLUSH_EVERY`] and at the end) and each passed to `each`.
/// A journal that cannot be written is reported to `each_error` and the
/// run goes on.
pub async fn drive_journaled<E: From<tinyagents_core::TinyAgentsError>>(
    handle: &mut RunHandle<'_, E>,
    journal: &mut Journal,
    mut each_error: impl FnMut(&crate::RunStoreError),
) -> Result<tinyagents_harness::AgentRun, E> {
    let mut tick = tokio::time::interval(JOURNAL_FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            event = handle.next_event() => match event {
                Some(event) => journal.record(&event),
                None => break,
            },
            _ = tick.tick() => {
                if let Err(error) = journal.flush().await {
                    each_error(&error);
                }
            }
        }
    }
    if let Err(error) = journal.flush().await {
        each_error(&error);
    }
    handle.wait().await
}
