//! Atomics, swapped for loom's under `--cfg tinyagents_loom` so the budget's
//! compare-and-swap loops can be model-checked.

#[cfg(tinyagents_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(tinyagents_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
