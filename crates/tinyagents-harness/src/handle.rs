//! A run as one value that is both the stream of its events and the future
//! of its result, so a host need not pick an order between reading and
//! awaiting (issue 10 item 8).

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use futures_util::future::BoxFuture;
use tinyagents_core::{AgentEvent, CancellationToken, RunId, TinyAgentsError};

use crate::durable::ResumeOptions;
use crate::events::{EventReceiver, EventSink, driven_channel};
use crate::harness::AgentHarness;
use crate::run::{AgentRun, ApprovalDecision, RunRequest, SuspendedRun};

pub use crate::events::DEFAULT_EVENT_BUFFER;

type RunFuture<'h, E> = BoxFuture<'h, Result<AgentRun, E>>;

/// A run started with [`AgentHarness::start`] (or
/// [`start_resume`](AgentHarness::start_resume),
/// [`start_recover`](AgentHarness::start_recover)): the stream of its
/// [`AgentEvent`]s and the future of its result in one value, so that no
/// order of reading and awaiting can deadlock.
///
/// No task is spawned: the handle owns the run's future and its event
/// receiver, and the run advances only while the handle is polled — by
/// [`next_event`](Self::next_event) (or the [`Stream`] impl), by
/// [`wait`](Self::wait), or by awaiting the handle itself. Dropping the
/// handle drops the run where it stands, as dropping any future does (a
/// call it had started keeps its ledger row "started", for recovery).
/// Because the handle drains the run's channel in the same poll that drives
/// the run, a send waiting for room never waits on anyone else, so unlike a
/// sink passed to [`run_with`](AgentHarness::run_with) the run's events do
/// not give way to its cancellation or wall clock: a cancelled or
/// timed-out run still delivers every event, its terminal one included.
///
/// What happens to the events, by the order a host uses:
///
/// - **Read, then await**: `while let Some(e) = handle.next_event().await`
///   reads every event in order while driving the run; `None` comes once
///   the run has ended and every event was read; then
///   [`wait`](Self::wait) returns the result at once. Nothing is dropped,
///   except advisory events (model deltas, progress) that found the
///   buffer full, as with any [`EventSink`].
/// - **Await, then read**: [`wait`](Self::wait) drives the run to its end,
///   draining the events into a buffer kept on the handle, so the run never
///   waits for a reader. The buffer keeps the most recent
///   [`event_buffer`](AgentHarness::event_buffer) events: when more
///   accumulate, the oldest are dropped and counted in
///   [`dropped_events`](Self::dropped_events). Afterwards
///   [`next_event`](Self::next_event) yields the kept events in order (the
///   terminal `RunCompleted` or `RunFailed` last), then `None`.
/// - **Interleaved**: reading some events and then calling
///   [`wait`](Self::wait) keeps the unread ones (and those still to come)
///   in the same bounded buffer.
/// - **Never read**: `handle.await` drives the run to its end and discards
///   every event; none is counted as dropped.
///
/// Events sent after the run ended (by a task a tool spawned and left
/// running) may be missed.
///
/// ```
/// use std::sync::Arc;
/// use tinyagents_core::{AgentEvent, ChatResponse, RunStatus};
/// use tinyagents_harness::{AgentHarness, RunRequest};
/// use tinyagents_models::ScriptedModel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tinyagents_core::TinyAgentsError> {
/// let model = Arc::new(ScriptedModel::new([ChatResponse::text("hello")]));
/// let harness = AgentHarness::builder(model).build()?;
///
/// // Await first, then read what the handle kept.
/// let mut handle = harness.start(RunRequest::new("hi"));
/// let run = handle.wait().await?;
/// assert_eq!(run.status, RunStatus::Completed);
/// let mut events = Vec::new();
/// while let Some(event) = handle.next_event().await {
///     events.push(event);
/// }
/// assert!(matches!(events.last(), Some(AgentEvent::RunCompleted { .. })));
///
/// // Or just await it.
/// let harness = AgentHarness::builder(Arc::new(ScriptedModel::new([ChatResponse::text("hi")])))
///     .build()?;
/// assert_eq!(harness.start(RunRequest::new("hi")).await?.final_text, "hi");
/// # Ok(())
/// # }
/// ```
#[must_use = "a run handle does nothing unless polled: read its events, wait for it or await it"]
pub struct RunHandle<'h, E = TinyAgentsError> {
    /// The run, until it ends.
    run: Option<RunFuture<'h, E>>,
    /// The run's result, from when it ends until it is taken.
    result: Option<Result<AgentRun, E>>,
    receiver: EventReceiver,
    /// A sink over the run's channel, for its count of dropped events.
    sink: EventSink,
    /// Events drained by `wait` and not read yet.
    kept: VecDeque<AgentEvent>,
    capacity: usize,
    /// Events the handle dropped from `kept`, the oldest first.
    overflowed: u64,
    cancel: CancellationToken,
}

impl<E: From<TinyAgentsError>> std::fmt::Debug for RunHandle<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("running", &self.run.is_some())
            .field("kept", &self.kept.len())
            .field("capacity", &self.capacity)
            .field("dropped", &self.dropped_events())
            .finish_non_exhaustive()
    }
}

impl<'h, E: From<TinyAgentsError>> RunHandle<'h, E> {
    /// A handle over a run that `run` starts on the sink it is given (a
    /// channel of `capacity` events the handle drains as it drives the run),
    /// cancelled by `cancel`: for layers above the harness that run agents
    /// their own way (an orchestrated agent, a session) and hand out the
    /// same handle. The future must send its events to that sink only.
    pub fn driven<F>(
        capacity: usize,
        cancel: CancellationToken,
        run: impl FnOnce(EventSink) -> F,
    ) -> Self
    where
        F: Future<Output = Result<AgentRun, E>> + Send + 'h,
    {
        let capacity = capacity.max(1);
        let (sink, receiver) = driven_channel(capacity);
        Self {
            run: Some(Box::pin(run(sink.clone()))),
            result: None,
            receiver,
            sink,
            kept: VecDeque::new(),
            capacity,
            overflowed: 0,
            cancel,
        }
    }

    /// The run's cancellation token: cancelling it ends the run with
    /// `RunStatus::Cancelled` (the handle must still be polled to see it
    /// end).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the run has ended (its events may still be unread).
    pub fn is_finished(&self) -> bool {
        self.run.is_none()
    }

    /// How many of the run's events never reached the reader: those the
    /// handle dropped, oldest first, when more than its buffer's capacity
    /// accumulated during [`wait`](Self::wait), plus those the run's sink
    /// dropped (see [`EventSink::dropped_events`]).
    pub fn dropped_events(&self) -> u64 {
        self.overflowed + self.sink.dropped_events()
    }

    /// The next event, driving the run while none is ready; `None` once
    /// the run has ended and every event was read (see the type's notes).
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// Drives the run to its end and returns its result, keeping its
    /// unread events on the handle for [`next_event`](Self::next_event):
    /// the most recent [`event_buffer`](AgentHarness::event_buffer) of
    /// them, the older ones dropped and counted. The result is returned
    /// once; a second call is a `TinyAgentsError::State`.
    pub async fn wait(&mut self) -> Result<AgentRun, E> {
        std::future::poll_fn(|cx| self.poll_wait(cx, true)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        if let Some(event) = self.kept.pop_front() {
            return Poll::Ready(Some(event));
        }
        loop {
            let Some(run) = self.run.as_mut() else {
                // Every sender the run held is gone or idle: what is queued
                // is all there is. `try_recv` does not spend the task's
                // cooperative budget, so it never reports a spurious empty.
                return Poll::Ready(self.receiver.try_recv().ok());
            };
            if let Poll::Ready(Some(event)) = self.receiver.poll_recv(cx) {
                return Poll::Ready(Some(event));
            }
            match run.as_mut().poll(cx) {
                Poll::Ready(result) => {
                    self.result = Some(result);
                    self.run = None;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Drives the run to its end, draining its events into `kept` (or
    /// discarding them), so the run never waits for a reader.
    fn poll_wait(&mut self, cx: &mut Context<'_>, keep: bool) -> Poll<Result<AgentRun, E>> {
        loop {
            if let Some(run) = self.run.as_mut()
                && let Poll::Ready(result) = run.as_mut().poll(cx)
            {
                self.result = Some(result);
                self.run = None;
            }
            let mut drained = false;
            while let Ok(event) = self.receiver.try_recv() {
                self.keep(event, keep);
                drained = true;
            }
            if self.run.is_none() {
                return Poll::Ready(self.result.take().unwrap_or_else(|| {
                    Err(E::from(TinyAgentsError::State(
                        "the run's result was already taken".to_owned(),
                    )))
                }));
            }
            if drained {
                // Room was made: a send the run waits on can go on.
                continue;
            }
            // Nothing queued: wake when a task other than the run (one a
            // tool spawned) sends, then wait for the run.
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(event)) => self.keep(event, keep),
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn keep(&mut self, event: AgentEvent, keep: bool) {
        if !keep {
            return;
        }
        if self.kept.len() >= self.capacity {
            self.kept.pop_front();
            self.overflowed += 1;
        }
        self.kept.push_back(event);
    }
}

/// The run's events, in order: the same as
/// [`next_event`](RunHandle::next_event).
impl<E: From<TinyAgentsError> + Unpin> Stream for RunHandle<'_, E> {
    type Item = AgentEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        self.get_mut().poll_event(cx)
    }
}

/// Awaiting a handle drives the run to its end and discards its events.
impl<'h, E: From<TinyAgentsError> + Unpin> IntoFuture for RunHandle<'h, E> {
    type Output = Result<AgentRun, E>;
    type IntoFuture = RunHandleFuture<'h, E>;

    fn into_future(self) -> RunHandleFuture<'h, E> {
        RunHandleFuture { handle: self }
    }
}

/// A [`RunHandle`] being awaited: drives the run to its end, discarding
/// its events, and returns its result.
#[must_use = "futures do nothing unless awaited"]
pub struct RunHandleFuture<'h, E = TinyAgentsError> {
    handle: RunHandle<'h, E>,
}

impl<E: From<TinyAgentsError>> std::fmt::Debug for RunHandleFuture<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandleFuture")
            .field("handle", &self.handle)
            .finish()
    }
}

impl<E: From<TinyAgentsError> + Unpin> Future for RunHandleFuture<'_, E> {
    type Output = Result<AgentRun, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().handle.poll_wait(cx, false)
    }
}

impl AgentHarness {
    /// Starts a run on `request` and returns its [`RunHandle`]: read its
    /// events, wait for its result, or both, in any order (see the type's
    /// notes on what happens to unread events). The run's events go
    /// through a buffer of [`event_buffer`](Self::event_buffer) events.
    ///
    /// Nothing runs until the handle is polled.
    pub fn start(&self, request: RunRequest) -> RunHandle<'_> {
        let mut request = request;
        let cancel = request
            .cancel
            .get_or_insert_with(CancellationToken::new)
            .clone();
        RunHandle::driven(self.event_buffer, cancel, move |sink| async move {
            self.run_with(request, &sink).await
        })
    }

    /// Resumes a run suspended for approval (as
    /// [`resume`](Self::resume) does) and returns its [`RunHandle`].
    pub fn start_resume<'h>(
        &'h self,
        suspended: SuspendedRun,
        decisions: &'h [ApprovalDecision],
        options: ResumeOptions,
    ) -> RunHandle<'h> {
        let mut options = options;
        let cancel = options
            .cancel
            .get_or_insert_with(CancellationToken::new)
            .clone();
        RunHandle::driven(self.event_buffer, cancel, move |sink| async move {
            self.resume(suspended, decisions, options, &sink).await
        })
    }

    /// Recovers a run whose process died (as [`recover`](Self::recover)
    /// does) and returns its [`RunHandle`].
    pub fn start_recover<'h>(&'h self, run_id: &'h RunId, options: ResumeOptions) -> RunHandle<'h> {
        let mut options = options;
        let cancel = options
            .cancel
            .get_or_insert_with(CancellationToken::new)
            .clone();
        RunHandle::driven(self.event_buffer, cancel, move |sink| async move {
            self.recover(run_id, options, &sink).await
        })
    }
}
