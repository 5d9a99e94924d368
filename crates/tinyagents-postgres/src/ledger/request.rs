//! What the ledger's handles send its writer task: one request per
//! operation, each with its oneshot reply, and the failures of writes
//! whose callers did not wait (reported by the next flush).

use tinyagents_core::{CallId, RunId};
pub(crate) use tinyagents_ledger::backend::Deferred;
use tinyagents_ledger::{
    CallStatus, Checkpoint, InDoubt, LedgerError, LedgerResult, LedgerRow, PruneReport, Resolve,
    RunState, StartedRow, StoredResult, Timestamp,
};
use tokio::sync::oneshot;

use super::fence::Fence;

pub(crate) type Reply<T> = oneshot::Sender<LedgerResult<T>>;

/// A request to the writer. Every write carries the fence of the handle
/// that sent it (`None`: unfenced).
pub(crate) enum Request {
    Started {
        row: StartedRow,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    /// `reply` is `None` when the caller did not wait (a call it knew to
    /// be in flight): a failure then goes to the deferred errors. With
    /// `detached`, nobody waits on `reply` either: it is read later.
    Settled {
        run: RunId,
        call: CallId,
        status: CallStatus,
        result: StoredResult,
        fence: Option<Fence>,
        reply: Option<Reply<()>>,
        detached: bool,
    },
    SaveCheckpoint {
        run: RunId,
        version: u64,
        data: Vec<u8>,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    AppendCheckpoint {
        run: RunId,
        version: u64,
        entry: Vec<u8>,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    /// Answered after the commit: a resolution is durable when `resolve`
    /// returns.
    Resolve {
        run: RunId,
        call: CallId,
        resolve: Resolve,
        max_bytes: usize,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    BeginRun {
        run: RunId,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    Finish {
        run: RunId,
        fence: Option<Fence>,
        reply: Reply<()>,
    },
    Prune {
        cutoff: Timestamp,
        fence: Option<Fence>,
        reply: Reply<PruneReport>,
    },
    Flush(Reply<()>),
    InDoubt(Reply<Vec<InDoubt>>),
    RunState(RunId, Reply<RunState>),
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

/// Answers a request with `err` without doing it.
pub(crate) fn reject(request: Request, err: LedgerError, deferred: &Deferred) {
    match request {
        Request::Settled { reply, .. } => match reply {
            Some(reply) => drop(reply.send(Err(err))),
            None => deferred.push(err),
        },
        Request::Started { reply, .. }
        | Request::Resolve { reply, .. }
        | Request::SaveCheckpoint { reply, .. }
        | Request::AppendCheckpoint { reply, .. }
        | Request::BeginRun { reply, .. }
        | Request::Finish { reply, .. }
        | Request::Flush(reply)
        | Request::Shutdown(reply) => drop(reply.send(Err(err))),
        Request::Prune { reply, .. } => drop(reply.send(Err(err))),
        Request::Get(_, _, reply) => drop(reply.send(Err(err))),
        Request::Rows { reply, .. } => drop(reply.send(Err(err))),
        Request::UnfinishedRuns(reply) => drop(reply.send(Err(err))),
        Request::InDoubt(reply) => drop(reply.send(Err(err))),
        Request::LoadCheckpoint(_, reply) => drop(reply.send(Err(err))),
        Request::RunState(_, reply) => drop(reply.send(Err(err))),
    }
}

impl Request {
    /// Whether nobody waits on this request's answer now: a settle of a
    /// call known to be in flight.
    pub(crate) fn is_unwaited(&self) -> bool {
        matches!(
            self,
            Self::Settled { reply: None, .. } | Self::Settled { detached: true, .. }
        )
    }
}
