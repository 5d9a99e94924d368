//! The effect ledger of tinyagents.
//!
//! What it is for: knowing, after a crash, which side effects of tool calls
//! were started and never settled. The harness writes a *started* row for
//! every tool call (model-issued and nested) before the tool runs, durable
//! before the tool may act, and a *settled* row with the (redacted, cut)
//! result when it ends. After a restart, [`EffectLedger::unresolved`] lists
//! the calls in doubt, [`EffectLedger::get`] answers a settled call from its
//! row, and the run's last checkpoint ([`EffectLedger::load_checkpoint`]: a
//! base and the entries appended since) resumes it. A call whose effect is
//! unknown never drops out of view: it keeps its run in
//! [`EffectLedger::unfinished_runs`], is listed ledger-wide by
//! [`EffectLedger::in_doubt`] and is never pruned, until a tool's
//! reconciliation or a person records what happened
//! ([`EffectLedger::resolve`]). A call that asked for an
//! approval while it ran rests *deferred* until it starts again. A new run
//! claims its id ([`EffectLedger::begin_run`]) so that it never meets an old
//! run's rows. Rows are keyed by (run id, call id); the arguments' hash
//! ([`args_hash`]) is the idempotency key a tool can pass to a service.
//!
//! Backends: [`MemoryLedger`] (tests, hosts without recovery) and
//! `SqliteLedger` (the embedded durable default: one SQLite file in WAL
//! mode, group commit, versioned schema; the `sqlite` feature, on by
//! default, compiles it and its bundled SQLite). The trait assumes no single
//! process, so a server backend can follow; the feature `conformance`
//! exports the suite every backend must pass (`conformance::run_all`).
//!
//! What it is not: it does not decide what to replay (the harness applies
//! [`ToolReplay`](tinyagents_core::ToolReplay) and [`LedgerFailure`]; the
//! ledger only refuses starts that can never be right), it does not redact
//! (results must be redacted before they get here), and it is not a log of
//! events or a session store. The exact guarantee is in
//! `docs/effect-ledger.md`.

pub mod backend;
mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod ledger;
mod memory;
mod resolution;
mod row;
mod rules;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use clock::{Clock, ManualClock, SharedClock, SystemClock, Timestamp};
pub use error::{CallIdentity, LedgerError, LedgerFailure, LedgerResult};
pub use ledger::{Checkpoint, CheckpointEntry, EffectLedger, PruneReport, RunState, SharedLedger};
pub use memory::MemoryLedger;
pub use resolution::{Effect, Found, InDoubt, Resolution, Resolve, ResolvedBy};
pub use row::{CallStatus, DEFAULT_MAX_RESULT_BYTES, LedgerRow, Outcome, StartedRow, StoredResult};
#[cfg(feature = "sqlite")]
pub use sqlite::{
    APPLICATION_ID, CommitHook, CommitPoint, SCHEMA_VERSION, SqliteLedger, SqliteOptions,
};
/// The idempotency key of a call's arguments (SHA-256 hex of their canonical
/// JSON), re-exported from `tinyagents-core` so that every crate hashes alike.
pub use tinyagents_core::{args_hash, canonical_json};
