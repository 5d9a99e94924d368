//! `PostgresLedger` and `FencedLedger`: the ledger conformance suite (fresh,
//! after reopening, fenced at a current epoch), fencing by epoch, what
//! opening refuses, a read-only server, a statement timeout, a server
//! restart mid-run, and many tasks at once. Each test starts its own
//! cluster and database.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod concurrency;
mod conformance;
mod failures;
mod fencing;
