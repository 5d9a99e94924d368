//! Typed values a host or the harness attaches to a run, for hooks that need
//! more than the context's fixed fields (the harness attaches the run's tool
//! registry here, so policies can read a tool's spec).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use crate::call::ToolCall;
use crate::hash::args_hash;
use crate::ids::{CallId, RunId};

/// A small map from type to value. Values are shared (`Arc`), so cloning a
/// context does not copy them.
#[derive(Clone, Default)]
pub struct Extensions {
    values: Vec<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.values.len())
            .finish()
    }
}

impl Extensions {
    /// Attaches `value`, replacing any value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.values.retain(|v| !v.is::<T>());
        self.values.push(value);
    }

    /// The shared value of type `T`, if attached.
    pub fn get_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.values
            .iter()
            .find(|v| v.is::<T>())
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// The value of type `T`, if attached.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.values.iter().find_map(|v| v.downcast_ref::<T>())
    }
}

/// Approvals granted for a run's calls. Each binds the run, the call id,
/// the tool's name and the hash of the call's prepared arguments: a call
/// that differs in any of them is not approved by it. An approval is single
/// use: the harness consumes it when its call is admitted to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    granted: HashMap<CallId, Grant>,
}

/// What one approval binds besides the call id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    run: RunId,
    tool: String,
    args_hash: String,
}

impl Approvals {
    /// Approves `call` of `run` as it is (its tool and arguments).
    pub fn grant(&mut self, run: &RunId, call: &ToolCall) {
        self.grant_hashed(run, &call.id, &call.name, args_hash(&call.arguments));
    }

    /// Approves the call `call` of `run` to tool `tool` with arguments
    /// hashing to `args_hash` ([`args_hash`](crate::args_hash)).
    pub fn grant_hashed(&mut self, run: &RunId, call: &CallId, tool: &str, args_hash: String) {
        self.granted.insert(
            call.clone(),
            Grant {
                run: run.clone(),
                tool: tool.to_owned(),
                args_hash,
            },
        );
    }

    /// Whether this exact call of `run` (id, tool and arguments) is approved.
    pub fn is_call_approved(&self, run: &RunId, call: &ToolCall) -> bool {
        self.granted.get(&call.id).is_some_and(|grant| {
            grant.run == *run
                && grant.tool == call.name
                && grant.args_hash == args_hash(&call.arguments)
        })
    }

    /// Consumes the approval of `call` of `run`: whether it was approved.
    /// An approval that does not match the call is withdrawn too.
    pub fn consume(&mut self, run: &RunId, call: &ToolCall) -> bool {
        let approved = self.is_call_approved(run, call);
        self.granted.remove(&call.id);
        approved
    }

    /// Whether nothing is approved.
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty()
    }
}
