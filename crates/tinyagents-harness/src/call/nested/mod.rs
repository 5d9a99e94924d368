//! The nested-call runner: a channel from tool futures to the loop that
//! polls them, plus the bookkeeping of one turn's nested calls (ids,
//! refusals, in-flight calls, concurrency holds and the parents' summaries).
//! A parent's summary is `summary`; how a call's end is reported when the
//! loop does not run it to its settlement is `ending`.

mod ending;
mod summary;

use std::collections::HashMap as StdHashMap;
use std::sync::Arc;

use foldhash::fast::FixedState;
use parking_lot::Mutex;
use serde_json::Value;
use tinyagents_core::{CallId, CancellationToken, TinyAgentsError, ToolResult};

use super::RunShared;
use crate::call::ToolEvents;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, mpsc, oneshot};
use tokio::time::Instant;

pub(crate) use summary::attach_summary;
use summary::{Summary, SummaryEntry, push_summary, render};

/// Refused nested calls a parent may have before later ones are refused
/// without evaluation.
pub(crate) const REFUSAL_CAP: u32 = 8;

/// A nested call on its way to the loop.
pub(crate) struct NestedRequest {
    pub(crate) parent: CallId,
    pub(crate) id: CallId,
    pub(crate) name: String,
    pub(crate) arguments: Value,
    pub(crate) reply: oneshot::Sender<Result<ToolResult, TinyAgentsError>>,
    /// The calling tool's `execute_tool` span: this call's opens under it.
    pub(crate) span: tracing::Span,
}

/// The runner's maps hash with foldhash's fast, fixed-seed hasher. Their
/// keys are call ids the harness itself made (`p1/2/1`), not input an
/// attacker chooses, so SipHash's flooding resistance buys nothing here and
/// costs a few hundred instructions per lookup; the fixed seed keeps their
/// order the same from run to run.
type HashMap<K, V> = StdHashMap<K, V, FixedState>;

/// How a nested call ended, for its parent's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NestedStatus {
    Ok,
    Error,
    Failed,
    Abandoned,
}

impl NestedStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
        }
    }
}

/// The kind of hold a nested call has on the run's shared/exclusive gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldKind {
    Shared,
    Exclusive,
}

/// A hold on the gate: acquired, or inherited from the parent.
pub(crate) enum Hold {
    Shared(#[allow(dead_code)] OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] OwnedRwLockWriteGuard<()>),
    Inherited,
}

struct InFlight {
    parent: CallId,
    name: String,
    /// It holds a place in its parent's refusal quota (charged on arrival,
    /// given back when admitted or abandoned, kept when refused).
    charged: bool,
    started: Instant,
    args: Option<String>,
    /// What it keeps for nested calls of its own.
    family: Family,
}

/// What a call keeps for its nested calls, with the call: one map lookup
/// reaches all of it, and it goes when the call does.
#[derive(Default)]
struct Family {
    /// It is running and may make nested calls (from its start, or its
    /// admission for a nested call, to its end).
    open: bool,
    /// The number of its last nested call (`p1/3` is its parent's third).
    last_child: u32,
    /// Its refused nested calls plus those being evaluated (a call is
    /// charged before its evaluation and given back when admitted).
    refusals: u32,
    /// The hold a nested call runs under (a model-issued one has none).
    hold: Option<HoldKind>,
    /// The gate the fan-out of an exclusive nested holder shares.
    child_gate: Option<Arc<RwLock<()>>>,
    summary: Summary,
}

/// A call whose end was claimed while its terminal event is delivered.
struct Ending {
    parent: CallId,
    name: String,
    duration_ms: u64,
}

/// The bookkeeping of one turn's nested calls. A call is `in_flight` from
/// the moment its `ToolStarted` was delivered until its end is claimed; it
/// is `ending` while its terminal event is being delivered. Whoever claims a
/// call's end (the call itself, its parent's settling, or the end of the
/// batch) delivers its one terminal event; a call swept while `ending` lost
/// its delivery to a drop, and the sweep delivers it.
#[derive(Default)]
struct RunnerState {
    /// The families of the batch's model-issued calls, from their start to
    /// their end.
    roots: HashMap<CallId, Family>,
    /// Nested calls, each with its family.
    in_flight: HashMap<CallId, InFlight>,
    ending: HashMap<CallId, Ending>,
}

impl RunnerState {
    /// The family of the call `id`. Ids are the harness's own: a nested
    /// call's has a `/` and is in flight; a model-issued call's has none
    /// (`CallId::model`) and is a root.
    fn family(&mut self, id: &CallId) -> Option<&mut Family> {
        if id.is_nested() {
            self.in_flight.get_mut(id).map(|flight| &mut flight.family)
        } else {
            self.roots.get_mut(id)
        }
    }
}

/// A nested call whose end was claimed by a sweep (its parent settled, or
/// the batch ended), for the loop to report with `ToolFailed`.
pub(crate) struct Abandoned {
    pub(crate) id: CallId,
    pub(crate) name: String,
    pub(crate) duration_ms: u64,
    pub(crate) error: String,
}

/// The runner of one turn's nested calls.
pub(crate) struct NestedRunner {
    tx: mpsc::UnboundedSender<NestedRequest>,
    state: Mutex<RunnerState>,
    gate: Arc<RwLock<()>>,
    cancel: CancellationToken,
    events: ToolEvents,
    /// The run, for the spans of the calls refused here.
    run: Arc<RunShared>,
}

pub(crate) fn parent_settled(name: &str, parent: &CallId, why: &str) -> TinyAgentsError {
    TinyAgentsError::tool_failed(
        name,
        format!("parent settled: {parent} {why} while nested call '{name}' was in flight"),
    )
}

impl NestedRunner {
    /// A runner and the receiving end the loop services.
    pub(crate) fn new(
        events: ToolEvents,
        cancel: CancellationToken,
        run: Arc<RunShared>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<NestedRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let runner = Self {
            tx,
            state: Mutex::new(RunnerState::default()),
            gate: Arc::new(RwLock::new(())),
            cancel,
            events,
            run,
        };
        (Arc::new(runner), rx)
    }

    /// Marks `call` as running: it may now make nested calls.
    pub(crate) fn activate(&self, call: &CallId) {
        self.state
            .lock()
            .roots
            .entry(call.clone())
            .or_default()
            .open = true;
    }

    /// Answers `request` with the parent-settled refusal, without events,
    /// when it never started and never will: its caller stopped waiting
    /// before the loop got to it, or its parent, whatever its origin, has
    /// ended since it sent the request (settled, timed out, abandoned: a
    /// task the parent spawned may outlive it). Gives the request back
    /// otherwise.
    pub(crate) fn drop_orphan(&self, request: NestedRequest) -> Option<NestedRequest> {
        let ended = self
            .state
            .lock()
            .family(&request.parent)
            .is_none_or(|family| !family.open);
        if !request.reply.is_closed() && !ended {
            return Some(request);
        }
        let _ = request.reply.send(Err(parent_settled(
            &request.name,
            &request.parent,
            "settled",
        )));
        None
    }

    /// Registers a call whose `ToolStarted` was delivered, and charges it
    /// against its parent's refusal quota before it is evaluated: `false`
    /// when the quota is spent (the call is refused without evaluation).
    /// The charge is given back when the call is admitted or abandoned and
    /// kept when it is refused, so however calls interleave, no more than
    /// the quota are ever evaluated towards refusal.
    pub(crate) fn started(
        &self,
        id: &CallId,
        parent: &CallId,
        name: &str,
        args: Option<String>,
    ) -> bool {
        let mut state = self.state.lock();
        // A parent already gone keeps no quota: the call is evaluated (and
        // refused as its parent's settling says).
        let charged = state.family(parent).is_none_or(|family| {
            let charged = family.refusals < REFUSAL_CAP;
            family.refusals += u32::from(charged);
            charged
        });
        state.in_flight.insert(
            id.clone(),
            InFlight {
                parent: parent.clone(),
                name: name.to_owned(),
                charged,
                started: Instant::now(),
                args,
                family: Family::default(),
            },
        );
        charged
    }

    /// Gives back a call's place in its parent's refusal quota.
    fn refund(state: &mut RunnerState, parent: &CallId, flight_charged: &mut bool) {
        if std::mem::take(flight_charged)
            && let Some(family) = state.family(parent)
        {
            family.refusals = family.refusals.saturating_sub(1);
        }
    }

    /// Records the hold an admitted call runs under; from now on it may
    /// make nested calls of its own.
    pub(crate) fn admitted(&self, id: &CallId, kind: HoldKind) {
        let mut state = self.state.lock();
        // A call whose end was claimed meanwhile makes no nested calls.
        let Some(flight) = state.in_flight.get_mut(id) else {
            return;
        };
        flight.family.hold = Some(kind);
        flight.family.open = true;
        let (parent, mut charged) = (flight.parent.clone(), std::mem::take(&mut flight.charged));
        Self::refund(&mut state, &parent, &mut charged);
    }

    /// Claims the end of a call: its summary entry is written, and the
    /// caller delivers its terminal event, then calls [`Self::ended`].
    /// `false` when its end was already claimed (by its parent's settling).
    pub(crate) fn claim(&self, id: &CallId, status: NestedStatus, error: Option<&str>) -> bool {
        let mut state = self.state.lock();
        let Some(flight) = state.in_flight.remove(id) else {
            return false;
        };
        self.close(&mut state, id, flight, status, error.unwrap_or_default());
        true
    }

    /// Moves a claimed call to `ending` and writes its summary entry.
    fn close(
        &self,
        state: &mut RunnerState,
        id: &CallId,
        mut flight: InFlight,
        status: NestedStatus,
        error: &str,
    ) {
        if status == NestedStatus::Abandoned {
            // Its caller left before it was decided: not a refusal.
            Self::refund(state, &flight.parent, &mut flight.charged);
        }
        let duration_ms = super::millis(flight.started);
        // Its hold and its children's gate go with it.
        drop(flight.family);
        // Without a listener a terminal event cannot be half-delivered.
        if self.events.is_active() {
            state.ending.insert(
                id.clone(),
                Ending {
                    parent: flight.parent.clone(),
                    name: flight.name.clone(),
                    duration_ms,
                },
            );
        }
        let entry = SummaryEntry {
            id: id.clone(),
            name: flight.name,
            status,
            duration_ms,
            args: flight.args,
            error: self.summary_error(status, error),
        };
        push_summary(state, &flight.parent, entry);
    }

    /// The terminal event of a claimed call was delivered.
    pub(crate) fn ended(&self, id: &CallId) {
        if self.events.is_active() {
            self.state.lock().ending.remove(id);
        }
    }

    /// The hold a nested call of `parent` runs under. Children of a
    /// model-issued call share the run's gate; the fan-out of an exclusive
    /// nested holder shares that holder's own gate, so its unsafe children
    /// still take turns without waiting on the run's gate their parent
    /// holds; the safe child of a shared holder runs under its parent's hold
    /// and never queues behind a waiting writer. A shared holder's unsafe
    /// child is refused: a shared hold cannot be upgraded.
    pub(crate) async fn acquire(
        &self,
        parent: &CallId,
        name: &str,
        shared: bool,
    ) -> Result<(Hold, HoldKind), TinyAgentsError> {
        let (parent_hold, gate) = {
            let mut state = self.state.lock();
            match state.family(parent) {
                Some(family) if family.hold == Some(HoldKind::Exclusive) => (
                    family.hold,
                    Arc::clone(
                        family
                            .child_gate
                            .get_or_insert_with(|| Arc::new(RwLock::new(()))),
                    ),
                ),
                family => (
                    family.and_then(|family| family.hold),
                    Arc::clone(&self.gate),
                ),
            }
        };
        match (parent_hold, shared) {
            (Some(HoldKind::Shared), true) => Ok((Hold::Inherited, HoldKind::Shared)),
            (Some(HoldKind::Shared), false) => Err(TinyAgentsError::tool_failed(
                name,
                format!(
                    "nested call '{name}' is not concurrency-safe, and its parent {parent} is: a shared hold cannot be upgraded to an exclusive one"
                ),
            )),
            (_, true) => Ok((Hold::Shared(gate.read_owned().await), HoldKind::Shared)),
            (_, false) => Ok((
                Hold::Exclusive(gate.write_owned().await),
                HoldKind::Exclusive,
            )),
        }
    }

    /// Ends `parent`: it may make no more nested calls; the end of each of
    /// its descendants still in flight is claimed as abandoned (the caller
    /// delivers their `ToolFailed` and calls [`Self::ended`]); its summary is
    /// returned for its result's metadata.
    pub(crate) fn finish_parent(&self, parent: &CallId) -> (Option<Value>, Vec<Abandoned>) {
        let mut state = self.state.lock();
        let made = state.family(parent).is_some_and(|family| {
            family.open = false;
            family.last_child > 0
        });
        if !made {
            // It made no nested calls: nothing to sweep, no summary.
            if !parent.is_nested() {
                state.roots.remove(parent);
            }
            return (None, Vec::new());
        }
        let ids: Vec<CallId> = state
            .in_flight
            .keys()
            .filter(|id| id.is_descendant_of(parent))
            .cloned()
            .collect();
        // Its abandoned children are in its summary.
        let abandoned = self.abandon(&mut state, ids);
        let summary = if parent.is_nested() {
            state
                .family(parent)
                .map(|family| std::mem::take(&mut family.summary))
        } else {
            state.roots.remove(parent).map(|family| family.summary)
        };
        let summary = summary.filter(|summary| !summary.is_empty());
        (summary.map(render), abandoned)
    }

    /// At the end of a batch: claims every call still in flight as
    /// abandoned, and returns those whose terminal event was never
    /// delivered (including claimed ones whose delivery was dropped).
    pub(crate) fn abandon_all(&self) -> Vec<Abandoned> {
        let mut state = self.state.lock();
        for family in state.roots.values_mut() {
            family.open = false;
        }
        let ids: Vec<CallId> = state.in_flight.keys().cloned().collect();
        let mut abandoned = self.abandon(&mut state, ids);
        let mut undelivered: Vec<CallId> = state
            .ending
            .keys()
            .filter(|id| !abandoned.iter().any(|a| &a.id == *id))
            .cloned()
            .collect();
        undelivered.sort_by(|a, b| b.depth().cmp(&a.depth()).then_with(|| a.cmp(b)));
        for id in undelivered {
            if let Some(ending) = state.ending.get(&id) {
                abandoned.push(Abandoned {
                    id: id.clone(),
                    name: ending.name.clone(),
                    duration_ms: ending.duration_ms,
                    error: parent_settled(&ending.name, &ending.parent, "settled").to_string(),
                });
            }
        }
        abandoned
    }

    /// Claims `ids` as abandoned, deepest first (a call's nested calls end
    /// before it does, as the tree closed from its leaves), in a fixed
    /// order whatever the map's.
    fn abandon(&self, state: &mut RunnerState, mut ids: Vec<CallId>) -> Vec<Abandoned> {
        ids.sort_by(|a, b| b.depth().cmp(&a.depth()).then_with(|| a.cmp(b)));
        let mut abandoned = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(flight) = state.in_flight.remove(&id) else {
                continue;
            };
            let error = parent_settled(&flight.name, &flight.parent, "settled").to_string();
            abandoned.push(Abandoned {
                id: id.clone(),
                name: flight.name.clone(),
                duration_ms: super::millis(flight.started),
                error: error.clone(),
            });
            self.close(state, &id, flight, NestedStatus::Abandoned, &error);
        }
        abandoned
    }
}

impl NestedRunner {
    /// Sends `name(arguments)` as a nested call of `parent` to the loop and
    /// waits for its answer.
    pub(crate) async fn call(
        &self,
        parent: &CallId,
        name: &str,
        arguments: Value,
        span: &tracing::Span,
    ) -> Result<ToolResult, TinyAgentsError> {
        let id = {
            let mut state = self.state.lock();
            match state.family(parent) {
                Some(family) if family.open => {
                    family.last_child += 1;
                    parent.child(family.last_child)
                }
                _ => return Err(parent_settled(name, parent, "has settled")),
            }
        };
        if self.cancel.is_cancelled() {
            // The loop is going away and will not service the request: the
            // refusal is settled here, with the events and the summary entry
            // every refused call has.
            let message = format!("nested call '{name}' refused: the run was cancelled");
            self.refuse_here(&id, parent, name, &arguments, &message, span)
                .await;
            return Err(TinyAgentsError::tool_failed(name, message));
        }
        let (reply, answer) = oneshot::channel();
        let request = NestedRequest {
            parent: parent.clone(),
            id,
            name: name.to_owned(),
            arguments,
            reply,
            span: span.clone(),
        };
        if self.tx.send(request).is_err() {
            return Err(parent_settled(name, parent, "has settled"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(parent_settled(name, parent, "has settled")))
    }
}
