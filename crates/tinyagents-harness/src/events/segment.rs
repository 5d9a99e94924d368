//! A run segment (a run, a resume, a recovery) closes its stream of events
//! even when it is dropped before it ends: every call it started gets its
//! `ToolFailed`, and the stream its `RunFailed`.
//!
//! A segment is dropped mid-flight when whoever polls it stops: a host's
//! own timeout around `run_with`, or, for a delegated agent, the calling
//! run cancelled or its call timed out (the caller drops the agent tool's
//! future, and the child run inside it). Without this, the delegated run's
//! stream inside the caller's would hold calls that started and never
//! ended, and a run that never ended. The closing events cannot be sent
//! from `Drop` (a send may have to wait for room), so they are queued on
//! the channel ([`EventSink::defer`]) and go out, in order, before the next
//! event anyone sends on it (for a delegated run, the caller's terminal
//! event for the call that delegated), or at once where the buffer has
//! room.

use parking_lot::Mutex;
use tinyagents_core::{AgentEvent, CallId, RunId};

use crate::events::EventSink;

/// The calls a segment has started and not ended, in start order.
#[derive(Debug, Default)]
pub(crate) struct OpenCalls(Mutex<Vec<(CallId, Option<CallId>, String)>>);

/// What a tool event changes in a segment's open calls.
pub(crate) enum Note {
    Started(CallId, Option<CallId>, String),
    Ended(CallId),
}

impl Note {
    /// The change `event` makes, if it is a tool event.
    pub(crate) fn of(event: &AgentEvent) -> Option<Self> {
        match event {
            AgentEvent::ToolStarted {
                call_id,
                parent_call_id,
                name,
                ..
            } => Some(Self::Started(
                call_id.clone(),
                parent_call_id.clone(),
                name.clone(),
            )),
            AgentEvent::ToolCompleted { call_id, .. } | AgentEvent::ToolFailed { call_id, .. } => {
                Some(Self::Ended(call_id.clone()))
            }
            _ => None,
        }
    }
}

impl OpenCalls {
    /// Applies a tool event of the segment's own stream, once sent.
    pub(crate) fn apply(&self, note: Note) {
        let mut open = self.0.lock();
        match note {
            Note::Started(id, parent, name) => open.push((id, parent, name)),
            Note::Ended(id) => {
                if let Some(at) = open.iter().rposition(|(open, ..)| *open == id) {
                    open.remove(at);
                }
            }
        }
    }

    fn take(&self) -> Vec<(CallId, Option<CallId>, String)> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// Closes a segment's stream if the segment is dropped before it ends.
pub(crate) struct SegmentGuard {
    sink: EventSink,
    open: std::sync::Arc<OpenCalls>,
    run_id: RunId,
    armed: bool,
}

impl SegmentGuard {
    /// A guard for the segment of `run_id`, and the sink the segment sends
    /// on (which notes its calls for the guard).
    pub(crate) fn open(events: &EventSink, run_id: RunId) -> (Self, EventSink) {
        let open = std::sync::Arc::new(OpenCalls::default());
        let sink = events.tracking(std::sync::Arc::clone(&open));
        let guard = Self {
            sink: events.clone(),
            open,
            run_id,
            armed: events.is_active(),
        };
        (guard, sink)
    }

    /// The segment reached its end and closed its stream itself.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Not armed until [`Unarmed::arm`]: for a segment made before its
    /// future is first polled, so that a future dropped unpolled (a run
    /// that never started) closes nothing.
    pub(crate) fn unarmed(mut self) -> Unarmed {
        let active = std::mem::replace(&mut self.armed, false);
        Unarmed {
            guard: self,
            active,
        }
    }
}

/// A [`SegmentGuard`] that closes nothing until its segment starts.
pub(crate) struct Unarmed {
    guard: SegmentGuard,
    active: bool,
}

impl Unarmed {
    /// The segment started: from here, it closes its stream if dropped.
    pub(crate) fn arm(&mut self) {
        self.guard.armed = self.active;
    }

    /// The segment reached its end and closed its stream itself.
    pub(crate) fn disarm(self) {
        self.guard.disarm();
    }
}

impl Drop for SegmentGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut closing: Vec<AgentEvent> = self
            .open
            .take()
            .into_iter()
            .rev()
            .map(|(call_id, parent_call_id, name)| AgentEvent::ToolFailed {
                error: format!(
                    "tool '{name}' was stopped: its run was dropped before the call ended"
                ),
                call_id,
                parent_call_id,
                name,
                duration_ms: 0,
            })
            .collect();
        closing.push(AgentEvent::RunFailed {
            error: format!(
                "run {} was stopped before it ended: whoever ran it stopped polling it (a cancelled or timed-out caller, or a host that dropped it)",
                self.run_id
            ),
        });
        self.sink.defer(closing);
    }
}
