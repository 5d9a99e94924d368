//! The `RunStore` trait: what every backend offers the command line, the
//! workers and a console.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tinyagents_core::RunId;

use crate::approval::{Decided, Decision, WaitingCall};
use crate::error::RunStoreResult;
use crate::history::HistoryEntry;
use crate::journal::{JournalEntry, NewJournalEvent};
use crate::record::{
    AgentsFile, Claim, ClaimFilter, Ending, Hold, NewRun, RecordStatus, RunQuery, RunRecord,
};

/// A run store shared by the tasks of a process.
pub type SharedRunStore = Arc<dyn RunStore>;

/// The record of every run a host starts or queues: what it runs, who
/// holds it, the state it waits in, the decisions people made on its
/// waiting calls (with who, when and why), and its history. The effect
/// ledger stays the record of what each call did; this is what another
/// process needs to take the run over and finish it.
///
/// A run is held by one holder at a time. Every claim (a start, a resume,
/// a recovery, a worker's claim) raises the run's epoch; the holder's
/// later writes ([`renew`](Self::renew), [`end`](Self::end)) name the
/// epoch they hold and change nothing once another claim took the run.
///
/// What decides what may run is sealed with the store's key (see
/// [`SealKey`](crate::SealKey)): the record's identity (agent, agents file
/// and hash, session, request), the suspended state, each waiting call's
/// binding and each decision. A part edited outside the store is refused
/// ([`RunStoreError::Tampered`](crate::RunStoreError::Tampered)) before
/// anything of it is used.
///
/// The trait makes no single-process assumption: every operation goes
/// through the database, and every check-then-write is one transaction.
#[async_trait]
pub trait RunStore: Send + Sync + std::fmt::Debug {
    /// Records a new run: held by `hold` at once (its first claim, epoch
    /// 1), or queued for a worker when `hold` is `None` (epoch 0). Refused
    /// with [`Exists`](crate::RunStoreError::Exists) when the id is
    /// recorded already.
    async fn create(&self, run: NewRun, hold: Option<&Hold>) -> RunStoreResult<Claim>;

    /// The run `run`, its seals checked.
    async fn get(&self, run: &RunId) -> RunStoreResult<Option<RunRecord>>;

    /// The runs `query` selects, oldest first.
    async fn list(&self, query: &RunQuery) -> RunStoreResult<Vec<RunRecord>>;

    /// How many runs are in each status (statuses with none left out).
    async fn counts(&self) -> RunStoreResult<Vec<(RecordStatus, u64)>>;

    /// Takes run `run` for `hold`, if its epoch is still `seen_epoch` (what
    /// the caller read: so two claimers never both take it) and it may be
    /// taken: queued, failed or cancelled, or running (the caller has found
    /// its holder gone: [`RunRecord::holder_gone`]). A run awaiting
    /// approval, or one that has completed, is refused with
    /// [`WrongStatus`](crate::RunStoreError::WrongStatus); a moved epoch
    /// with [`Taken`](crate::RunStoreError::Taken).
    async fn claim(&self, run: &RunId, seen_epoch: u64, hold: &Hold) -> RunStoreResult<Claim>;

    /// Takes up to `max` runs for a worker: first runs whose holder's lease
    /// ran out, then queued runs, oldest first, only those `filter`
    /// admits; each taken by one claimer only.
    async fn claim_next(
        &self,
        hold: &Hold,
        max: usize,
        filter: &ClaimFilter,
    ) -> RunStoreResult<Vec<Claim>>;

    /// Renews the leases `owner` still holds among `held` (run, epoch) for
    /// `lease`; returns the runs renewed. A run missing from the answer was
    /// taken by another claim: its holder must stop it.
    async fn renew(
        &self,
        owner: &str,
        lease: Duration,
        held: &[(RunId, u64)],
    ) -> RunStoreResult<Vec<RunId>>;

    /// Records how the segment held under `epoch` ended, if that epoch
    /// still holds the run; returns false (and writes nothing) when another
    /// claim took it since. A suspension seals the state and records its
    /// waiting calls as the run's next suspension.
    async fn end(&self, run: &RunId, epoch: u64, ending: &Ending) -> RunStoreResult<bool>;

    /// Every undecided call of every run awaiting approval, oldest first,
    /// at most `limit`: the approval inbox.
    async fn waiting(&self, limit: u32) -> RunStoreResult<Vec<WaitingCall>>;

    /// Every call run `run` has waited on, in every suspension, with the
    /// decisions made: its approval history.
    async fn approvals(&self, run: &RunId) -> RunStoreResult<Vec<WaitingCall>>;

    /// Records `decisions` on calls of the run's last suspension, by `by`,
    /// in one step: some calls approved and others denied, some left for
    /// later. Each must name a call that waits and is undecided (a decision
    /// is made once); one that does not refuses the whole step. When every
    /// waiting call is decided, the run is queued to be resumed.
    async fn decide(
        &self,
        run: &RunId,
        by: &str,
        decisions: &[Decision],
    ) -> RunStoreResult<Decided>;

    /// Records that `by` accepted `file` (its new content hash) for run
    /// `run`, whose file changed since it started: a resume or recovery may
    /// build from it. Kept in the run's history.
    async fn accept_file(&self, run: &RunId, file: &AgentsFile, by: &str) -> RunStoreResult<()>;

    /// The run's history, oldest first.
    async fn history(&self, run: &RunId) -> RunStoreResult<Vec<HistoryEntry>>;

    /// Appends `events` to the run's journal (see [`Journal`](crate::Journal)),
    /// if `epoch` still holds the run; returns false (and writes nothing)
    /// when another claim took it since.
    async fn append_journal(
        &self,
        run: &RunId,
        epoch: u64,
        events: &[NewJournalEvent],
    ) -> RunStoreResult<bool>;

    /// The run's journal after entry `after` (0: from the start), oldest
    /// first, at most `limit` entries. An entry whose text is not an event
    /// is returned as unreadable, not dropped.
    async fn journal(
        &self,
        run: &RunId,
        after: u64,
        limit: u32,
    ) -> RunStoreResult<Vec<JournalEntry>>;
}
