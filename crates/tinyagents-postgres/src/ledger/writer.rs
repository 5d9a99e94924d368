//! The writer task: the one owner of the ledger's connection. Callers send
//! requests over a bounded channel (back-pressure instead of unbounded
//! memory) with a oneshot reply each. The task takes every request waiting
//! (up to the batch size) and applies it in the open transaction (`BEGIN`
//! once for many requests):
//!
//! - a settled row, a checkpoint (base or appended entry), a claim, a
//!   finished mark or a prune is answered as soon as it is applied, and
//!   rides on the next commit;
//! - a started row, a resolution or a flush is answered after the commit
//!   (durable: `synchronous_commit = on`);
//! - reads run on the same connection, inside the open transaction when
//!   there is one, so they see every applied write.
//!
//! With nothing owed, the transaction is committed once it has been open
//! for the linger time. A fenced write first checks its run's epoch, once
//! per transaction (`fence.rs`).
//!
//! A failed statement aborts the transaction in PostgreSQL: the writer
//! rolls it back, reports the writes that rode on it at the next flush
//! ([`LedgerError::Deferred`]) and fails the replies it owed. A lost
//! connection is replaced on the next request (three tries over about a
//! second); the request that met the loss is applied again on the new
//! connection (nothing of it was committed), and what the lost transaction
//! held is reported as above, never dropped silently.

mod apply;
mod pipeline;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tinyagents_ledger::{LedgerError, LedgerResult, SharedClock};
use tokio::sync::mpsc;

use super::conn::{Conn, Fail, describe, is_lost, storage};
use super::fence::{Fence, check_fence};
use super::request::{Deferred, Reply, Request, reject};
use crate::PgDatabase;
use crate::error::detail;

/// How the writer batches.
pub(crate) struct Tuning {
    pub(crate) max_batch: usize,
    pub(crate) linger: Duration,
}

/// How long a batch of settles nobody waits on waits for company (the
/// timer's resolution: a millisecond).
const GATHER: Duration = Duration::from_millis(1);

/// The pauses before each try to reconnect: three tries over about a second.
const RECONNECT_PAUSES: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_millis(750),
];

/// Whether a request writes (in the transaction, behind its fence) or only
/// reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// The open transaction.
#[derive(Default)]
struct Txn {
    /// When it was opened; `None` when none is open.
    opened: Option<Instant>,
    /// Writes in it whose callers were answered before the commit (they
    /// ride on it): lost, and reported, if it does not commit.
    riders: usize,
    /// Replies owed once it commits (started rows, resolutions, flushes).
    owed: Vec<Reply<()>>,
    /// Fences checked in it (their epoch rows stay locked to the commit).
    fences: HashSet<Fence>,
}

/// The writer's state.
pub(crate) struct Writer {
    database: PgDatabase,
    /// `None` after the connection was lost, until the next request.
    conn: Option<Conn>,
    clock: SharedClock,
    tuning: Tuning,
    deferred: Arc<Deferred>,
    txn: Txn,
    /// Why reconnecting failed during the current batch: the batch's other
    /// requests fail at once instead of each trying again.
    down: Option<LedgerError>,
}

impl Writer {
    pub(crate) fn new(
        database: PgDatabase,
        conn: Conn,
        clock: SharedClock,
        tuning: Tuning,
        deferred: Arc<Deferred>,
    ) -> Self {
        Self {
            database,
            conn: Some(conn),
            clock,
            tuning,
            deferred,
            txn: Txn::default(),
            down: None,
        }
    }

    /// Serves requests until every sender is gone or a shutdown arrives.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        let max_batch = self.tuning.max_batch.max(1);
        let mut batch = Vec::with_capacity(max_batch);
        let mut shutdown = None;
        while let Some(first) = self.next(&mut rx).await {
            batch.push(first);
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            if self.txn.opened.is_none() && batch.iter().all(Request::is_unwaited) {
                // Nobody waits on these settles: give the request that
                // usually follows at once (the caller's next start) a
                // moment to join them, so that both go in one round trip.
                if let Ok(Some(next)) = tokio::time::timeout(GATHER, rx.recv()).await {
                    batch.push(next);
                    while batch.len() < max_batch {
                        match rx.try_recv() {
                            Ok(request) => batch.push(request),
                            Err(_) => break,
                        }
                    }
                }
            }
            self.down = None;
            let batch_left = self.pipeline(std::mem::take(&mut batch)).await;
            for request in batch_left {
                match request {
                    Request::Shutdown(reply) => shutdown = Some(reply),
                    request => self.apply(request).await,
                }
            }
            if !self.txn.owed.is_empty() {
                // Each owed caller is answered with the commit's outcome.
                let _ = self.commit().await;
            }
            if shutdown.is_some() {
                break;
            }
        }
        rx.close();
        let closed = LedgerError::Closed {
            detail: "the ledger was shut down".into(),
        };
        while let Ok(request) = rx.try_recv() {
            reject(request, closed.clone(), &self.deferred);
        }
        // Commit what rode on the open transaction before closing.
        let committed = self.commit().await;
        drop(self.conn.take());
        if let Some(reply) = shutdown {
            drop(reply.send(committed));
        }
    }

    /// The next request, waiting; with an open transaction, committing it
    /// once it has been open for the linger time, so that a row riding on
    /// it is durable at most that long after it was applied, however busy
    /// the queue is with other riders.
    async fn next(&mut self, rx: &mut mpsc::Receiver<Request>) -> Option<Request> {
        loop {
            let Some(opened) = self.txn.opened else {
                return rx.recv().await;
            };
            let deadline = opened + self.tuning.linger;
            if Instant::now() >= deadline {
                // Failures reach nobody here (every rider was answered);
                // they are kept for the next flush.
                let _ = self.commit().await;
                continue;
            }
            if let Ok(request) = tokio::time::timeout_at(deadline.into(), rx.recv()).await {
                return request;
            }
        }
    }

    /// Counts an applied write that rides on the open transaction.
    fn ride<T>(&mut self, applied: &LedgerResult<T>) {
        self.txn.riders += usize::from(applied.is_ok());
    }

    /// What a failed attempt of `operation` leads to: `None` to apply it
    /// once more (the connection was lost and this is the first retry:
    /// nothing of it was committed), else its answer. A failed statement
    /// rolls the open transaction back.
    async fn settle_attempt<T>(
        &mut self,
        operation: &'static str,
        attempt: Result<T, Fail>,
        retried: &mut bool,
    ) -> Option<LedgerResult<T>> {
        let (failed, error) = match attempt {
            Ok(value) => return Some(Ok(value)),
            Err(Fail::Refused(err)) => return Some(Err(err)),
            Err(Fail::Sql { operation, error }) => (operation, error),
        };
        let lost = is_lost(&error) || self.conn.as_ref().is_none_or(Conn::is_closed);
        let shown = detail(&error);
        let err = describe(self.database.target(), failed, error);
        self.abort(&err, lost).await;
        if lost && !*retried {
            *retried = true;
            tracing::warn!(
                database = self.database.target(),
                operation,
                error = %shown,
                "the ledger's connection to PostgreSQL was lost; reconnecting"
            );
            return None;
        }
        Some(Err(err))
    }

    /// The connection, ready for `operation`: reconnected if it was lost,
    /// in the open transaction for a write (opening it, and checking
    /// `fence` the first time the transaction meets it).
    async fn ready(
        &mut self,
        operation: &'static str,
        access: Access,
        fence: Option<&Fence>,
    ) -> Result<&mut Conn, Fail> {
        if self.conn.as_ref().is_some_and(Conn::is_closed) {
            // The connection died while idle: what its open transaction
            // held is lost.
            let err = storage(
                operation,
                format!(
                    "the connection to PostgreSQL at {} was lost while a transaction was open",
                    self.database.target()
                ),
            );
            self.abort(&err, true).await;
        }
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => reconnect(&self.database, &mut self.down, operation).await?,
        };
        let conn = self.conn.insert(conn);
        if access == Access::Write {
            if self.txn.opened.is_none() {
                conn.batch("BEGIN").await.map_err(|error| Fail::Sql {
                    operation: "begin",
                    error,
                })?;
                self.txn.opened = Some(Instant::now());
            }
            if let Some(fence) = fence.filter(|fence| !self.txn.fences.contains(*fence)) {
                check_fence(conn, fence).await?;
                self.txn.fences.insert(fence.clone());
            }
        }
        Ok(conn)
    }

    /// Ends the open transaction after a failure (`cause`): rolls it back
    /// (or, the connection being `lost`, drops it), reports the writes that
    /// rode on it at the next flush and fails the replies it owed.
    async fn abort(&mut self, cause: &LedgerError, lost: bool) {
        let txn = std::mem::take(&mut self.txn);
        if lost {
            self.conn = None;
        } else if txn.opened.is_some()
            && let Some(conn) = &mut self.conn
            && conn.batch("ROLLBACK").await.is_err()
        {
            self.conn = None;
        }
        if txn.riders > 0 {
            self.deferred.push(storage(
                "commit",
                format!(
                    "{} acknowledged writes (settled rows, checkpoints, claims, finished marks, \
                     prunes) were lost with their transaction: {cause}",
                    txn.riders
                ),
            ));
        }
        let rolled_back = storage(
            "commit",
            format!(
                "the transaction holding this write was rolled back, nothing of it is written: {cause}"
            ),
        );
        for reply in txn.owed {
            drop(reply.send(Err(rolled_back.clone())));
        }
    }

    /// Commits the open transaction (if any) and answers the owed replies.
    async fn commit(&mut self) -> LedgerResult<()> {
        let txn = std::mem::take(&mut self.txn);
        let result = match (txn.opened, &mut self.conn) {
            (None, _) => Ok(()),
            // Every path that drops the connection takes the transaction.
            (Some(_), None) => Err(storage(
                "commit",
                format!(
                    "the connection to PostgreSQL at {} was lost",
                    self.database.target()
                ),
            )),
            (Some(_), Some(conn)) => match conn.batch("COMMIT").await {
                Ok(()) => Ok(()),
                Err(error) => {
                    let target = self.database.target();
                    let err = if is_lost(&error) || conn.is_closed() {
                        self.conn = None;
                        storage(
                            "commit",
                            format!(
                                "the connection to PostgreSQL at {target} was lost during the \
                                 commit ({}); whether it was committed is unknown",
                                detail(&error)
                            ),
                        )
                    } else {
                        // A failed COMMIT ends the transaction: rolled back.
                        describe(target, "commit", error)
                    };
                    if txn.riders > 0 {
                        self.deferred.push(storage(
                            "commit",
                            format!(
                                "{} acknowledged writes (settled rows, checkpoints, claims, \
                                 finished marks, prunes) may be lost: {err}",
                                txn.riders
                            ),
                        ));
                    }
                    Err(err)
                }
            },
        };
        for reply in txn.owed {
            // A caller that stopped waiting is not an error: its row is
            // written or not as the commit says.
            drop(reply.send(result.clone()));
        }
        result
    }
}

/// A new connection, tried three times over about a second; the failure is
/// kept for the rest of the batch.
async fn reconnect(
    database: &PgDatabase,
    down: &mut Option<LedgerError>,
    operation: &'static str,
) -> Result<Conn, Fail> {
    if let Some(err) = down {
        return Err(Fail::Refused(err.clone()));
    }
    let mut last = None;
    for pause in RECONNECT_PAUSES {
        tokio::time::sleep(pause).await;
        match database.dedicated_driven().await {
            Ok((client, driver)) => {
                tracing::info!(
                    database = database.target(),
                    "the ledger reconnected to PostgreSQL"
                );
                return Ok(Conn::new(client, driver));
            }
            Err(err) => last = Some(err),
        }
    }
    let err = storage(
        operation,
        format!(
            "the ledger lost its connection and could not reconnect ({} tries over a second): {}",
            RECONNECT_PAUSES.len(),
            last.map_or_else(|| database.target().to_owned(), |err| err.to_string())
        ),
    );
    *down = Some(err.clone());
    Err(Fail::Refused(err))
}
