//! tinyagents on PostgreSQL: the effect ledger, the session store and the
//! run store in a database several processes share, and workers that take
//! runs from it.
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
//! - [`PostgresRunStore`]: the run store
//!   ([`RunStore`](tinyagents_runs::RunStore)) every process of a
//!   deployment shares: run records with their sealed requests and
//!   suspended states, waiting calls and decisions, leases and claims
//!   (`FOR UPDATE SKIP LOCKED`), each run's history; held to the same
//!   conformance suite as the SQLite store.
//! - [`Worker`]: runs as leased work. Workers claim queued runs, decided
//!   runs and runs whose lease expired from the run store, renew their
//!   leases, start, resume or recover each as `tinyagents_runs::next_segment`
//!   says (a resume cut short is recovered with its decisions), release a
//!   run that waits for approval, and stop a run whose lease they lost.
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
mod runs;
mod session;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod worker;

pub use database::{PgDatabase, PgOptions};
pub use error::PgError;
pub use ledger::{FencedLedger, LEDGER_SCHEMA_VERSION, PostgresLedger, PostgresLedgerOptions};
pub use runs::{PostgresRunStore, PostgresRunStoreOptions, RUN_STORE_SCHEMA_VERSION};
pub use session::PostgresSessionStore;
pub use worker::{
    AgentFactory, BuiltAgent, FactoryError, LeasedRun, Worker, WorkerError, WorkerReport,
};
