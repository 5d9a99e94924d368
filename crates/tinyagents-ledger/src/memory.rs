//! `MemoryLedger`: the ledger in the process's memory, for tests and for
//! hosts that do not need recovery. Nothing survives the process.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dashmap::DashMap;
use tinyagents_core::{CallId, RunId};

use crate::clock::{Clock, SharedClock, Timestamp, system_clock};
use crate::error::{LedgerError, LedgerResult};
use crate::ledger::{Checkpoint, CheckpointEntry, EffectLedger, PruneReport, RunState};
use crate::resolution::{InDoubt, Resolution, Resolve};
use crate::row::{DEFAULT_MAX_RESULT_BYTES, LedgerRow, Outcome, StartedRow, StoredResult};
use crate::rules::{self, Existing, ResolveWrite, Start};

/// The hasher of the ledger's maps.
type Fast = foldhash::fast::RandomState;

/// What the ledger holds for one run.
#[derive(Debug, Default)]
struct RunEntry {
    /// Rows in the order their calls first started.
    rows: Vec<LedgerRow>,
    /// Where each call's row sits in `rows`.
    index: HashMap<CallId, usize, Fast>,
    /// The base checkpoint and the entries appended to it.
    checkpoint: Option<Kept>,
    finished_at: Option<Timestamp>,
    /// When `begin_run` claimed the id.
    claimed_at: Option<Timestamp>,
}

/// A checkpoint as the memory ledger keeps it: its entries as bytes or as
/// values encoded when read.
#[derive(Debug)]
struct Kept {
    base: Checkpoint,
    appended: Vec<Appended>,
}

#[derive(Debug)]
enum Appended {
    Bytes(Vec<u8>),
    Unencoded(Arc<dyn CheckpointEntry>),
}

impl Kept {
    /// The checkpoint with every entry encoded.
    fn read(&self) -> LedgerResult<Checkpoint> {
        let appended = self
            .appended
            .iter()
            .map(|entry| match entry {
                Appended::Bytes(bytes) => Ok(bytes.clone()),
                Appended::Unencoded(entry) => entry.encode(),
            })
            .collect::<LedgerResult<Vec<_>>>()?;
        Ok(Checkpoint {
            appended,
            ..self.base.clone()
        })
    }

    /// Appends an entry at `version`, with the rules of every backend.
    fn append(
        &mut self,
        run: &RunId,
        version: u64,
        entry: Appended,
        now: Timestamp,
    ) -> LedgerResult<()> {
        rules::check_checkpoint(run, Some(self.base.version), version)?;
        self.appended.push(entry);
        self.base.version = version;
        self.base.saved_at = now;
        Ok(())
    }
}

impl RunEntry {
    /// Whether anything is recorded of the run (an entry may be empty: a
    /// lookup that found nothing can leave one behind).
    fn is_recorded(&self) -> bool {
        !self.rows.is_empty()
            || self.checkpoint.is_some()
            || self.finished_at.is_some()
            || self.claimed_at.is_some()
    }

    /// Whether a row of the run has an unknown effect.
    fn has_unresolved(&self) -> bool {
        self.rows.iter().any(LedgerRow::is_unresolved)
    }
}

/// An in-memory [`EffectLedger`]. Runs are sharded (a `DashMap` keyed by run
/// id), so concurrent runs do not contend.
#[derive(Debug)]
pub struct MemoryLedger {
    runs: DashMap<RunId, RunEntry, Fast>,
    clock: SharedClock,
    max_result_bytes: usize,
    refuse_started: AtomicBool,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLedger {
    /// An empty ledger on the wall clock, cutting results at
    /// [`DEFAULT_MAX_RESULT_BYTES`].
    pub fn new() -> Self {
        Self {
            runs: DashMap::default(),
            clock: system_clock(),
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            refuse_started: AtomicBool::new(false),
        }
    }

    /// Appends an entry to the run's checkpoint.
    fn append(&self, run: &RunId, version: u64, entry: Appended) -> LedgerResult<()> {
        let now = self.clock.now();
        let mut recorded = self.runs.get_mut(run);
        let Some(checkpoint) = recorded.as_mut().and_then(|r| r.checkpoint.as_mut()) else {
            return Err(LedgerError::NoCheckpoint { run: run.clone() });
        };
        checkpoint.append(run, version, entry, now)
    }

    /// Cuts stored results at `max_bytes`.
    #[must_use]
    pub fn with_max_result_bytes(mut self, max_bytes: usize) -> Self {
        self.max_result_bytes = max_bytes;
        self
    }

    /// Stamps rows from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// A fault for tests of the harness's [`LedgerFailure`] policy: while on,
    /// every `record_started` fails with a storage error and writes nothing.
    ///
    /// [`LedgerFailure`]: crate::LedgerFailure
    pub fn refuse_started(&self, on: bool) {
        self.refuse_started.store(on, Ordering::SeqCst);
    }
}

#[async_trait]
impl EffectLedger for MemoryLedger {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        if self.refuse_started.load(Ordering::SeqCst) {
            return Err(LedgerError::storage(
                "record_started",
                "refused by MemoryLedger::refuse_started (injected fault)",
            ));
        }
        let now = self.clock.now();
        let mut entry = self.runs.entry(row.run_id.clone()).or_default();
        let entry = &mut *entry;
        let at = entry.index.get(&row.call_id).copied();
        let existing = at.and_then(|at| entry.rows.get_mut(at));
        let start = rules::check_start(
            existing.as_deref().map(Existing::of).as_ref(),
            entry.finished_at.is_some(),
            &row,
        )?;
        match (start, existing) {
            (Start::Restart, Some(existing)) => existing.restart(now),
            (Start::Insert, None) => {
                entry.index.insert(row.call_id.clone(), entry.rows.len());
                entry.rows.push(LedgerRow::started(row, now));
            }
            // `check_start` restarts only an existing row and inserts only
            // when there is none.
            (Start::Restart, None) | (Start::Insert, Some(_)) => {
                return Err(LedgerError::storage(
                    "record_started",
                    "the row and the start rule disagree",
                ));
            }
        }
        Ok(())
    }

    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        let (status, result) = StoredResult::from_outcome(outcome, self.max_result_bytes);
        let now = self.clock.now();
        let mut entry = self.runs.get_mut(run);
        let row = entry.as_deref_mut().and_then(|entry| {
            let at = *entry.index.get(call)?;
            entry.rows.get_mut(at)
        });
        rules::check_settle(run, call, row.as_ref().map(|row| row.status))?;
        if let Some(row) = row {
            row.status = status;
            row.settled_at = Some(now);
            row.result = Some(result);
        }
        Ok(())
    }

    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        Ok(self.runs.get(run).map_or_else(Vec::new, |entry| {
            entry
                .rows
                .iter()
                .filter(|row| row.is_unresolved())
                .cloned()
                .collect()
        }))
    }

    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        let now = self.clock.now();
        let mut listed: Vec<InDoubt> = self
            .runs
            .iter()
            .flat_map(|entry| {
                let finished = entry.finished_at.is_some();
                entry
                    .rows
                    .iter()
                    .filter(|row| row.is_unresolved())
                    .map(|row| InDoubt::of(row.clone(), now, finished))
                    .collect::<Vec<_>>()
            })
            .collect();
        listed.sort_by(|a, b| {
            (a.row.started_at, &a.row.run_id, &a.row.call_id).cmp(&(
                b.row.started_at,
                &b.row.run_id,
                &b.row.call_id,
            ))
        });
        Ok(listed)
    }

    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        let now = self.clock.now();
        let mut entry = self.runs.get_mut(run);
        let row = entry.as_deref_mut().and_then(|entry| {
            let at = *entry.index.get(call)?;
            entry.rows.get_mut(at)
        });
        let write =
            rules::check_resolve(run, call, row.as_deref(), resolve, self.max_result_bytes)?;
        if let Some(row) = row {
            if let ResolveWrite::Settle { status, result } = write {
                row.status = status;
                row.settled_at = Some(now);
                row.result = Some(result);
            }
            row.resolution = Some(Resolution {
                effect: resolve.found.effect(),
                by: resolve.by.clone(),
                at: now,
                note: resolve.note.clone(),
            });
        }
        Ok(())
    }

    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        Ok(self.runs.get(run).and_then(|entry| {
            let at = *entry.index.get(call)?;
            entry.rows.get(at).cloned()
        }))
    }

    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        Ok(self
            .runs
            .get(run)
            .map_or_else(Vec::new, |entry| entry.rows.clone()))
    }

    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        let mut runs: Vec<RunId> = self
            .runs
            .iter()
            .filter(|entry| {
                (entry.finished_at.is_none()
                    && (!entry.rows.is_empty() || entry.checkpoint.is_some()))
                    || entry.has_unresolved()
            })
            .map(|entry| entry.key().clone())
            .collect();
        runs.sort();
        Ok(runs)
    }

    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        let now = self.clock.now();
        // The shard's lock is held from the check to the claim.
        let mut entry = self.runs.entry(run.clone()).or_default();
        if entry.is_recorded() {
            return Err(LedgerError::RunExists { run: run.clone() });
        }
        entry.claimed_at = Some(now);
        Ok(())
    }

    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        Ok(match self.runs.get(run) {
            Some(entry) if entry.finished_at.is_some() => RunState::Finished,
            Some(entry) if entry.is_recorded() => RunState::Open,
            _ => RunState::Unknown,
        })
    }

    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        let now = self.clock.now();
        let mut entry = self.runs.entry(run.clone()).or_default();
        rules::check_checkpoint(
            run,
            entry.checkpoint.as_ref().map(|c| c.base.version),
            version,
        )?;
        entry.checkpoint = Some(Kept {
            base: Checkpoint {
                run_id: run.clone(),
                version,
                data,
                appended: Vec::new(),
                saved_at: now,
            },
            appended: Vec::new(),
        });
        Ok(())
    }

    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.append(run, version, Appended::Bytes(entry))
    }

    fn keeps_entries_unencoded(&self) -> bool {
        true
    }

    async fn append_checkpoint_entry(
        &self,
        run: &RunId,
        version: u64,
        entry: Arc<dyn CheckpointEntry>,
    ) -> LedgerResult<()> {
        self.append(run, version, Appended::Unencoded(entry))
    }

    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        let Some(entry) = self.runs.get(run) else {
            return Ok(None);
        };
        entry.checkpoint.as_ref().map(Kept::read).transpose()
    }

    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        let now = self.clock.now();
        let mut entry = self.runs.entry(run.clone()).or_default();
        entry.finished_at.get_or_insert(now);
        Ok(())
    }

    async fn prune_finished(&self, finished_before: Timestamp) -> LedgerResult<PruneReport> {
        let mut report = PruneReport::default();
        self.runs.retain(|_, entry| {
            let due = entry.finished_at.is_some_and(|at| at <= finished_before);
            let prune = due && !entry.has_unresolved();
            report.kept_unresolved += u64::from(due && !prune);
            if prune {
                report.runs += 1;
                report.rows += u64::try_from(entry.rows.len()).unwrap_or(u64::MAX);
                report.checkpoints += u64::from(entry.checkpoint.is_some());
            }
            !prune
        });
        Ok(report)
    }

    async fn flush(&self) -> LedgerResult<()> {
        Ok(())
    }

    fn max_result_bytes(&self) -> usize {
        self.max_result_bytes
    }
}
