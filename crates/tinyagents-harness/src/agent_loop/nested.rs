//! The nested-call runner: a channel from tool futures to the loop that
//! polls them, plus the bookkeeping of one turn's nested calls (ids,
//! refusals, in-flight calls, concurrency holds and the parents' summaries).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tinyagents_core::{CallId, TinyAgentsError, ToolResult};
use tinytools::cut;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, mpsc, oneshot};
use tokio::time::Instant;

use crate::tool::NestedToolRunner;

/// Refused nested calls a parent may have before later ones are refused
/// without evaluation.
pub(crate) const REFUSAL_CAP: u32 = 8;
/// Entries kept in a parent's `nested_calls` summary.
pub(crate) const SUMMARY_CAP: usize = 32;
/// Bytes of a nested call's serialised arguments kept in its summary entry.
pub(crate) const SUMMARY_ARGS_BYTES: usize = 1024;
/// Bytes of a nested call's error kept in its summary entry.
pub(crate) const SUMMARY_ERROR_BYTES: usize = 256;

/// A nested call on its way to the loop.
pub(crate) struct NestedRequest {
    pub(crate) parent: CallId,
    pub(crate) id: CallId,
    pub(crate) name: String,
    pub(crate) arguments: Value,
    pub(crate) reply: oneshot::Sender<Result<ToolResult, TinyAgentsError>>,
}

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
    started: Instant,
    args: Option<String>,
}

/// One ended call, as its parent's summary lists it.
struct SummaryEntry {
    id: CallId,
    name: String,
    status: NestedStatus,
    duration_ms: u64,
    args: Option<String>,
    error: Option<String>,
}

#[derive(Default)]
struct Summary {
    entries: Vec<SummaryEntry>,
    truncated: u64,
}

#[derive(Default)]
struct RunnerState {
    active: HashSet<CallId>,
    next_child: HashMap<CallId, u32>,
    refusals: HashMap<CallId, u32>,
    in_flight: HashMap<CallId, InFlight>,
    holds: HashMap<CallId, HoldKind>,
    summaries: HashMap<CallId, Summary>,
}

/// A nested call ended by its parent's settling, for the loop to report.
pub(crate) struct Abandoned {
    pub(crate) id: CallId,
    pub(crate) parent: CallId,
    pub(crate) name: String,
    pub(crate) duration_ms: u64,
}

/// The runner of one turn's nested calls.
pub(crate) struct NestedRunner {
    tx: mpsc::UnboundedSender<NestedRequest>,
    state: Mutex<RunnerState>,
    gate: Arc<RwLock<()>>,
    capture_args: bool,
}

fn parent_settled(name: &str, parent: &CallId, why: &str) -> TinyAgentsError {
    TinyAgentsError::ToolFailed {
        tool: name.to_owned(),
        message: format!("parent settled: {parent} {why} while nested call '{name}' was in flight"),
    }
}

impl NestedRunner {
    /// A runner and the receiving end the loop services.
    pub(crate) fn new(capture_args: bool) -> (Arc<Self>, mpsc::UnboundedReceiver<NestedRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let runner = Self {
            tx,
            state: Mutex::new(RunnerState::default()),
            gate: Arc::new(RwLock::new(())),
            capture_args,
        };
        (Arc::new(runner), rx)
    }

    /// Marks `call` as running: it may now make nested calls.
    pub(crate) fn activate(&self, call: &CallId) {
        self.state.lock().active.insert(call.clone());
    }

    /// Whether `parent` already had its quota of refusals.
    pub(crate) fn refusals_exhausted(&self, parent: &CallId) -> bool {
        self.state.lock().refusals.get(parent).copied().unwrap_or(0) >= REFUSAL_CAP
    }

    /// Counts a refusal against `parent`'s quota.
    pub(crate) fn note_refusal(&self, parent: &CallId) {
        *self
            .state
            .lock()
            .refusals
            .entry(parent.clone())
            .or_insert(0) += 1;
    }

    /// The serialised arguments a summary keeps (only under capture).
    pub(crate) fn summary_args(&self, arguments: &Value) -> Option<String> {
        self.capture_args
            .then(|| cut(&arguments.to_string(), SUMMARY_ARGS_BYTES))
    }

    /// Records a call that ended without running (refused at admission).
    pub(crate) fn record_refused(
        &self,
        id: &CallId,
        parent: &CallId,
        name: &str,
        args: Option<String>,
        error: &str,
    ) {
        let entry = SummaryEntry {
            id: id.clone(),
            name: name.to_owned(),
            status: NestedStatus::Failed,
            duration_ms: 0,
            args,
            error: self.summary_error(NestedStatus::Failed, error),
        };
        push_summary(&mut self.state.lock(), parent, entry);
    }

    /// Registers a call that starts running, with its hold on the gate.
    pub(crate) fn start(
        &self,
        id: &CallId,
        parent: &CallId,
        name: &str,
        args: Option<String>,
        hold: Option<HoldKind>,
    ) {
        let mut state = self.state.lock();
        state.in_flight.insert(
            id.clone(),
            InFlight {
                parent: parent.clone(),
                name: name.to_owned(),
                started: Instant::now(),
                args,
            },
        );
        if let Some(kind) = hold {
            state.holds.insert(id.clone(), kind);
        }
    }

    /// Ends a running call. `false` when it had already been ended as
    /// abandoned by its parent's settling: the caller then reports nothing.
    pub(crate) fn end(&self, id: &CallId, status: NestedStatus, error: Option<&str>) -> bool {
        let error = error.and_then(|e| self.summary_error(status, e));
        let mut state = self.state.lock();
        let Some(flight) = state.in_flight.remove(id) else {
            return false;
        };
        state.holds.remove(id);
        let entry = SummaryEntry {
            id: id.clone(),
            name: flight.name,
            status,
            duration_ms: super::millis(flight.started),
            args: flight.args,
            error,
        };
        push_summary(&mut state, &flight.parent, entry);
        true
    }

    fn summary_error(&self, status: NestedStatus, error: &str) -> Option<String> {
        let keep = self.capture_args || status == NestedStatus::Abandoned;
        (keep && !error.is_empty()).then(|| cut(error, SUMMARY_ERROR_BYTES))
    }

    /// The hold a nested call of `parent` runs under: inherited from a
    /// nested parent, acquired when the parent was model-issued. A safe
    /// parent's unsafe child is refused (a shared hold cannot be upgraded).
    pub(crate) async fn acquire(
        &self,
        parent: &CallId,
        name: &str,
        shared: bool,
    ) -> Result<(Hold, HoldKind), TinyAgentsError> {
        let parent_hold = self.state.lock().holds.get(parent).copied();
        match (parent_hold, shared) {
            (Some(HoldKind::Exclusive), _) => Ok((Hold::Inherited, HoldKind::Exclusive)),
            (Some(HoldKind::Shared), true) => Ok((Hold::Inherited, HoldKind::Shared)),
            (Some(HoldKind::Shared), false) => Err(TinyAgentsError::ToolFailed {
                tool: name.to_owned(),
                message: format!(
                    "nested call '{name}' is not concurrency-safe, and its parent {parent} is: a shared hold cannot be upgraded to an exclusive one"
                ),
            }),
            (None, true) => Ok((
                Hold::Shared(Arc::clone(&self.gate).read_owned().await),
                HoldKind::Shared,
            )),
            (None, false) => Ok((
                Hold::Exclusive(Arc::clone(&self.gate).write_owned().await),
                HoldKind::Exclusive,
            )),
        }
    }

    /// Ends `parent`: it may make no more nested calls; its descendants
    /// still in flight are abandoned (reported by the caller); its summary
    /// is returned for its result's metadata.
    pub(crate) fn finish_parent(&self, parent: &CallId) -> (Option<Value>, Vec<Abandoned>) {
        let mut state = self.state.lock();
        state.active.remove(parent);
        let ids: Vec<CallId> = state
            .in_flight
            .keys()
            .filter(|id| descends_from(id, parent))
            .cloned()
            .collect();
        if ids.is_empty() {
            return (state.summaries.remove(parent).map(render), Vec::new());
        }
        drop(state);
        let mut abandoned = Vec::with_capacity(ids.len());
        for id in ids {
            let Some((name, child_parent, duration_ms)) = self.peek(&id) else {
                continue;
            };
            let error = parent_settled(&name, parent, "settled").to_string();
            if self.end(&id, NestedStatus::Abandoned, Some(&error)) {
                abandoned.push(Abandoned {
                    id,
                    parent: child_parent,
                    name,
                    duration_ms,
                });
            }
        }
        let summary = self.state.lock().summaries.remove(parent);
        (summary.map(render), abandoned)
    }

    /// Abandons everything still in flight (the run was cancelled).
    pub(crate) fn abandon_all(&self) -> Vec<Abandoned> {
        let ids: Vec<CallId> = self.state.lock().in_flight.keys().cloned().collect();
        let mut abandoned = Vec::with_capacity(ids.len());
        for id in ids {
            let Some((name, parent, duration_ms)) = self.peek(&id) else {
                continue;
            };
            let error = parent_settled(&name, &parent, "was cancelled").to_string();
            if self.end(&id, NestedStatus::Abandoned, Some(&error)) {
                abandoned.push(Abandoned {
                    id,
                    parent,
                    name,
                    duration_ms,
                });
            }
        }
        self.state.lock().active.clear();
        abandoned
    }

    fn peek(&self, id: &CallId) -> Option<(String, CallId, u64)> {
        let state = self.state.lock();
        let flight = state.in_flight.get(id)?;
        Some((
            flight.name.clone(),
            flight.parent.clone(),
            super::millis(flight.started),
        ))
    }
}

fn push_summary(state: &mut RunnerState, parent: &CallId, entry: SummaryEntry) {
    let summary = state.summaries.entry(parent.clone()).or_default();
    if summary.entries.len() < SUMMARY_CAP {
        summary.entries.push(entry);
    } else {
        summary.truncated += 1;
    }
}

/// Whether `id` is a descendant of `parent` (`<parent>/...`).
fn descends_from(id: &CallId, parent: &CallId) -> bool {
    id.as_str()
        .strip_prefix(parent.as_str())
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The error text of an abandoned call.
pub(crate) fn abandoned_error(abandoned: &Abandoned) -> String {
    parent_settled(&abandoned.name, &abandoned.parent, "settled").to_string()
}

fn render(summary: Summary) -> Value {
    let entries: Vec<Value> = summary
        .entries
        .into_iter()
        .map(|entry| {
            let mut object = Map::new();
            object.insert("id".into(), json!(entry.id));
            object.insert("name".into(), json!(entry.name));
            object.insert("status".into(), json!(entry.status.as_str()));
            object.insert("duration_ms".into(), json!(entry.duration_ms));
            if let Some(args) = entry.args {
                object.insert("args".into(), json!(args));
            }
            if let Some(error) = entry.error {
                object.insert("error".into(), json!(error));
            }
            Value::Object(object)
        })
        .collect();
    let mut out = Map::new();
    out.insert("nested_calls".into(), Value::Array(entries));
    if summary.truncated > 0 {
        out.insert("nested_calls_truncated".into(), json!(summary.truncated));
    }
    Value::Object(out)
}

/// Adds a parent's summary to its result's metadata, when that metadata is
/// absent or an object.
pub(crate) fn attach_summary(result: &mut ToolResult, summary: Value) {
    let Value::Object(summary) = summary else {
        return;
    };
    match &mut result.metadata {
        None => result.metadata = Some(Value::Object(summary)),
        Some(Value::Object(existing)) => existing.extend(summary),
        Some(_) => {}
    }
}

#[async_trait]
impl NestedToolRunner for NestedRunner {
    async fn call(
        &self,
        parent: &CallId,
        name: &str,
        arguments: Value,
    ) -> Result<ToolResult, TinyAgentsError> {
        let id = {
            let mut state = self.state.lock();
            if !state.active.contains(parent) {
                return Err(parent_settled(name, parent, "has settled"));
            }
            let n = state.next_child.entry(parent.clone()).or_insert(0);
            *n += 1;
            parent.child(*n)
        };
        let (reply, answer) = oneshot::channel();
        let request = NestedRequest {
            parent: parent.clone(),
            id,
            name: name.to_owned(),
            arguments,
            reply,
        };
        if self.tx.send(request).is_err() {
            return Err(parent_settled(name, parent, "has settled"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(parent_settled(name, parent, "has settled")))
    }
}

/// The runner installed when nesting is off: every call is refused.
pub(crate) struct DisabledRunner;

#[async_trait]
impl NestedToolRunner for DisabledRunner {
    async fn call(
        &self,
        _parent: &CallId,
        name: &str,
        _arguments: Value,
    ) -> Result<ToolResult, TinyAgentsError> {
        Err(TinyAgentsError::NestedDisabled {
            tool: name.to_owned(),
        })
    }
}
