//! tinyagents on PostgreSQL: the effect ledger and the session store in a
//! database several processes share, and workers that take runs from a
//! queue in it.
//!
//! - [`PgDatabase`]: the connection string, a bounded pool, and the settings
//!   every connection carries (`synchronous_commit = on`, statement and
//!   idle-in-transaction timeouts). Each component keeps its schema version
//!   in `tinyagents_schema` and refuses a newer one.
//! - `PostgresLedger`: [`EffectLedger`](tinyagents_ledger::EffectLedger) on
//!   PostgreSQL, one writer connection per process with group commit, held
//!   to the same conformance suite as SQLite. `PostgresLedger::fenced`
//!   gives the ledger a worker writes through: every write carries the
//!   run's epoch and is refused once another worker has claimed the run.
//! - [`PostgresSessionStore`]: the orchestrator's
//!   [`SessionStore`](tinyagents_orchestrator::SessionStore).
//! - [`RunQueue`] and `Worker`: runs as leased work. Workers claim queued
//!   runs and runs whose lease expired (`FOR UPDATE SKIP LOCKED`), heartbeat
//!   their leases, recover a run another worker left through the ledger,
//!   release a run that waits for approval, and stop a run whose lease they
//!   lost.
//!
//! Connections use TLS as the string's `sslmode` says, on rustls with the
//! server's certificate always verified (`PgOptions::ca_file` for a
//! provider's CA). What it is not: a migration tool for your own tables or
//! a connection pooler in front of the server. The throwaway cluster of
//! the tests is behind the feature `testing`.

mod database;
mod error;
mod ledger;
mod migrate;
mod queue;
mod session;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod worker;

pub use database::{PgDatabase, PgOptions};
pub use error::PgError;
pub use ledger::{FencedLedger, LEDGER_SCHEMA_VERSION, PostgresLedger, PostgresLedgerOptions};
pub use queue::{Claim, QueueError, QueueStatus, QueuedRun, RunOutcome, RunQueue};
pub use session::PostgresSessionStore;
pub use worker::{AgentFactory, FactoryError, LeasedRun, Worker, WorkerReport};
