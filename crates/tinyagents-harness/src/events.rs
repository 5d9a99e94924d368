//! Where a run's events go: a bounded channel, so a slow consumer slows the
//! run instead of growing memory.

use std::sync::Arc;

use tinyagents_core::{AgentEvent, AgentId, CallId};
use tokio::sync::mpsc;

/// The receiving end of a run's events.
pub type EventReceiver = mpsc::Receiver<AgentEvent>;

/// A bounded event channel of `capacity` events (at least 1).
pub fn event_channel(capacity: usize) -> (EventSink, EventReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (
        EventSink {
            tx: Some(tx),
            scope: None,
        },
        rx,
    )
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

/// Where the loop sends events. [`EventSink::none`] discards them at no
/// cost: events are not even built.
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    tx: Option<mpsc::Sender<AgentEvent>>,
    scope: Option<Arc<DelegationScope>>,
}

impl EventSink {
    /// A sink that discards events.
    pub fn none() -> Self {
        Self {
            tx: None,
            scope: None,
        }
    }

    /// A sink over an existing sender.
    pub fn from_sender(tx: mpsc::Sender<AgentEvent>) -> Self {
        Self {
            tx: Some(tx),
            scope: None,
        }
    }

    /// A sink for a run delegated by the call `parent_call_id`: its events
    /// reach this sink's receiver wrapped in `AgentEvent::Delegated`.
    pub fn delegated(&self, parent_call_id: CallId, agent_id: AgentId, depth: u32) -> Self {
        Self {
            tx: self.tx.clone(),
            scope: Some(Arc::new(DelegationScope {
                parent_call_id,
                agent_id,
                depth,
                outer: self.scope.clone(),
            })),
        }
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
        self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Sends the event `build` makes, waiting for room in the buffer; builds
    /// nothing when nobody listens. A dropped receiver is not an error.
    pub async fn emit(&self, build: impl FnOnce() -> AgentEvent) {
        if let Some(tx) = self.tx.as_ref().filter(|tx| !tx.is_closed()) {
            let _ = tx.send(self.wrap(build())).await;
        }
    }

    /// Sends without waiting; drops the event when the buffer is full. For
    /// advisory events (progress, streamed deltas) from synchronous code.
    pub fn try_emit(&self, event: AgentEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(self.wrap(event));
        }
    }
}
