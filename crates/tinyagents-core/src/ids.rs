//! Identifiers: runs, calls, agents and sessions.
//!
//! A [`CallId`] is a path. The harness gives every model-issued call its own
//! id `p1`, `p2`, … (unique in the run), and a nested call extends its
//! parent's id: `p1/1`, `p1/1/1`. The provider's own id is kept beside it on
//! the [`ToolCall`](crate::ToolCall), so providers that repeat or omit ids
//! never collide.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps an existing identifier.
            pub fn new(id: impl AsRef<str>) -> Self {
                Self(Arc::from(id.as_ref()))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self::new(id)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(Arc::from(id))
            }
        }
    };
}

string_id!(
    /// Identifies one run of an agent. Unique per process unless the host
    /// supplies its own (for example to resume a persisted run).
    RunId
);
string_id!(
    /// Identifies an agent definition.
    AgentId
);
string_id!(
    /// Identifies a conversation session.
    SessionId
);

static RUN_COUNTER: AtomicU64 = AtomicU64::new(1);

impl RunId {
    /// A fresh run id, unique in this process and unlikely to collide across
    /// processes (it mixes the wall-clock time and the process id).
    pub fn generate() -> Self {
        let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self::from(format!("run-{:x}-{:x}-{n}", nanos, std::process::id()))
    }
}

/// The id of one tool call inside a run: `p<k>` for the k-th call the model
/// issued, and `<parent>/<n>` for the n-th nested call of a parent.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(Arc<str>);

impl CallId {
    /// The id of the `index`-th model-issued call of a run (1-based): `p<index>`.
    pub fn model(index: u64) -> Self {
        Self(Arc::from(format!("p{index}")))
    }

    /// Wraps an id read back from storage or written by hand.
    pub fn new(id: impl AsRef<str>) -> Self {
        Self(Arc::from(id.as_ref()))
    }

    /// The id of this call's `n`-th nested call (n counts from 1): `<self>/<n>`.
    pub fn child(&self, n: u32) -> Self {
        Self(Arc::from(format!("{}/{n}", self.0)))
    }

    /// The immediate parent of a nested call, `None` for a model-issued call.
    pub fn parent(&self) -> Option<Self> {
        self.0
            .rfind('/')
            .map(|slash| Self(Arc::from(&self.0[..slash])))
    }

    /// The nesting level: 0 for a call the model issued, 1 for what its tool
    /// calls, and so on.
    pub fn depth(&self) -> u32 {
        // A call id is a short path; its segment count always fits in u32.
        u32::try_from(self.0.bytes().filter(|b| *b == b'/').count()).unwrap_or(u32::MAX)
    }

    /// Whether this id names a nested call.
    pub fn is_nested(&self) -> bool {
        self.0.contains('/')
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallId({:?})", &*self.0)
    }
}

impl From<&str> for CallId {
    fn from(id: &str) -> Self {
        Self::new(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_id_paths() {
        let p1 = CallId::model(1);
        assert_eq!(p1.as_str(), "p1");
        assert_eq!(p1.depth(), 0);
        assert_eq!(p1.parent(), None);
        let nested = p1.child(1).child(2);
        assert_eq!(nested.as_str(), "p1/1/2");
        assert_eq!(nested.depth(), 2);
        assert_eq!(nested.parent(), Some(CallId::new("p1/1")));
        assert!(nested.is_nested());
        assert!(!p1.is_nested());
    }

    #[test]
    fn run_ids_are_unique() {
        assert_ne!(RunId::generate(), RunId::generate());
    }
}
