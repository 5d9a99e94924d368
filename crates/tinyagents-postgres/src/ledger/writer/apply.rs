//! Each request as the writer applies it: the operation of `store.rs` or
//! `runs.rs` it runs, whether it writes (in the open transaction, behind
//! its fence) or reads, and when its caller is answered: at once, or once
//! the transaction commits (started rows, resolutions, flushes).

use super::{Access, Writer};
use crate::ledger::request::Request;
use crate::ledger::{runs, store};

/// Applies one operation through [`Writer::ready`] and
/// [`Writer::settle_attempt`]: `$body` runs on the ready connection (with
/// the time of the request) and once more if the connection was lost.
macro_rules! op {
    ($writer:ident, $operation:expr, $access:expr, $fence:expr,
     |$conn:ident, $now:pat_param| $body:expr) => {{
        let $now = $writer.clock.now();
        let mut retried = false;
        loop {
            let attempt = match $writer.ready($operation, $access, $fence).await {
                Ok($conn) => $body.await,
                Err(fail) => Err(fail),
            };
            if let Some(answer) = $writer
                .settle_attempt($operation, attempt, &mut retried)
                .await
            {
                break answer;
            }
        }
    }};
}

impl Writer {
    /// Applies one request and answers it, or owes it the commit.
    pub(super) async fn apply(&mut self, request: Request) {
        use Access::{Read, Write};
        match request {
            Request::Started { row, fence, reply } => {
                let started = op!(
                    self,
                    "record_started",
                    Write,
                    fence.as_ref(),
                    |conn, now| store::start(conn, &row, now)
                );
                match started {
                    Ok(()) => self.txn.owed.push(reply),
                    Err(err) => drop(reply.send(Err(err))),
                }
            }
            Request::Settled {
                run,
                call,
                status,
                result,
                fence,
                reply,
                detached: _,
            } => {
                let settled = op!(
                    self,
                    "record_settled",
                    Write,
                    fence.as_ref(),
                    |conn, now| store::settle(conn, &run, &call, status, &result, now)
                );
                self.ride(&settled);
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
                fence,
                reply,
            } => {
                let saved = op!(
                    self,
                    "save_checkpoint",
                    Write,
                    fence.as_ref(),
                    |conn, now| runs::save_checkpoint(conn, &run, version, &data, now)
                );
                self.ride(&saved);
                drop(reply.send(saved));
            }
            Request::AppendCheckpoint {
                run,
                version,
                entry,
                fence,
                reply,
            } => {
                let appended = op!(
                    self,
                    "append_checkpoint",
                    Write,
                    fence.as_ref(),
                    |conn, now| runs::append_checkpoint(conn, &run, version, &entry, now)
                );
                self.ride(&appended);
                drop(reply.send(appended));
            }
            Request::Resolve {
                run,
                call,
                resolve,
                max_bytes,
                fence,
                reply,
            } => {
                let resolved = op!(self, "resolve", Write, fence.as_ref(), |conn, now| {
                    store::resolve(conn, &run, &call, &resolve, max_bytes, now)
                });
                match resolved {
                    Ok(()) => self.txn.owed.push(reply),
                    Err(err) => drop(reply.send(Err(err))),
                }
            }
            Request::BeginRun { run, fence, reply } => {
                let claimed = op!(self, "begin_run", Write, fence.as_ref(), |conn, now| {
                    runs::begin_run(conn, &run, now)
                });
                self.ride(&claimed);
                drop(reply.send(claimed));
            }
            Request::Finish { run, fence, reply } => {
                let finished = op!(
                    self,
                    "mark_run_finished",
                    Write,
                    fence.as_ref(),
                    |conn, now| runs::finish(conn, &run, now)
                );
                self.ride(&finished);
                drop(reply.send(finished));
            }
            Request::Prune {
                cutoff,
                fence,
                reply,
            } => {
                let pruned = op!(self, "prune_finished", Write, fence.as_ref(), |conn, _| {
                    runs::prune(conn, cutoff)
                });
                self.ride(&pruned);
                drop(reply.send(pruned));
            }
            Request::Flush(reply) => self.txn.owed.push(reply),
            Request::InDoubt(reply) => {
                let listed = op!(self, "in_doubt", Read, None, |conn, now| store::in_doubt(
                    conn, now
                ));
                drop(reply.send(listed));
            }
            Request::RunState(run, reply) => {
                let state = op!(self, "run_state", Read, None, |conn, _| runs::run_state(
                    conn, &run
                ));
                drop(reply.send(state));
            }
            Request::Get(run, call, reply) => {
                let row = op!(self, "get", Read, None, |conn, _| store::get(
                    conn, &run, &call
                ));
                drop(reply.send(row));
            }
            Request::Rows {
                run,
                unresolved,
                reply,
            } => {
                let rows = op!(self, "rows", Read, None, |conn, _| store::rows(
                    conn, &run, unresolved
                ));
                drop(reply.send(rows));
            }
            Request::UnfinishedRuns(reply) => {
                let listed = op!(self, "unfinished_runs", Read, None, |conn, _| {
                    runs::unfinished_runs(conn)
                });
                drop(reply.send(listed));
            }
            Request::LoadCheckpoint(run, reply) => {
                let loaded = op!(self, "load_checkpoint", Read, None, |conn, _| {
                    runs::load_checkpoint(conn, &run)
                });
                drop(reply.send(loaded));
            }
            // The loop keeps a shutdown aside; nothing is left to do here.
            Request::Shutdown(reply) => drop(reply.send(Ok(()))),
        }
    }
}
