//! For ledger backends outside this crate (the PostgreSQL one): the state
//! machine every backend applies, so that they all refuse the same things
//! with the same errors, and the stored text of the rows' enums.
//!
//! A backend reads what it stores of a row, asks the `check_*` function
//! what the operation may do, and writes only on `Ok`. The conformance
//! suite (feature `conformance`) then holds it to the same behaviour as the
//! backends of this crate.

use std::sync::{Mutex, PoisonError};

use crate::error::{LedgerError, LedgerResult};

pub use crate::rules::{
    Existing, ResolveWrite, Start, check_checkpoint, check_resolve, check_settle, check_start,
    control_str, parse_control, parse_replay, replay_str,
};

/// The SQL predicate of a call whose effect is unknown
/// ([`LedgerRow::is_unresolved`](crate::LedgerRow::is_unresolved)) over
/// columns named as this crate names them: `status`, `replay`,
/// `resolved_effect`, holding the stored texts.
pub const UNRESOLVED_SQL: &str = "(status = 'started' OR (status = 'interrupted' AND replay = \
     'never' AND (resolved_effect IS NULL OR resolved_effect = 'unknown')))";

/// Failures of writes whose callers did not wait (a settled row sent for a
/// call known to be in flight, a write that rode on a commit that failed),
/// kept until the next flush reports them as one
/// [`LedgerError::Deferred`].
#[derive(Debug, Default)]
pub struct Deferred(Mutex<DeferredErrors>);

#[derive(Debug, Default)]
struct DeferredErrors {
    count: usize,
    first: Option<LedgerError>,
}

impl Deferred {
    /// Keeps `err` (the first one is the one reported).
    pub fn push(&self, err: LedgerError) {
        let mut errors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        errors.count += 1;
        errors.first.get_or_insert(err);
    }

    /// Takes the failures since the last call, as one error.
    pub fn take(&self) -> LedgerResult<()> {
        let mut errors = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = std::mem::take(&mut errors.count);
        match errors.first.take() {
            Some(first) => Err(LedgerError::Deferred {
                count,
                first: Box::new(first),
            }),
            None => Ok(()),
        }
    }
}
