//! The common case of a batch in one round trip: the started and settled
//! rows of distinct calls sent together (pipelined) on the writer's
//! connection, and the commit behind them.
//!
//! `BEGIN` (when no transaction is open), each row's one-statement fast
//! path and, when a started row waits for it, `COMMIT`: one round trip.
//! A fenced row's statement carries its fence (`WITH held AS (SELECT …
//! FOR KEY SHARE)`): it writes only while the claimed run is held at the
//! fence's epoch, and takes the same lock on the run's row as the fence
//! check of `fence.rs`, to the commit.
//!
//! A row's fast path is `INSERT … ON CONFLICT DO NOTHING` for a start and
//! `UPDATE … WHERE status = 'started'` for a settle. PostgreSQL runs the
//! statements in the order sent.
//!
//! A row the fast path did not write (it exists, its run is finished, it
//! is not started, its fence was refused) goes back to the one-by-one
//! path, which decides from what is stored and checks the fence. Only requests that cannot depend on each other are taken
//! here: one per call, none of a run that an earlier request of the batch
//! wrote otherwise (a checkpoint, a claim, a finished mark, a resolution),
//! none after a prune. Any failed statement rolls the transaction back and
//! sends every request here to the one-by-one path, which retries a lost
//! connection and reports what the transaction held.

use std::collections::HashSet;

use futures_util::future::join_all;
use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::LedgerResult;

use super::{Access, Writer};
use crate::database::driven;
use crate::ledger::conn::{describe, is_lost, storage};
use crate::ledger::fence::Fence;
use crate::ledger::request::{Reply, Request};
use crate::ledger::store::{self, INSERT_STARTED, INSERT_STARTED_FENCED, SETTLE, SETTLE_FENCED};

/// A request with its place in the batch.
type Placed = (usize, Request);

impl Writer {
    /// Applies what it can of `batch` pipelined, and returns the requests
    /// left for the one-by-one path, in batch order.
    pub(super) async fn pipeline(&mut self, batch: Vec<Request>) -> Vec<Request> {
        let (fast, rest) = split(batch);
        if fast.is_empty() {
            return in_order(rest);
        }
        let mut left = match self.pipelined(fast).await {
            Ok(slow) => slow,
            // Nothing of it was applied: one by one, from the start.
            Err(fast) => fast,
        };
        left.extend(rest);
        in_order(left)
    }

    /// The pipeline of the module docs. `Ok`: the requests the fast path
    /// did not write; `Err`: every request, none of them applied.
    async fn pipelined(&mut self, fast: Vec<Placed>) -> Result<Vec<Placed>, Vec<Placed>> {
        let now = self.clock.now();
        let conn = match self.ready("record_started", Access::Read, None).await {
            Ok(conn) => conn,
            Err(_) => return Err(fast),
        };
        let statements = async {
            Ok::<_, tokio_postgres::Error>([
                conn.statement(INSERT_STARTED).await?,
                conn.statement(INSERT_STARTED_FENCED).await?,
                conn.statement(SETTLE).await?,
                conn.statement(SETTLE_FENCED).await?,
            ])
        };
        let [insert, insert_fenced, settle, settle_fenced] = match statements.await {
            Ok(statements) => statements,
            Err(error) => return Err(self.failed(fast, error).await),
        };
        let opening = self.txn.opened.is_none();
        let commit = fast
            .iter()
            .any(|(_, request)| matches!(request, Request::Started { .. }));
        let conn = match self.conn.as_mut() {
            Some(conn) => conn,
            None => return Err(fast),
        };
        let (client, driver) = conn.parts();
        let begin = async {
            if opening {
                client.batch_execute("BEGIN").await
            } else {
                Ok(())
            }
        };
        let writes = join_all(fast.iter().map(|(_, request)| async {
            let held = fence_of(request).map(|fence| {
                (
                    fence.run.as_str(),
                    i64::try_from(fence.epoch).unwrap_or(i64::MAX),
                )
            });
            match request {
                Request::Started { row, .. } => {
                    let statement = if held.is_some() {
                        &insert_fenced
                    } else {
                        &insert
                    };
                    store::try_start(client, statement, row, now, held).await
                }
                Request::Settled {
                    run,
                    call,
                    status,
                    result,
                    ..
                } => {
                    let statement = if held.is_some() {
                        &settle_fenced
                    } else {
                        &settle
                    };
                    store::try_settle(client, statement, run, call, *status, result, now, held)
                        .await
                }
                // `split` takes nothing else.
                _ => Ok(0),
            }
        }));
        let committing = async {
            if commit {
                client.batch_execute("COMMIT").await
            } else {
                Ok(())
            }
        };
        let (begun, written, committed) =
            driven(driver, async { tokio::join!(begin, writes, committing) }).await;
        if let Err(error) = begun {
            return Err(self.failed(fast, error).await);
        }
        if opening {
            self.txn.opened = Some(std::time::Instant::now());
        }
        let mut counts = Vec::with_capacity(written.len());
        for result in written {
            match result {
                Ok(count) => counts.push(count),
                // The transaction is rolled back (a COMMIT behind a failed
                // statement rolls back): nothing here was applied.
                Err(error) => return Err(self.failed(fast, error).await),
            }
        }
        if let Err(error) = committed {
            return Ok(self.commit_failed(fast, counts, error));
        }
        Ok(self.answer_written(fast, counts, commit))
    }

    /// Answers the rows written (`count` 1) and returns the others (0) for
    /// the one-by-one path. With `committed`, the open transaction, and
    /// everything that rode on it, is durable.
    fn answer_written(
        &mut self,
        fast: Vec<Placed>,
        counts: Vec<u64>,
        committed: bool,
    ) -> Vec<Placed> {
        let mut slow = Vec::new();
        for ((index, request), count) in fast.into_iter().zip(counts) {
            if count != 1 {
                slow.push((index, request));
                continue;
            }
            // The row's statement locked its fence's run to the commit.
            if let (false, Some(fence)) = (committed, fence_of(&request)) {
                self.txn.fences.insert(fence.clone());
            }
            match request {
                Request::Started { reply, .. } => drop(reply.send(Ok(()))),
                Request::Settled { reply, .. } => {
                    self.txn.riders += usize::from(!committed);
                    self.answer(reply, Ok(()));
                }
                other => slow.push((index, other)),
            }
        }
        if committed {
            let txn = std::mem::take(&mut self.txn);
            for reply in txn.owed {
                drop(reply.send(Ok(())));
            }
        }
        slow
    }

    /// The rows were written and the commit failed: the started rows are
    /// answered with the failure (whether it committed is unknown when the
    /// connection was lost); the settles were applied and are reported with
    /// what rode on the transaction at the next flush.
    fn commit_failed(
        &mut self,
        fast: Vec<Placed>,
        counts: Vec<u64>,
        error: tokio_postgres::Error,
    ) -> Vec<Placed> {
        let target = self.database.target().to_owned();
        let lost = is_lost(&error);
        let err = if lost {
            self.conn = None;
            storage(
                "commit",
                format!(
                    "the connection to PostgreSQL at {target} was lost during the commit ({}); \
                     whether it was committed is unknown",
                    crate::error::detail(&error)
                ),
            )
        } else {
            describe(&target, "commit", error)
        };
        let mut slow = Vec::new();
        let mut riders = std::mem::take(&mut self.txn).riders;
        for ((index, request), count) in fast.into_iter().zip(counts) {
            match request {
                Request::Started { reply, .. } if count == 1 => drop(reply.send(Err(err.clone()))),
                Request::Settled { reply, .. } if count == 1 => {
                    riders += 1;
                    self.answer(reply, Ok(()));
                }
                other => slow.push((index, other)),
            }
        }
        if riders > 0 {
            self.deferred.push(storage(
                "commit",
                format!("{riders} acknowledged writes may be lost: {err}"),
            ));
        }
        slow
    }

    /// Rolls the transaction back after `error` and hands back `fast`.
    async fn failed(&mut self, fast: Vec<Placed>, error: tokio_postgres::Error) -> Vec<Placed> {
        let lost = is_lost(&error) || self.conn.as_ref().is_none_or(|c| c.is_closed());
        let err = describe(self.database.target(), "pipeline", error);
        self.abort(&err, lost).await;
        fast
    }

    /// Answers a settle: its caller, or the deferred errors when it did not
    /// wait.
    fn answer(&self, reply: Option<Reply<()>>, result: LedgerResult<()>) {
        match reply {
            Some(reply) => drop(reply.send(result)),
            None => {
                if let Err(err) = result {
                    self.deferred.push(err);
                }
            }
        }
    }
}

/// Splits a batch into the requests the pipeline takes and the others.
fn split(batch: Vec<Request>) -> (Vec<Placed>, Vec<Placed>) {
    let mut fast = Vec::new();
    let mut rest = Vec::new();
    let mut calls: HashSet<(RunId, CallId)> = HashSet::new();
    let mut touched: HashSet<RunId> = HashSet::new();
    let mut barrier = false;
    for (index, request) in batch.into_iter().enumerate() {
        let call = match &request {
            Request::Started { row, .. } => Some((row.run_id.clone(), row.call_id.clone())),
            Request::Settled { run, call, .. } => Some((run.clone(), call.clone())),
            _ => None,
        };
        if let Some(key) = call {
            if !barrier && !touched.contains(&key.0) && calls.insert(key.clone()) {
                fast.push((index, request));
            } else {
                // A second request of one call, or one after a write of its
                // run: in order, one by one.
                touched.insert(key.0);
                rest.push((index, request));
            }
            continue;
        }
        match &request {
            Request::Resolve { run, call, .. } | Request::Get(run, call, _) => {
                calls.insert((run.clone(), call.clone()));
                touched.insert(run.clone());
            }
            Request::SaveCheckpoint { run, .. }
            | Request::AppendCheckpoint { run, .. }
            | Request::BeginRun { run, .. }
            | Request::Finish { run, .. } => {
                touched.insert(run.clone());
            }
            Request::Prune { .. } | Request::Shutdown(_) => barrier = true,
            _ => {}
        }
        rest.push((index, request));
    }
    (fast, rest)
}

fn fence_of(request: &Request) -> Option<&Fence> {
    match request {
        Request::Started { fence, .. } | Request::Settled { fence, .. } => fence.as_ref(),
        _ => None,
    }
}

fn in_order(mut placed: Vec<Placed>) -> Vec<Request> {
    placed.sort_by_key(|(index, _)| *index);
    placed.into_iter().map(|(_, request)| request).collect()
}
