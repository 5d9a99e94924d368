//! What every handle of one ledger shares (the unfenced
//! [`PostgresLedger`](super::PostgresLedger) and each
//! [`FencedLedger`](super::FencedLedger)): the channel to the writer task,
//! the deferred failures, and each operation as a request, fenced or not.
//!
//! Text that PostgreSQL cannot hold (the NUL character) is refused here,
//! before it reaches the writer, so that it never aborts a transaction
//! other callers' writes share. A result's content is stored as bytes and
//! may hold anything.

use std::sync::Arc;

use tinyagents_core::{CallId, RunId};
use tinyagents_ledger::{
    Checkpoint, InDoubt, LedgerError, LedgerResult, LedgerRow, Outcome, PruneReport, Resolve,
    ResolvedBy, RunState, StartedRow, StoredResult, Timestamp,
};
use tokio::sync::{mpsc, oneshot};

use super::conn::storage;
use super::fence::Fence;
use super::request::{Deferred, Reply, Request};

/// The shared part of a ledger's handles.
pub(crate) struct Core {
    pub(crate) tx: mpsc::Sender<Request>,
    pub(crate) deferred: Arc<Deferred>,
    pub(crate) target: String,
    pub(crate) max_result_bytes: usize,
}

fn closed(detail: &str) -> LedgerError {
    LedgerError::Closed {
        detail: detail.to_owned(),
    }
}

/// Refuses text PostgreSQL cannot store.
fn storable(operation: &'static str, what: &str, text: &str) -> LedgerResult<()> {
    if text.contains('\0') {
        return Err(storage(
            operation,
            format!(
                "the {what} holds a NUL character (U+0000), which PostgreSQL text cannot store"
            ),
        ));
    }
    Ok(())
}

fn storable_ids(operation: &'static str, run: &RunId, call: Option<&CallId>) -> LedgerResult<()> {
    storable(operation, "run id", run.as_str())?;
    call.map_or(Ok(()), |call| storable(operation, "call id", call.as_str()))
}

impl Core {
    /// Queues a request, waiting for room when the writer is behind.
    pub(crate) async fn send(&self, request: Request) -> LedgerResult<()> {
        self.tx
            .send(request)
            .await
            .map_err(|_| closed("the ledger was shut down"))
    }

    /// Sends a request and waits for its answer.
    pub(crate) async fn call<T>(
        &self,
        request: impl FnOnce(Reply<T>) -> Request,
    ) -> LedgerResult<T> {
        let (reply, answer) = oneshot::channel();
        self.send(request(reply)).await?;
        answer
            .await
            .map_err(|_| closed("the writer task stopped before answering"))?
    }

    pub(crate) async fn started(&self, row: StartedRow, fence: Option<Fence>) -> LedgerResult<()> {
        let op = "record_started";
        storable_ids(op, &row.run_id, Some(&row.call_id))?;
        storable(op, "tool name", &row.tool_name)?;
        storable(op, "arguments hash", &row.args_hash)?;
        self.call(|reply| Request::Started { row, fence, reply })
            .await
    }

    /// Settles a call; with `wait` false the request is only queued (the
    /// caller knows the call to be in flight), and a failure is reported by
    /// the next flush.
    pub(crate) async fn settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
        fence: Option<Fence>,
        wait: bool,
    ) -> LedgerResult<()> {
        storable_ids("record_settled", run, Some(call))?;
        let (status, result) = StoredResult::from_outcome(outcome, self.max_result_bytes);
        let (run, call) = (run.clone(), call.clone());
        if !wait {
            return self
                .send(Request::Settled {
                    run,
                    call,
                    status,
                    result,
                    fence,
                    reply: None,
                    detached: false,
                })
                .await;
        }
        self.call(|reply| Request::Settled {
            run,
            call,
            status,
            result,
            fence,
            reply: Some(reply),
            detached: false,
        })
        .await
    }

    /// Queues a settle with a reply its caller reads later (or never): the
    /// writer's verdict without waiting for it.
    pub(crate) async fn settled_detached(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
        fence: Option<Fence>,
    ) -> LedgerResult<oneshot::Receiver<LedgerResult<()>>> {
        storable_ids("record_settled", run, Some(call))?;
        let (status, result) = StoredResult::from_outcome(outcome, self.max_result_bytes);
        let (reply, answer) = oneshot::channel();
        self.send(Request::Settled {
            run: run.clone(),
            call: call.clone(),
            status,
            result,
            fence,
            reply: Some(reply),
            detached: true,
        })
        .await?;
        Ok(answer)
    }

    pub(crate) async fn rows(&self, run: &RunId, unresolved: bool) -> LedgerResult<Vec<LedgerRow>> {
        storable_ids("rows", run, None)?;
        self.call(|reply| Request::Rows {
            run: run.clone(),
            unresolved,
            reply,
        })
        .await
    }

    pub(crate) async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.call(Request::InDoubt).await
    }

    pub(crate) async fn resolve(
        &self,
        run: &RunId,
        call: &CallId,
        resolve: &Resolve,
        fence: Option<Fence>,
    ) -> LedgerResult<()> {
        let op = "resolve";
        storable_ids(op, run, Some(call))?;
        if let ResolvedBy::Person(who) = &resolve.by {
            storable(op, "resolver's name", who)?;
        }
        if let Some(note) = &resolve.note {
            storable(op, "note", note)?;
        }
        self.call(|reply| Request::Resolve {
            run: run.clone(),
            call: call.clone(),
            resolve: resolve.clone(),
            max_bytes: self.max_result_bytes,
            fence,
            reply,
        })
        .await
    }

    pub(crate) async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        storable_ids("get", run, Some(call))?;
        self.call(|reply| Request::Get(run.clone(), call.clone(), reply))
            .await
    }

    pub(crate) async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.call(Request::UnfinishedRuns).await
    }

    pub(crate) async fn begin_run(&self, run: &RunId, fence: Option<Fence>) -> LedgerResult<()> {
        storable_ids("begin_run", run, None)?;
        self.call(|reply| Request::BeginRun {
            run: run.clone(),
            fence,
            reply,
        })
        .await
    }

    pub(crate) async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        storable_ids("run_state", run, None)?;
        self.call(|reply| Request::RunState(run.clone(), reply))
            .await
    }

    pub(crate) async fn save_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        data: Vec<u8>,
        fence: Option<Fence>,
    ) -> LedgerResult<()> {
        storable_ids("save_checkpoint", run, None)?;
        self.call(|reply| Request::SaveCheckpoint {
            run: run.clone(),
            version,
            data,
            fence,
            reply,
        })
        .await
    }

    pub(crate) async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
        fence: Option<Fence>,
    ) -> LedgerResult<()> {
        storable_ids("append_checkpoint", run, None)?;
        self.call(|reply| Request::AppendCheckpoint {
            run: run.clone(),
            version,
            entry,
            fence,
            reply,
        })
        .await
    }

    pub(crate) async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        storable_ids("load_checkpoint", run, None)?;
        self.call(|reply| Request::LoadCheckpoint(run.clone(), reply))
            .await
    }

    pub(crate) async fn finish(&self, run: &RunId, fence: Option<Fence>) -> LedgerResult<()> {
        storable_ids("mark_run_finished", run, None)?;
        self.call(|reply| Request::Finish {
            run: run.clone(),
            fence,
            reply,
        })
        .await
    }

    pub(crate) async fn prune(
        &self,
        cutoff: Timestamp,
        fence: Option<Fence>,
    ) -> LedgerResult<PruneReport> {
        self.call(|reply| Request::Prune {
            cutoff,
            fence,
            reply,
        })
        .await
    }

    /// Makes everything acknowledged durable, then reports the background
    /// failures since the last flush.
    pub(crate) async fn flush(&self) -> LedgerResult<()> {
        self.call(Request::Flush).await?;
        self.deferred.take()
    }

    /// Commits, stops the writer and closes its connection.
    pub(crate) async fn shutdown(&self) -> LedgerResult<()> {
        self.call(Request::Shutdown).await?;
        self.deferred.take()
    }
}
