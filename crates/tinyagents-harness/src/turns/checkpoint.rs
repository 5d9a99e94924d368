//! Checkpoints in the effect ledger, written incrementally: the first
//! checkpoint of a run segment is a base (the whole [`SuspendedRun`]), and
//! each later turn appends only what it added: the new messages, serialised
//! from the transcript itself (never a copy of it), and the run's small
//! counters. A compaction writes a new base when the entries appended since
//! the last one outweigh it [`COMPACT_AFTER`] times, so the bytes written
//! per turn stay bounded by what the turn added (amortised, about
//! `1 + 1 / COMPACT_AFTER` times over), whatever the run's length, and a
//! stored checkpoint holds at most `1 + COMPACT_AFTER` times the state.
//!
//! A new base is also written when the transcript no longer extends what was
//! persisted: it is shorter, or its last persisted message changed (a hook
//! rewrote it). A hook that edits a message in the middle of the transcript
//! and leaves its length and its last message alone is not seen until the
//! next base; docs/effect-ledger.md states that limit.
//!
//! Reading back applies the entries to the base in order. Each entry names
//! the length of the transcript it extends, so a chain that lost an entry
//! is refused as inconsistent instead of read back wrong.

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{BudgetCounts, CallId, Message, RunId, State, TinyAgentsError, Usage};
use tinyagents_ledger::{Checkpoint, CheckpointEntry, EffectLedger, LedgerError, LedgerResult};

use super::Run;
use crate::call::{guarded, state_error};
use crate::harness::AgentHarness;
use crate::run::{SUSPENDED_RUN_FORMAT, SuspendedRun};

/// How many times the entries since a base may outweigh it before the
/// next checkpoint compacts them into a new base. Every message is written
/// once in an entry and again in each later base, so a larger factor
/// writes less per turn and keeps more to read back.
const COMPACT_AFTER: usize = 3;

/// What the run segment has persisted of its checkpoint.
pub(crate) struct CheckpointCursor {
    /// The transcript's length at the last checkpoint.
    persisted: usize,
    /// The last persisted message, to see a rewritten transcript: a copy,
    /// or the last unencoded entry, which holds it.
    last: Option<Message>,
    last_entry: Option<Arc<UnencodedEntry>>,
    /// The properties and depth the base holds (entries do not carry them).
    properties: Arc<Map<String, Value>>,
    depth: u32,
    /// Bytes of the base, and of the entries appended since.
    base_bytes: usize,
    appended_bytes: usize,
    /// The size of the last entry, to size the next one's buffer.
    last_entry_bytes: usize,
}

/// The base: a [`SuspendedRun`] with no suspended turn, serialised from
/// borrows (the same fields, so it reads back as one).
#[derive(Serialize)]
struct BaseRef<'a> {
    format: u32,
    run_id: &'a RunId,
    state: &'a State,
    turn: [(); 0],
    budget: BudgetCounts,
    active_ms: u64,
    properties: &'a Map<String, Value>,
    depth: u32,
    #[serde(skip_serializing_if = "<[CallId]>::is_empty")]
    replay_blocked: &'a [CallId],
}

/// One appended entry: the messages a turn added after the first `from`,
/// and the run's counters as they are now.
#[derive(Debug, Serialize, Deserialize)]
struct Entry<'a> {
    from: usize,
    messages: Cow<'a, [Message]>,
    turn: u32,
    calls_issued: u64,
    usage: Usage,
    #[serde(default, skip_serializing_if = "no_values")]
    values: Cow<'a, Map<String, Value>>,
    budget: BudgetCounts,
    active_ms: u64,
    #[serde(default, skip_serializing_if = "no_calls")]
    replay_blocked: Cow<'a, [CallId]>,
}

/// An entry handed to a ledger that keeps entries unencoded (in memory):
/// it owns its copy of the turn's messages, and is encoded, to the bytes
/// the encoded path appends, only when the checkpoint is read.
#[derive(Debug)]
struct UnencodedEntry(Entry<'static>);

impl CheckpointEntry for UnencodedEntry {
    fn encode(&self) -> LedgerResult<Vec<u8>> {
        serde_json::to_vec(&self.0).map_err(|e| LedgerError::Storage {
            operation: "encode_checkpoint",
            detail: e.to_string(),
            source: Some(e.into()),
        })
    }
}

impl Entry<'_> {
    /// The entry with its own copies of what it borrowed.
    fn into_owned(self) -> Entry<'static> {
        Entry {
            from: self.from,
            messages: Cow::Owned(self.messages.into_owned()),
            turn: self.turn,
            calls_issued: self.calls_issued,
            usage: self.usage,
            values: Cow::Owned(self.values.into_owned()),
            budget: self.budget,
            active_ms: self.active_ms,
            replay_blocked: Cow::Owned(self.replay_blocked.into_owned()),
        }
    }
}

fn no_values(values: &Map<String, Value>) -> bool {
    values.is_empty()
}

fn no_calls(calls: &[CallId]) -> bool {
    calls.is_empty()
}

impl<'h> Run<'h> {
    /// Checkpoints the run at a turn boundary: the transcript up to the
    /// model's calls of this turn, the budget, the active time. Losing one
    /// to a crash means recovery starts from the turn before. A failure is
    /// a warning, and the next checkpoint writes a whole base.
    pub(crate) async fn checkpoint(&mut self, replay_blocked: &[CallId]) {
        let harness = self.harness;
        let Some(ledger) = &harness.calls.ledger else {
            return;
        };
        let version = u64::from(self.state.turn);
        if ledger.keeps_entries_unencoded()
            && let Some(entry) = self.unencoded_entry(replay_blocked)
        {
            let entry = Arc::new(entry);
            let shared: Arc<dyn CheckpointEntry> = Arc::clone(&entry) as _;
            let appended = guarded(
                "append_checkpoint_entry",
                ledger.append_checkpoint_entry(&self.ctx.run_id, version, shared),
            )
            .await;
            return match appended {
                Ok(()) => self.advance_unencoded(entry),
                Err(error) => self.checkpoint_failed(error.to_string()).await,
            };
        }
        let written = match self.next_entry(replay_blocked) {
            Some(Ok(entry)) => {
                let bytes = entry.len();
                let appended = guarded(
                    "append_checkpoint",
                    ledger.append_checkpoint(&self.ctx.run_id, version, entry),
                )
                .await;
                appended
                    .map(|()| self.advance(bytes))
                    .map_err(|e| e.to_string())
            }
            Some(Err(error)) => Err(error),
            None => match self.base_bytes(replay_blocked) {
                Ok(base) => {
                    let bytes = base.len();
                    let saved = guarded(
                        "save_checkpoint",
                        ledger.save_checkpoint(&self.ctx.run_id, version, base),
                    )
                    .await;
                    saved
                        .map(|()| self.rebase(bytes))
                        .map_err(|e| e.to_string())
                }
                Err(error) => Err(error.to_string()),
            },
        };
        if let Err(error) = written {
            self.checkpoint_failed(error).await;
        }
    }

    /// A checkpoint was not written: warned, and the next one is a base.
    async fn checkpoint_failed(&mut self, error: String) {
        // The stored chain may now miss what this turn added.
        self.cursor = None;
        let turn = self.state.turn;
        self.sink()
            .warn(|| format!("checkpoint of turn {turn} not written: {error}"))
            .await;
    }

    /// The entry this turn appends, or `None` when it must write a base:
    /// the first checkpoint of the segment, a transcript that no longer
    /// extends the persisted one, changed properties or depth, or entries
    /// that would outweigh the base.
    fn next_entry(&self, replay_blocked: &[CallId]) -> Option<Result<Vec<u8>, String>> {
        let cursor = self.extending_cursor()?;
        let entry = self.entry(cursor, replay_blocked);
        let mut bytes = Vec::with_capacity(cursor.last_entry_bytes.next_power_of_two());
        if let Err(error) = serde_json::to_writer(&mut bytes, &entry) {
            return Some(Err(error.to_string()));
        }
        // Compaction: a base once the entries would outweigh it enough.
        (cursor.appended_bytes + bytes.len() <= cursor.base_bytes.saturating_mul(COMPACT_AFTER))
            .then_some(Ok(bytes))
    }

    /// The cursor, when this turn's checkpoint may be an entry after it:
    /// the segment wrote a base, and the transcript still extends what was
    /// persisted, with the same properties and depth.
    fn extending_cursor(&self) -> Option<&CheckpointCursor> {
        let cursor = self.cursor.as_ref()?;
        let persisted_last = match &cursor.last_entry {
            Some(entry) => entry.0.messages.last(),
            None => cursor.last.as_ref(),
        };
        let extends = self
            .state
            .messages
            .get(..cursor.persisted)
            .is_some_and(|kept| kept.last() == persisted_last);
        (extends
            && Arc::ptr_eq(&cursor.properties, &self.ctx.properties)
            && cursor.depth == self.ctx.depth)
            .then_some(cursor)
    }

    /// This turn's entry for a ledger that keeps entries unencoded: the
    /// turn's messages copied, nothing serialised. No compaction: the
    /// entries hold each message once.
    fn unencoded_entry(&self, replay_blocked: &[CallId]) -> Option<UnencodedEntry> {
        let cursor = self.extending_cursor()?;
        Some(UnencodedEntry(
            self.entry(cursor, replay_blocked).into_owned(),
        ))
    }

    /// The entry this turn appends after `cursor`: the messages added since,
    /// borrowed from the transcript, and the run's counters as they are now.
    fn entry<'a>(&'a self, cursor: &CheckpointCursor, replay_blocked: &'a [CallId]) -> Entry<'a> {
        Entry {
            from: cursor.persisted,
            messages: Cow::Borrowed(&self.state.messages[cursor.persisted..]),
            turn: self.state.turn,
            calls_issued: self.state.calls_issued,
            usage: self.state.usage,
            values: Cow::Borrowed(&self.state.values),
            budget: self.ctx.budget(),
            active_ms: self.active_ms(),
            replay_blocked: Cow::Borrowed(replay_blocked),
        }
    }

    /// An unencoded entry was appended.
    fn advance_unencoded(&mut self, entry: Arc<UnencodedEntry>) {
        if let Some(cursor) = &mut self.cursor {
            cursor.persisted = self.state.messages.len();
            if !entry.0.messages.is_empty() {
                cursor.last = None;
                cursor.last_entry = Some(entry);
            }
        }
    }

    /// The whole checkpoint, serialised from the run's own fields.
    fn base_bytes(&self, replay_blocked: &[CallId]) -> serde_json::Result<Vec<u8>> {
        // About the size of the checkpoint it replaces.
        let size = self
            .cursor
            .as_ref()
            .map_or(0, |c| c.base_bytes + c.appended_bytes);
        let mut bytes = Vec::with_capacity(size);
        serde_json::to_writer(
            &mut bytes,
            &BaseRef {
                format: SUSPENDED_RUN_FORMAT,
                run_id: &self.ctx.run_id,
                state: &self.state,
                turn: [],
                budget: self.ctx.budget(),
                active_ms: self.active_ms(),
                properties: &self.ctx.properties,
                depth: self.ctx.depth,
                replay_blocked,
            },
        )?;
        Ok(bytes)
    }

    fn active_ms(&self) -> u64 {
        u64::try_from(self.ctx.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A base of `bytes` was written.
    fn rebase(&mut self, bytes: usize) {
        self.cursor = Some(CheckpointCursor {
            persisted: self.state.messages.len(),
            last: self.state.messages.last().cloned(),
            last_entry: None,
            properties: Arc::clone(&self.ctx.properties),
            depth: self.ctx.depth,
            base_bytes: bytes,
            appended_bytes: 0,
            last_entry_bytes: 0,
        });
    }

    /// An entry of `bytes` was appended.
    fn advance(&mut self, bytes: usize) {
        let messages = &self.state.messages;
        if let Some(cursor) = &mut self.cursor {
            if cursor.persisted != messages.len() {
                cursor.persisted = messages.len();
                cursor.last = messages.last().cloned();
                cursor.last_entry = None;
            }
            cursor.appended_bytes += bytes;
            cursor.last_entry_bytes = bytes;
        }
    }
}

impl AgentHarness {
    /// The run's last checkpoint, read back: the base with every appended
    /// entry applied.
    pub(crate) async fn load_saved(
        &self,
        ledger: &dyn EffectLedger,
        run_id: &RunId,
    ) -> Result<Option<SuspendedRun>, TinyAgentsError> {
        let Some(checkpoint) = guarded("load_checkpoint", ledger.load_checkpoint(run_id))
            .await
            .map_err(state_error)?
        else {
            return Ok(None);
        };
        read_checkpoint(run_id, &checkpoint).map(Some)
    }
}

/// A stored checkpoint as the state it describes.
pub(crate) fn read_checkpoint(
    run_id: &RunId,
    checkpoint: &Checkpoint,
) -> Result<SuspendedRun, TinyAgentsError> {
    let unreadable =
        |what: String| TinyAgentsError::State(format!("checkpoint of run {run_id} {what}"));
    let mut saved: SuspendedRun = serde_json::from_slice(&checkpoint.data).map_err(|e| {
        TinyAgentsError::CheckpointUnreadable {
            run: run_id.clone(),
            entry: None,
            source: e.into(),
        }
    })?;
    saved.check_format()?;
    for (n, bytes) in checkpoint.appended.iter().enumerate() {
        let entry: Entry<'_> =
            serde_json::from_slice(bytes).map_err(|e| TinyAgentsError::CheckpointUnreadable {
                run: run_id.clone(),
                entry: Some(n + 1),
                source: e.into(),
            })?;
        let held = saved.state.messages.len();
        if entry.from != held {
            return Err(unreadable(format!(
                "is inconsistent: entry {} after the base extends a transcript of {} messages, and the checkpoint holds {held}",
                n + 1,
                entry.from
            )));
        }
        let state = &mut saved.state;
        state.messages.extend(entry.messages.into_owned());
        state.turn = entry.turn;
        state.calls_issued = entry.calls_issued;
        state.usage = entry.usage;
        state.values = entry.values.into_owned();
        saved.budget = entry.budget;
        saved.active_ms = entry.active_ms;
        saved.replay_blocked = entry.replay_blocked.into_owned();
    }
    Ok(saved)
}
