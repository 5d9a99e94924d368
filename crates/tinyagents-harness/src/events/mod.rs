//! Where a run's events go: a bounded channel, so a slow consumer slows the
//! run instead of growing memory.
//!
//! See [`EventSink`] for back-pressure and where it stops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use futures_util::future::select_all;
use tinyagents_core::{AgentEvent, AgentId, CallId, CancellationToken, RunContext};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::time::Instant;

pub(crate) mod segment;

/// How many events a [`RunHandle`](crate::RunHandle) buffers unless
/// [`AgentHarnessBuilder::event_buffer`](crate::AgentHarnessBuilder::event_buffer)
/// says otherwise.
pub const DEFAULT_EVENT_BUFFER: usize = 256;

use segment::{Note, OpenCalls};

/// How long, once a run is cancelled or out of wall clock, an event that
/// finds the buffer full waits for the reader to make room before the
/// reader is taken as stalled (see [`EventSink`]).
pub const STALLED_READER_GRACE: Duration = Duration::from_secs(1);

/// The receiving end of a run's events.
pub type EventReceiver = mpsc::Receiver<AgentEvent>;

/// A bounded event channel of `capacity` events (at least 1).
pub fn event_channel(capacity: usize) -> (EventSink, EventReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (EventSink::from_sender(tx), rx)
}

/// A channel whose reader is polled together with the run that sends to
/// it (a [`RunHandle`](crate::RunHandle)'s): a send waiting for room waits
/// only for the same poll to drain the channel, so it never gives way.
pub(crate) fn driven_channel(capacity: usize) -> (EventSink, EventReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let mut sink = EventSink::from_sender(tx);
    if let Some(out) = sink.out.as_mut().and_then(Arc::get_mut) {
        out.driven = true;
    }
    (sink, rx)
}

/// The sending end shared by every sink over one channel, with the count
/// of the events they dropped.
#[derive(Debug)]
struct Outlet {
    tx: mpsc::Sender<AgentEvent>,
    dropped: AtomicU64,
    /// Whether the reader is driven with the run (see [`driven_channel`]).
    driven: bool,
    /// Whether the reader let a grace period pass without making room, and
    /// has made none since.
    stalled: AtomicBool,
    /// The closing events of runs that were dropped before they ended
    /// (see [`crate::segment`]), sent before the next event on the channel.
    deferred: Mutex<VecDeque<AgentEvent>>,
    /// Whether `deferred` holds any (read without the lock on every send).
    has_deferred: AtomicBool,
}

impl Outlet {
    fn new(tx: mpsc::Sender<AgentEvent>) -> Self {
        Self {
            tx,
            dropped: AtomicU64::new(0),
            driven: false,
            stalled: AtomicBool::new(false),
            deferred: Mutex::new(VecDeque::new()),
            has_deferred: AtomicBool::new(false),
        }
    }

    /// The next deferred event, clearing the flag under the lock once none
    /// is left (so an event deferred meanwhile is not missed).
    fn next_deferred(&self) -> Option<AgentEvent> {
        let mut deferred = self.deferred.lock();
        let next = deferred.pop_front();
        if deferred.is_empty() {
            self.has_deferred.store(false, Ordering::Release);
        }
        next
    }

    /// Sends deferred events while the buffer has room, without waiting.
    fn offer_deferred(&self) {
        let mut deferred = self.deferred.lock();
        while let Some(event) = deferred.pop_front() {
            match self.tx.try_send(event) {
                Ok(()) => self.delivered(),
                Err(TrySendError::Full(event)) => {
                    deferred.push_front(event);
                    return;
                }
                Err(TrySendError::Closed(_)) => deferred.clear(),
            }
        }
        self.has_deferred.store(false, Ordering::Release);
    }

    fn count_drop(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// An event found room: the reader, if it had stalled, reads again.
    fn delivered(&self) {
        if self.stalled.load(Ordering::Relaxed) {
            self.stalled.store(false, Ordering::Relaxed);
        }
    }

    /// Sends `event` once there is room; nothing if the receiver is gone.
    fn send(
        &self,
        permit: Result<mpsc::Permit<'_, AgentEvent>, mpsc::error::SendError<()>>,
        event: AgentEvent,
    ) {
        if let Ok(permit) = permit {
            permit.send(event);
            self.delivered();
        }
    }
}

/// What waiting for room in the buffer came to.
enum Room<'o> {
    /// A place for one event.
    Permit(mpsc::Permit<'o, AgentEvent>),
    /// The run's bounds were reached and the reader stalled: drop the event.
    GaveWay,
    /// Nobody listens any more.
    Closed,
}

/// Where a delegated run's events are forwarded from.
#[derive(Debug)]
struct DelegationScope {
    parent_call_id: CallId,
    agent_id: AgentId,
    depth: u32,
    /// The scope of the run that delegated, when it was itself delegated.
    outer: Option<Arc<DelegationScope>>,
}

/// What a waiting send gives way to: a run's cancellation and the end of
/// its wall-clock budget, and those of the runs it was delegated from.
#[derive(Debug)]
struct RunBounds {
    cancel: CancellationToken,
    /// The earliest deadline of this run and the runs it was delegated from.
    deadline: Option<Instant>,
    /// The bounds of the run that delegated this one, when it had any.
    outer: Option<Arc<RunBounds>>,
}

impl RunBounds {
    fn levels(&self) -> impl Iterator<Item = &RunBounds> {
        std::iter::successors(Some(self), |level| level.outer.as_deref())
    }

    /// Whether a send gives way at once.
    fn reached(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.levels().any(|level| level.cancel.is_cancelled())
    }

    /// Completes when a send gives way.
    async fn wait(&self) {
        let expired = async {
            match self.deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            match &self.outer {
                None => self.cancel.cancelled().await,
                Some(_) => {
                    select_all(
                        self.levels()
                            .map(|level| Box::pin(level.cancel.cancelled())),
                    )
                    .await;
                }
            }
        };
        tokio::select! {
            biased;
            () = cancelled => {}
            () = expired => {}
        }
    }
}

/// Where the loop sends events. [`EventSink::none`] discards them at no
/// cost: events are not even built.
///
/// Clones, [`delegated`](EventSink::delegated) sinks and the sinks the
/// harness derives for each run share one channel and one count of dropped
/// events.
///
/// # Back-pressure, and where it stops
///
/// [`EventSink::emit`] waits for room in the buffer, so a consumer that
/// reads slowly slows the run down to its pace and memory stays bounded.
/// The wait gives way to the bounds of the run that sends (the harness
/// bounds the sink of every run it drives, in
/// [`run_with`](crate::AgentHarness::run_with),
/// [`resume`](crate::AgentHarness::resume) and
/// [`recover`](crate::AgentHarness::recover)): once the run is cancelled or its
/// wall-clock budget is spent, the run waits for its reader only while the
/// reader is still reading. An event that finds the buffer full then waits
/// at most [`STALLED_READER_GRACE`] for room; if none comes, the reader is
/// taken as stalled, and that event and every later one that finds the
/// buffer full are dropped at once, counted in
/// [`EventSink::dropped_events`] (until the reader makes room again). So a
/// consumer that stopped reading (or never started) cannot hang a run that
/// has a cancellation token someone fires or a wall-clock limit: it delays
/// the run's end by one grace period each time it stops reading. A run
/// with neither waits for
/// its reader, which is the back-pressure a host asked for by passing a
/// sink.
///
/// A reader that is slow but still reading loses nothing, so the events it
/// gets of a cancelled run keep their pairing (every `ToolStarted` gets its
/// one terminal event). Every event is first offered without waiting, so a
/// reader with room gets the terminal `RunCompleted { status: Cancelled }`
/// or `RunFailed` even when earlier events were dropped.
///
/// To run without choosing an order between reading events and awaiting
/// the result, use [`AgentHarness::start`](crate::AgentHarness::start) and
/// its [`RunHandle`](crate::RunHandle).
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    out: Option<Arc<Outlet>>,
    scope: Option<Arc<DelegationScope>>,
    bounds: Option<Arc<RunBounds>>,
    /// The calls this sink's run has started and not ended (a run segment's
    /// own sink; never a delegated run's).
    open: Option<Arc<OpenCalls>>,
}

/// An [`EventSink`] that does not keep its channel open
/// ([`EventSink::downgrade`]); [`upgrade`](Self::upgrade) gives the sink
/// back while the run that owns the channel still holds it.
#[derive(Debug, Clone, Default)]
pub(crate) struct WeakEventSink {
    out: Option<std::sync::Weak<Outlet>>,
    scope: Option<Arc<DelegationScope>>,
    bounds: Option<Arc<RunBounds>>,
}

impl WeakEventSink {
    /// The sink, while its channel is held by someone else; a sink that
    /// discards events once it is not (or if it never had a channel).
    pub(crate) fn upgrade(&self) -> EventSink {
        match self.out.as_ref().and_then(std::sync::Weak::upgrade) {
            Some(out) => EventSink {
                out: Some(out),
                scope: self.scope.clone(),
                bounds: self.bounds.clone(),
                open: None,
            },
            None => EventSink::none(),
        }
    }
}

impl EventSink {
    /// A sink that discards events.
    pub fn none() -> Self {
        Self::default()
    }

    /// A sink over an existing sender, with its own count of dropped events.
    pub fn from_sender(tx: mpsc::Sender<AgentEvent>) -> Self {
        Self {
            out: Some(Arc::new(Outlet::new(tx))),
            scope: None,
            bounds: None,
            open: None,
        }
    }

    /// A sink for a run delegated by the call `parent_call_id`: its events
    /// reach this sink's receiver wrapped in `AgentEvent::Delegated`. Its
    /// sends give way to the bounds of the run that delegated (when this
    /// sink has them) and to those of the delegated run itself.
    pub fn delegated(&self, parent_call_id: CallId, agent_id: AgentId, depth: u32) -> Self {
        Self {
            out: self.out.clone(),
            scope: Some(Arc::new(DelegationScope {
                parent_call_id,
                agent_id,
                depth,
                outer: self.scope.clone(),
            })),
            bounds: self.bounds.clone(),
            open: None,
        }
    }

    /// A handle on this sink that does not keep its channel open: for what
    /// a tool may keep past its call (its progress sink, its execution
    /// context), so that the stream closes when the run ends whatever a
    /// tool kept.
    pub(crate) fn downgrade(&self) -> WeakEventSink {
        WeakEventSink {
            out: self.out.as_ref().map(Arc::downgrade),
            scope: self.scope.clone(),
            bounds: self.bounds.clone(),
        }
    }

    /// This sink, noting the calls its run starts and ends in `open`.
    pub(crate) fn tracking(&self, open: Arc<OpenCalls>) -> Self {
        Self {
            open: Some(open),
            ..self.clone()
        }
    }

    /// Queues `events` (a dropped run's closing events) to go out before
    /// the next event sent on this channel, and sends what fits now.
    pub(crate) fn defer(&self, events: Vec<AgentEvent>) {
        let Some(out) = self.out.as_ref().filter(|out| !out.tx.is_closed()) else {
            return;
        };
        out.deferred
            .lock()
            .extend(events.into_iter().map(|event| self.wrap(event)));
        out.has_deferred.store(true, Ordering::Release);
        out.offer_deferred();
    }

    /// Sends every deferred event, each waiting for room as [`Self::emit`]
    /// does. Room is taken before the event leaves the queue, so a send
    /// dropped while it waits (its run was dropped too) loses nothing.
    async fn send_deferred(&self, out: &Outlet) {
        while out.has_deferred.load(Ordering::Acquire) {
            let room = match out.tx.try_reserve() {
                Ok(permit) => Room::Permit(permit),
                Err(TrySendError::Closed(())) => Room::Closed,
                Err(TrySendError::Full(())) => self.room(out).await,
            };
            if let Room::Closed = room {
                return;
            }
            let Some(event) = out.next_deferred() else {
                return;
            };
            match room {
                Room::Permit(permit) => out.send(Ok(permit), event),
                Room::GaveWay | Room::Closed => out.count_drop(),
            }
        }
    }

    /// This sink for one run: a send that waits for room gives way to a
    /// stalled reader (see [`emit`](Self::emit)) once `cancel` is cancelled
    /// or `deadline` has passed, and also once a bound this sink already
    /// had is reached.
    /// A sink nobody listens to, or over a [`driven_channel`], stays as it is.
    pub(crate) fn bounded(&self, cancel: CancellationToken, deadline: Option<Instant>) -> Self {
        if self.out.as_ref().is_none_or(|out| out.driven) {
            return self.clone();
        }
        let outer = self.bounds.clone();
        let deadline = match (deadline, outer.as_ref().and_then(|b| b.deadline)) {
            (Some(own), Some(outer)) => Some(own.min(outer)),
            (own, outer) => own.or(outer),
        };
        Self {
            out: self.out.clone(),
            scope: self.scope.clone(),
            bounds: Some(Arc::new(RunBounds {
                cancel,
                deadline,
                outer,
            })),
            open: self.open.clone(),
        }
    }

    /// This sink bounded by the run of `ctx`: its cancellation token and
    /// the end of what is left of its wall-clock budget.
    pub(crate) fn bounded_by(&self, ctx: &RunContext) -> Self {
        let deadline = ctx
            .remaining()
            .and_then(|left| Instant::now().checked_add(left));
        self.bounded(ctx.cancellation().clone(), deadline)
    }

    /// Wraps a delegated run's event once per level of delegation, the
    /// innermost first, so a grandchild's event arrives as
    /// `Delegated { child, Delegated { grandchild, event } }`.
    fn wrap(&self, event: AgentEvent) -> AgentEvent {
        let mut event = event;
        let mut scope = self.scope.as_deref();
        while let Some(level) = scope {
            event = AgentEvent::Delegated {
                parent_call_id: level.parent_call_id.clone(),
                agent_id: level.agent_id.clone(),
                depth: level.depth,
                event: Box::new(event),
            };
            scope = level.outer.as_deref();
        }
        event
    }

    /// Whether anyone listens.
    pub fn is_active(&self) -> bool {
        self.out.as_ref().is_some_and(|out| !out.tx.is_closed())
    }

    /// How many events the sinks over this channel dropped because its
    /// buffer was full: advisory events [`try_emit`](Self::try_emit) could
    /// not place, and events of a cancelled or timed-out run that gave way
    /// to a stalled reader. Events nobody listens for (a
    /// [`none`](Self::none) sink, a dropped receiver) are not counted.
    pub fn dropped_events(&self) -> u64 {
        self.out
            .as_ref()
            .map_or(0, |out| out.dropped.load(Ordering::Relaxed))
    }

    /// A `Warning` whose text `message` builds (only when someone listens).
    /// Not an `async fn`: it is `emit`'s own future, with no layer of its
    /// own.
    pub(crate) fn warn(
        &self,
        message: impl FnOnce() -> String,
    ) -> impl std::future::Future<Output = ()> {
        self.emit(move || AgentEvent::Warning { message: message() })
    }

    /// Sends the event `build` makes; builds nothing when nobody listens. A
    /// dropped receiver is not an error.
    ///
    /// The event is offered at once; when the buffer is full, the send
    /// waits for room, except in a run that was cancelled or whose wall
    /// clock ran out: there it waits only for a reader that is still
    /// reading, and otherwise gives way, the event dropped and counted in
    /// [`dropped_events`](Self::dropped_events) (see the type's notes).
    pub async fn emit(&self, build: impl FnOnce() -> AgentEvent) {
        let Some(out) = self.out.as_ref().filter(|out| !out.tx.is_closed()) else {
            return;
        };
        if out.has_deferred.load(Ordering::Acquire) {
            Box::pin(self.send_deferred(out)).await;
        }
        let event = build();
        // Noted once the send is over: a send dropped while it waited for
        // room delivered nothing.
        let note = self
            .open
            .as_ref()
            .and_then(|open| Some((open, Note::of(&event)?)));
        self.send(out, event).await;
        if let Some((open, note)) = note {
            open.apply(note);
        }
    }

    /// Offers `event` at once, and waits for room when the buffer is full.
    async fn send(&self, out: &Outlet, event: AgentEvent) {
        let event = match out.tx.try_send(self.wrap(event)) {
            Ok(()) => return out.delivered(),
            Err(TrySendError::Closed(_)) => return,
            Err(TrySendError::Full(event)) => event,
        };
        // The waiting send is boxed: only a full buffer pays for it, and
        // every future that may emit stays small.
        Box::pin(self.send_when_room(out, event)).await;
    }

    /// The slow path of [`Self::emit`]: the buffer was full.
    async fn send_when_room(&self, out: &Outlet, event: AgentEvent) {
        match self.room(out).await {
            Room::Permit(permit) => out.send(Ok(permit), event),
            Room::GaveWay => out.count_drop(),
            Room::Closed => {}
        }
    }

    /// Waits for room in the buffer, giving way as [`Self::emit`] says.
    async fn room<'o>(&self, out: &'o Outlet) -> Room<'o> {
        let room = |permit: Result<mpsc::Permit<'o, AgentEvent>, _>| match permit {
            Ok(permit) => Room::Permit(permit),
            Err(_) => Room::Closed,
        };
        let Some(bounds) = &self.bounds else {
            return room(out.tx.reserve().await);
        };
        if !bounds.reached() {
            tokio::select! {
                biased;
                permit = out.tx.reserve() => return room(permit),
                () = bounds.wait() => {}
            }
        }
        // The run's end is decided: wait for a reader that still reads, not
        // for one that stalled.
        if out.stalled.load(Ordering::Relaxed) {
            return Room::GaveWay;
        }
        match tokio::time::timeout(STALLED_READER_GRACE, out.tx.reserve()).await {
            Ok(permit) => room(permit),
            Err(_) => {
                out.stalled.store(true, Ordering::Relaxed);
                Room::GaveWay
            }
        }
    }

    /// Sends without waiting; drops the event when the buffer is full (and
    /// counts it in [`dropped_events`](Self::dropped_events)). For advisory
    /// events (progress, streamed deltas) from synchronous code.
    pub fn try_emit(&self, event: AgentEvent) {
        if let Some(out) = &self.out {
            if out.has_deferred.load(Ordering::Acquire) {
                out.offer_deferred();
            }
            match out.tx.try_send(self.wrap(event)) {
                Ok(()) => out.delivered(),
                Err(TrySendError::Full(_)) => out.count_drop(),
                Err(TrySendError::Closed(_)) => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Issue 10 item 8: a send gives way to the run's cancellation and wall
    //! clock when its reader stalls, and what it drops is counted. The
    //! tests run on paused time: the grace period passes at once when
    //! nothing else can happen.

    use super::*;

    fn warning(text: &str) -> AgentEvent {
        AgentEvent::Warning {
            message: text.to_owned(),
        }
    }

    fn text(event: &AgentEvent) -> &str {
        match event {
            AgentEvent::Warning { message } => message,
            other => panic!("unexpected event {other:?}"),
        }
    }

    /// Fails the test instead of hanging it when a send never gives way.
    async fn guard<F: std::future::Future>(future: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(600), future)
            .await
            .expect("the send should have given way instead of hanging")
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_send_gives_way_to_cancellation_and_counts_the_drop() {
        let (sink, mut rx) = event_channel(1);
        let token = CancellationToken::new();
        let sink = sink.bounded(token.clone(), None);
        sink.emit(|| warning("fits")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("waits")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        token.cancel();
        guard(waiting).await;
        assert_eq!(sink.dropped_events(), 1);
        assert_eq!(text(&rx.recv().await.unwrap()), "fits");
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_send_gives_way_after_the_deadline_and_counts_the_drop() {
        let (sink, mut rx) = event_channel(1);
        let deadline = Instant::now() + Duration::from_secs(5);
        let sink = sink.bounded(CancellationToken::new(), Some(deadline));
        sink.emit(|| warning("fits")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("waits")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        guard(waiting).await;
        assert!(Instant::now() >= deadline);
        assert_eq!(sink.dropped_events(), 1);
        assert_eq!(text(&rx.recv().await.unwrap()), "fits");
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn after_cancellation_an_event_with_room_is_still_delivered() {
        let (sink, mut rx) = event_channel(1);
        let token = CancellationToken::new();
        token.cancel();
        let sink = sink.bounded(token, None);
        let mut send = std::pin::pin!(sink.emit(|| warning("terminal")));
        assert!(futures_util::poll!(send.as_mut()).is_ready());
        assert_eq!(text(&rx.recv().await.unwrap()), "terminal");
        assert_eq!(sink.dropped_events(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn after_cancellation_a_stalled_reader_costs_one_grace_period_then_events_drop_at_once() {
        let (sink, mut rx) = event_channel(1);
        let token = CancellationToken::new();
        token.cancel();
        let sink = sink.bounded(token, None);
        sink.emit(|| warning("0")).await;
        let started = Instant::now();
        guard(sink.emit(|| warning("1"))).await;
        assert_eq!(started.elapsed(), STALLED_READER_GRACE);
        for n in 2..6 {
            let mut send = std::pin::pin!(sink.emit(|| warning(&n.to_string())));
            assert!(
                futures_util::poll!(send.as_mut()).is_ready(),
                "send {n} waited for a stalled reader"
            );
        }
        assert_eq!(sink.dropped_events(), 5);
        assert_eq!(text(&rx.recv().await.unwrap()), "0");
    }

    #[tokio::test(start_paused = true)]
    async fn after_cancellation_a_reader_that_still_reads_loses_nothing() {
        let (sink, mut rx) = event_channel(1);
        let token = CancellationToken::new();
        token.cancel();
        let sink = sink.bounded(token, None);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..10 {
                let event = rx.recv().await.unwrap();
                seen.push(text(&event).to_owned());
                tokio::time::sleep(STALLED_READER_GRACE / 2).await;
            }
            seen
        });
        for n in 0..10 {
            guard(sink.emit(|| warning(&n.to_string()))).await;
        }
        assert_eq!(sink.dropped_events(), 0);
        let seen = guard(reader).await.unwrap();
        assert_eq!(seen, (0..10).map(|n| n.to_string()).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_reads_again_after_a_stall_is_waited_for_again() {
        let (sink, mut rx) = event_channel(1);
        let token = CancellationToken::new();
        token.cancel();
        let sink = sink.bounded(token, None);
        sink.emit(|| warning("0")).await;
        guard(sink.emit(|| warning("dropped"))).await;
        assert_eq!(sink.dropped_events(), 1);
        assert_eq!(text(&rx.recv().await.unwrap()), "0");
        // It made room: the next event fits, and the one after waits again.
        sink.emit(|| warning("1")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("2")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(text(&rx.recv().await.unwrap()), "1");
        guard(waiting).await;
        assert_eq!(text(&rx.recv().await.unwrap()), "2");
        assert_eq!(sink.dropped_events(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_send_delivers_when_the_reader_makes_room() {
        let (sink, mut rx) = event_channel(1);
        let sink = sink.bounded(CancellationToken::new(), None);
        sink.emit(|| warning("first")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("second")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(text(&rx.recv().await.unwrap()), "first");
        guard(waiting).await;
        assert_eq!(text(&rx.recv().await.unwrap()), "second");
        assert_eq!(sink.dropped_events(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unbounded_sink_keeps_waiting_for_its_reader() {
        let (sink, mut rx) = event_channel(1);
        sink.emit(|| warning("first")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("second")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(text(&rx.recv().await.unwrap()), "first");
        guard(waiting).await;
        assert_eq!(sink.dropped_events(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_sink_keeps_waiting_for_its_reader_before_its_bounds() {
        let (sink, _rx) = event_channel(1);
        let deadline = Instant::now() + Duration::from_secs(3600);
        let sink = sink.bounded(CancellationToken::new(), Some(deadline));
        sink.emit(|| warning("first")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("second")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_secs(3599)).await;
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(sink.dropped_events(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delegated_sink_gives_way_to_the_delegating_runs_cancellation() {
        let (sink, mut rx) = event_channel(1);
        let parent = CancellationToken::new();
        let parent_sink = sink.bounded(parent.clone(), None);
        // The child run bounds its own sink with its own, unrelated token.
        let child_sink = parent_sink
            .delegated(CallId::new("p1"), AgentId::new("child"), 1)
            .bounded(CancellationToken::new(), None);
        parent_sink.emit(|| warning("fits")).await;
        let mut waiting = std::pin::pin!(child_sink.emit(|| warning("child")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        parent.cancel();
        guard(waiting).await;
        assert_eq!(sink.dropped_events(), 1);
        assert_eq!(text(&rx.recv().await.unwrap()), "fits");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delegated_sink_gives_way_to_its_own_runs_cancellation_and_wraps_events() {
        let (sink, mut rx) = event_channel(1);
        let parent_sink = sink.bounded(CancellationToken::new(), None);
        let child = CancellationToken::new();
        let child_sink = parent_sink
            .delegated(CallId::new("p1"), AgentId::new("child"), 1)
            .bounded(child.clone(), None);
        child_sink.emit(|| warning("child")).await;
        let mut waiting = std::pin::pin!(child_sink.emit(|| warning("dropped")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        child.cancel();
        guard(waiting).await;
        assert_eq!(parent_sink.dropped_events(), 1);
        match rx.recv().await.unwrap() {
            AgentEvent::Delegated {
                parent_call_id,
                event,
                ..
            } => {
                assert_eq!(parent_call_id.as_str(), "p1");
                assert_eq!(text(&event), "child");
            }
            other => panic!("unexpected event {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_sink_keeps_the_earlier_deadline_of_the_delegating_run() {
        let (sink, _rx) = event_channel(1);
        let now = Instant::now();
        let parent_sink = sink.bounded(CancellationToken::new(), Some(now));
        let child_sink = parent_sink
            .delegated(CallId::new("p1"), AgentId::new("child"), 1)
            .bounded(
                CancellationToken::new(),
                Some(now + Duration::from_secs(3600)),
            );
        child_sink.emit(|| warning("fits")).await;
        guard(child_sink.emit(|| warning("dropped"))).await;
        assert_eq!(now.elapsed(), STALLED_READER_GRACE);
        assert_eq!(sink.dropped_events(), 1);
    }

    #[tokio::test]
    async fn try_emit_never_waits_and_counts_what_it_drops() {
        let (sink, mut rx) = event_channel(2);
        for n in 0..5 {
            sink.try_emit(warning(&n.to_string()));
        }
        assert_eq!(sink.dropped_events(), 3);
        assert_eq!(text(&rx.recv().await.unwrap()), "0");
        assert_eq!(text(&rx.recv().await.unwrap()), "1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_driven_channel_keeps_waiting_for_room_after_cancellation() {
        // A run handle reads its channel in the poll that drives the run:
        // its sends wait for that read instead of dropping events.
        let (sink, mut rx) = driven_channel(1);
        let token = CancellationToken::new();
        token.cancel();
        let sink = sink.bounded(token, Some(Instant::now()));
        sink.emit(|| warning("first")).await;
        let mut waiting = std::pin::pin!(sink.emit(|| warning("second")));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        tokio::time::sleep(STALLED_READER_GRACE * 10).await;
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        assert_eq!(text(&rx.recv().await.unwrap()), "first");
        guard(waiting).await;
        assert_eq!(text(&rx.recv().await.unwrap()), "second");
        assert_eq!(sink.dropped_events(), 0);
    }

    #[tokio::test]
    async fn events_nobody_listens_for_are_not_counted_as_dropped() {
        let none = EventSink::none();
        none.emit(|| warning("nobody")).await;
        none.try_emit(warning("nobody"));
        assert_eq!(none.dropped_events(), 0);
        let (sink, rx) = event_channel(1);
        drop(rx);
        let sink = sink.bounded(CancellationToken::new(), None);
        guard(sink.emit(|| warning("closed"))).await;
        sink.try_emit(warning("closed"));
        assert_eq!(sink.dropped_events(), 0);
    }
}
