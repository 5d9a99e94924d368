//! The writer thread: the one owner of the SQLite connection, and its group
//! commit.
//!
//! Callers send requests over a channel and await a one-shot reply (a
//! semaphore bounds the requests in flight). The thread takes every request
//! waiting (up to the batch size) and applies it in the open transaction:
//!
//! - a settled row, a checkpoint (base or appended entry), a claim, a
//!   finished mark or a prune is answered as soon as it is applied, and
//!   rides on the next commit;
//! - a started row (or a flush) is answered after the commit, which is
//!   durable (`synchronous = FULL`: one fsync of the write-ahead log for
//!   every row of the batch, and for what rode on it);
//! - reads run on the same connection, so they see every applied write.
//!
//! With nothing durable pending, the transaction is committed once it has
//! been open for the linger time, so a settled row is durable at most that
//! long after it was applied even if no call starts again.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};

pub(crate) use crate::backend::Deferred;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tinyagents_core::{CallId, RunId};
use tokio::sync::{Semaphore, oneshot};

use super::{CommitHook, CommitPoint};
use super::{runs, store};
use crate::clock::{SharedClock, Timestamp};
use crate::error::{LedgerError, LedgerResult};
use crate::ledger::{Checkpoint, PruneReport, RunState};
use crate::resolution::{InDoubt, Resolve};
use crate::row::{CallStatus, LedgerRow, StartedRow, StoredResult};

pub(crate) type Reply<T> = oneshot::Sender<LedgerResult<T>>;

/// A request to the writer thread.
pub(crate) enum Request {
    Started(StartedRow, Reply<()>),
    /// `reply` is `None` when the caller did not wait (a call it knew to
    /// be in flight): a failure then goes to the deferred errors.
    Settled {
        run: RunId,
        call: CallId,
        status: CallStatus,
        result: StoredResult,
        reply: Option<Reply<()>>,
    },
    SaveCheckpoint {
        run: RunId,
        version: u64,
        data: Vec<u8>,
        reply: Reply<()>,
    },
    AppendCheckpoint {
        run: RunId,
        version: u64,
        entry: Vec<u8>,
        reply: Reply<()>,
    },
    /// Answered after the commit: a resolution is durable when `resolve`
    /// returns.
    Resolve {
        run: RunId,
        call: CallId,
        resolve: Resolve,
        max_bytes: usize,
        reply: Reply<()>,
    },
    InDoubt(Reply<Vec<InDoubt>>),
    BeginRun(RunId, Reply<()>),
    RunState(RunId, Reply<RunState>),
    Finish(RunId, Reply<()>),
    Prune(Timestamp, Reply<PruneReport>),
    Flush(Reply<()>),
    Get(RunId, CallId, Reply<Option<LedgerRow>>),
    Rows {
        run: RunId,
        unresolved: bool,
        reply: Reply<Vec<LedgerRow>>,
    },
    UnfinishedRuns(Reply<Vec<RunId>>),
    LoadCheckpoint(RunId, Reply<Option<Checkpoint>>),
    Shutdown(Reply<()>),
}

/// How the writer batches.
pub(crate) struct Tuning {
    pub(crate) max_batch: usize,
    pub(crate) linger: Duration,
}

/// The writer's state.
pub(crate) struct Writer {
    conn: Connection,
    clock: SharedClock,
    hook: Option<CommitHook>,
    tuning: Tuning,
    permits: Arc<Semaphore>,
    deferred: Arc<Deferred>,
    /// Writes in the open transaction whose callers were answered before the
    /// commit (they ride on it): lost, and reported, if the commit fails.
    riders: usize,
    /// When the open transaction (holding applied, uncommitted writes) was
    /// opened; `None` when none is open.
    opened: Option<Instant>,
    /// Replies owed once the open transaction commits (started rows, flushes).
    owed: Vec<Reply<()>>,
    /// Started rows in the open transaction.
    started: usize,
}

impl Writer {
    pub(crate) fn new(
        conn: Connection,
        clock: SharedClock,
        hook: Option<CommitHook>,
        tuning: Tuning,
        permits: Arc<Semaphore>,
        deferred: Arc<Deferred>,
    ) -> Self {
        Self {
            conn,
            clock,
            hook,
            tuning,
            permits,
            deferred,
            riders: 0,
            opened: None,
            owed: Vec::new(),
            started: 0,
        }
    }

    /// Serves requests until every sender is gone or a shutdown arrives.
    pub(crate) fn run(mut self, rx: Receiver<Request>) {
        let max_batch = self.tuning.max_batch.max(1);
        let mut batch = Vec::with_capacity(max_batch);
        let mut shutdown = None;
        while let Some(first) = self.next(&rx) {
            batch.push(first);
            while batch.len() < max_batch {
                match rx.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            self.permits.add_permits(batch.len());
            for request in batch.drain(..) {
                match request {
                    Request::Shutdown(reply) => shutdown = Some(reply),
                    request => self.apply(request),
                }
            }
            if !self.owed.is_empty() {
                // Each owed caller is answered with the commit's outcome.
                let _ = self.commit();
            }
            if shutdown.is_some() {
                break;
            }
        }
        self.permits.close();
        // Commit what rode on the open transaction before closing.
        let committed = self.commit();
        let closed = self
            .conn
            .close()
            .map_err(|(_, err)| LedgerError::storage_error("close", err));
        if let Some(reply) = shutdown {
            drop(reply.send(committed.and(closed)));
        }
    }

    /// The next request, blocking; with an open transaction, committing it
    /// once it has been open for the linger time, so that a row riding on it
    /// is durable at most that long after it was applied, however busy the
    /// queue is with other riders.
    fn next(&mut self, rx: &Receiver<Request>) -> Option<Request> {
        loop {
            let Some(opened) = self.opened else {
                return rx.recv().ok();
            };
            let left = self.tuning.linger.saturating_sub(opened.elapsed());
            if left.is_zero() {
                // Failures reach nobody here (every rider was answered);
                // they are kept for the next flush.
                let _ = self.commit();
                continue;
            }
            match rx.recv_timeout(left) {
                Ok(request) => return Some(request),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Opens the transaction if none is open.
    fn begin(&mut self) -> LedgerResult<()> {
        if self.opened.is_none() {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .map_err(|err| LedgerError::storage_error("begin", err))?;
            self.opened = Some(Instant::now());
        }
        Ok(())
    }

    /// Applies one request in the open transaction.
    fn apply(&mut self, request: Request) {
        let now = self.clock.now();
        let begun = match &request {
            Request::Get(..)
            | Request::Rows { .. }
            | Request::UnfinishedRuns(_)
            | Request::InDoubt(_)
            | Request::LoadCheckpoint(..)
            | Request::RunState(..)
            | Request::Flush(_) => Ok(()),
            _ => self.begin(),
        };
        if let Err(err) = begun {
            reject(request, err, &self.deferred);
            return;
        }
        let conn = &self.conn;
        match request {
            Request::Started(row, reply) => match store::start(conn, &row, now) {
                Ok(()) => {
                    self.started += 1;
                    self.owed.push(reply);
                }
                Err(err) => drop(reply.send(Err(err))),
            },
            Request::Flush(reply) => self.owed.push(reply),
            Request::Settled {
                run,
                call,
                status,
                result,
                reply,
            } => {
                let settled = store::settle(conn, &run, &call, status, &result, now);
                self.riders += usize::from(settled.is_ok());
                match reply {
                    Some(reply) => drop(reply.send(settled)),
                    None => {
                        if let Err(err) = settled {
                            self.deferred.push(err);
                        }
                    }
                }
            }
            Request::SaveCheckpoint {
                run,
                version,
                data,
                reply,
            } => {
                let saved = runs::save_checkpoint(conn, &run, version, &data, now);
                self.riders += usize::from(saved.is_ok());
                drop(reply.send(saved));
            }
            Request::AppendCheckpoint {
                run,
                version,
                entry,
                reply,
            } => {
                let appended = runs::append_checkpoint(conn, &run, version, &entry, now);
                self.riders += usize::from(appended.is_ok());
                drop(reply.send(appended));
            }
            Request::Resolve {
                run,
                call,
                resolve,
                max_bytes,
                reply,
            } => match store::resolve(conn, &run, &call, &resolve, max_bytes, now) {
                Ok(()) => self.owed.push(reply),
                Err(err) => drop(reply.send(Err(err))),
            },
            Request::InDoubt(reply) => drop(reply.send(store::in_doubt(conn, now))),
            Request::BeginRun(run, reply) => {
                let claimed = runs::begin_run(conn, &run, now);
                self.riders += usize::from(claimed.is_ok());
                drop(reply.send(claimed));
            }
            Request::RunState(run, reply) => drop(reply.send(runs::run_state(conn, &run))),
            Request::Finish(run, reply) => {
                let finished = runs::finish(conn, &run, now);
                self.riders += usize::from(finished.is_ok());
                drop(reply.send(finished));
            }
            Request::Prune(cutoff, reply) => {
                let pruned = runs::prune(conn, cutoff);
                self.riders += usize::from(pruned.is_ok());
                drop(reply.send(pruned));
            }
            Request::Get(run, call, reply) => drop(reply.send(store::get(conn, &run, &call))),
            Request::Rows {
                run,
                unresolved,
                reply,
            } => drop(reply.send(store::rows(conn, &run, unresolved))),
            Request::UnfinishedRuns(reply) => drop(reply.send(runs::unfinished_runs(conn))),
            Request::LoadCheckpoint(run, reply) => {
                drop(reply.send(runs::load_checkpoint(conn, &run)));
            }
            Request::Shutdown(reply) => drop(reply.send(Ok(()))),
        }
    }

    /// Commits the open transaction (if any) and answers the owed replies,
    /// calling the hook around the commit.
    fn commit(&mut self) -> LedgerResult<()> {
        let started = std::mem::take(&mut self.started);
        let riders = std::mem::take(&mut self.riders);
        let owed = std::mem::take(&mut self.owed);
        let result = if self.opened.take().is_some() {
            if let Some(hook) = &self.hook {
                hook(CommitPoint::BeforeCommit { started });
            }
            let commit = self
                .conn
                .execute_batch("COMMIT")
                .map_err(|err| LedgerError::storage_error("commit", err));
            match &commit {
                Ok(()) => {
                    if let Some(hook) = &self.hook {
                        hook(CommitPoint::AfterCommit { started });
                    }
                }
                Err(err) => {
                    // Nothing of the transaction is written. The writes that
                    // rode on it were acknowledged and are lost: say so at
                    // the next flush.
                    let _ = self.conn.execute_batch("ROLLBACK");
                    if riders > 0 {
                        self.deferred.push(LedgerError::storage(
                            "commit",
                            format!(
                                "{riders} acknowledged writes (settled rows, checkpoints, \
                                 claims, finished marks, prunes) lost: {err}"
                            ),
                        ));
                    }
                }
            }
            commit
        } else {
            Ok(())
        };
        for reply in owed {
            // A caller that stopped waiting is not an error: its row is
            // written or not as the commit says.
            drop(reply.send(result.clone()));
        }
        result
    }
}

/// Answers a request with `err` without doing it.
fn reject(request: Request, err: LedgerError, deferred: &Deferred) {
    match request {
        Request::Settled { reply, .. } => match reply {
            Some(reply) => drop(reply.send(Err(err))),
            None => deferred.push(err),
        },
        Request::Started(_, reply)
        | Request::Resolve { reply, .. }
        | Request::SaveCheckpoint { reply, .. }
        | Request::AppendCheckpoint { reply, .. }
        | Request::BeginRun(_, reply)
        | Request::Finish(_, reply)
        | Request::Flush(reply)
        | Request::Shutdown(reply) => drop(reply.send(Err(err))),
        Request::Prune(_, reply) => drop(reply.send(Err(err))),
        Request::Get(_, _, reply) => drop(reply.send(Err(err))),
        Request::Rows { reply, .. } => drop(reply.send(Err(err))),
        Request::UnfinishedRuns(reply) => drop(reply.send(Err(err))),
        Request::InDoubt(reply) => drop(reply.send(Err(err))),
        Request::LoadCheckpoint(_, reply) => drop(reply.send(Err(err))),
        Request::RunState(_, reply) => drop(reply.send(Err(err))),
    }
}
