//! The run store of tinyagents: one record per run a host starts or
//! queues, so that any process (the command line, a worker, a console) can
//! see where it stands, decide what it waits on, and take it over and
//! finish it after a crash.
//!
//! - [`RunStore`]: the trait. A run's record ([`RunRecord`]: its agent, the
//!   agents file's path and content hash or a code agent's name, its
//!   request, status, holder and lease, tokens, answer or error), its
//!   suspended state (sealed), each waiting call of each suspension with
//!   its decision (who, when, why, and the binding: run, call, tool,
//!   arguments' hash), and its history ([`RunEvent`]). Queries: runs by
//!   status or agent, the waiting calls across runs (the approval inbox),
//!   a run's approval history. Holders take runs by claims that raise the
//!   run's epoch and renew leases; a holder that lost a run writes nothing.
//! - [`SqliteRunStore`] (feature `sqlite`): one SQLite file, what the
//!   command line keeps beside its ledger. The PostgreSQL store is
//!   `tinyagents_postgres::PostgresRunStore`; both pass one conformance
//!   suite (feature `conformance`).
//! - [`next_segment`]: how a claimed run goes on (start, resume with its
//!   decisions, recover with them), the one answer every host uses, and
//!   [`HeldLedger`], the ledger a held run writes through.
//! - [`SealKey`]: what seals the parts that decide what may run.
//! - [`Journal`]: a run's events kept beside its record (a view for a
//!   console: model turns, calls, refusals, payloads as captured).
//!
//! What it is not: the effect ledger (what each call did, and the calls in
//! doubt: `EffectLedger::in_doubt`), the session store (conversations), or
//! a scheduler (workers are `tinyagents_postgres::Worker`).

mod approval;
pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod held;
mod history;
mod journal;
mod plan;
mod record;
mod seal;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use approval::{Decided, Decision, DecisionRecord, WaitingCall};
pub use error::{RunStoreError, RunStoreResult};
pub use held::HeldLedger;
pub use history::{HistoryEntry, RunEvent};
pub use journal::{
    JOURNAL_FLUSH_EVERY, Journal, JournalEntry, NewJournalEvent, drive_journaled, journaled,
};
pub use plan::{NextSegment, is_bare_claim, next_segment};
pub use record::{
    AgentsFile, Claim, ClaimFilter, Ending, Hold, Holder, NewRun, RecordStatus, RunQuery,
    RunRecord, StoredRequest, host_name,
};
pub use seal::SealKey;
#[cfg(feature = "sqlite")]
pub use sqlite::{
    RUN_STORE_APPLICATION_ID, RUN_STORE_SCHEMA_VERSION, SqliteRunStore, SqliteRunStoreOptions,
};
pub use store::{RunStore, SharedRunStore};
