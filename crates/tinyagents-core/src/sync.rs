//! Atomics and the lock, swapped for loom's under `--cfg tinyagents_loom` so
//! the budget's compare-and-swap loops and the spend tree's reservations
//! can be model-checked.

#[cfg(tinyagents_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(tinyagents_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(tinyagents_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(tinyagents_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// The lock's guard, whether or not a holder panicked: every writer of what
/// it guards leaves it whole before anything that can panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
