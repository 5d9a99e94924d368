//! Mutations planted for the simulator's own tests (`tinyagents-sim`, with
//! the `sim-mutations` feature): each breaks one invariant the simulator
//! checks, so its tests can show that some seed catches it. Without the
//! feature, [`planted`] is a constant `false` and every planted branch
//! compiles away.

/// A planted mutation, and the invariant it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim-mutations"), allow(dead_code))]
#[allow(unreachable_pub)] // public only with the feature
pub enum Mutation {
    /// 1: nested calls skip every middleware's `check_nested_tool`.
    SkipNestedPolicy = 1,
    /// 2: a nested call refused after its budget slot was reserved keeps it.
    KeepRefusedSlot,
    /// 3: a nested call that completes gets a second `ToolCompleted`.
    SecondTerminal,
    /// 4: a failed run ends without its `RunFailed`.
    SilentFailure,
    /// 5: recovery runs a `ToolReplay::Never` call in doubt again.
    ReplayNever,
    /// 6: tool events carry arguments and results unredacted.
    UnredactedEvents,
    /// 7: recovery leaves the rows it did not run again started.
    LeaveInDoubtStarted,
}

#[cfg(feature = "sim-mutations")]
mod switch {
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::Mutation;

    static PLANTED: AtomicU8 = AtomicU8::new(0);

    /// Every mutation, by the name the simulator plants it under, with the
    /// invariant it breaks.
    pub const MUTATIONS: [(&str, Mutation, usize); 7] = [
        ("skip-nested-policy", Mutation::SkipNestedPolicy, 1),
        ("keep-refused-slot", Mutation::KeepRefusedSlot, 2),
        ("second-terminal", Mutation::SecondTerminal, 3),
        ("silent-failure", Mutation::SilentFailure, 4),
        ("replay-never", Mutation::ReplayNever, 5),
        ("unredacted-events", Mutation::UnredactedEvents, 6),
        ("leave-in-doubt-started", Mutation::LeaveInDoubtStarted, 7),
    ];

    /// Plants the mutation `name` (`None` removes any) for the whole
    /// process.
    pub fn plant(name: Option<&str>) -> Result<(), String> {
        let value = match name {
            None => 0,
            Some(name) => MUTATIONS
                .iter()
                .find(|(known, ..)| *known == name)
                .map(|(_, mutation, _)| *mutation as u8)
                .ok_or_else(|| {
                    let known: Vec<&str> = MUTATIONS.iter().map(|(n, ..)| *n).collect();
                    format!("no mutation `{name}` (known: {})", known.join(", "))
                })?,
        };
        PLANTED.store(value, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn planted(mutation: Mutation) -> bool {
        PLANTED.load(Ordering::Relaxed) == mutation as u8
    }
}

#[cfg(feature = "sim-mutations")]
pub use switch::{MUTATIONS, plant};

/// Whether `mutation` is planted.
#[cfg(feature = "sim-mutations")]
pub(crate) fn planted(mutation: Mutation) -> bool {
    switch::planted(mutation)
}

/// Whether `mutation` is planted: never, in a build without the feature.
#[cfg(not(feature = "sim-mutations"))]
#[inline(always)]
pub(crate) const fn planted(_mutation: Mutation) -> bool {
    false
}
