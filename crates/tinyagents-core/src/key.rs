//! The idempotency key of a call: what a service that refuses duplicates
//! (a payment API) is given, and what a tool's reconciliation looks up.

use std::fmt;

use crate::ids::{CallId, RunId};

/// The identity of a call for services that refuse duplicates (a payment
/// API's idempotency key): the same call replayed gets the same key, and
/// after a crash a tool can ask its service whether the call with this key
/// happened.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// The run.
    pub run_id: RunId,
    /// The call.
    pub call_id: CallId,
    /// A hash of the prepared arguments ([`args_hash`](crate::args_hash)).
    pub args_hash: String,
}

impl fmt::Display for IdempotencyKey {
    /// `run:call:hash`, the form a tool sends to its service.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.run_id, self.call_id, self.args_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_reads_run_call_hash() {
        let key = IdempotencyKey {
            run_id: RunId::from("r1"),
            call_id: CallId::new("p2/1"),
            args_hash: "ab12".into(),
        };
        assert_eq!(key.to_string(), "r1:p2/1:ab12");
    }
}
