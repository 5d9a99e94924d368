//! Typed values a host or the harness attaches to a run, for hooks that need
//! more than the context's fixed fields (the harness attaches the run's tool
//! registry here, so policies can read a tool's spec).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use crate::call::ToolCall;
use crate::hash::args_hash;
use crate::ids::CallId;

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

/// Approvals a person granted, each bound to a call id and the hash of the
/// call's arguments: a changed call is not approved by it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvals {
    granted: HashMap<CallId, String>,
}

impl Approvals {
    /// Grants the call `call_id` with arguments hashing to `args_hash`.
    pub fn grant(&mut self, call_id: CallId, args_hash: String) {
        self.granted.insert(call_id, args_hash);
    }

    /// Whether this exact call (id and arguments) was approved.
    pub fn is_call_approved(&self, call: &ToolCall) -> bool {
        self.granted
            .get(&call.id)
            .is_some_and(|hash| *hash == args_hash(&call.arguments))
    }

    /// Whether nothing was approved.
    pub fn is_empty(&self) -> bool {
        self.granted.is_empty()
    }
}
