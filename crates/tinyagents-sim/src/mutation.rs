//! The mutations the simulator's own tests plant in the harness (with the
//! `mutations` feature, which turns on the harness's `sim-mutations`), one
//! per invariant, to show that the checker fails when the harness is
//! wrong.

/// Every mutation: its name and the invariant it breaks (empty without the
/// `mutations` feature).
#[cfg(feature = "mutations")]
pub fn mutations() -> Vec<(&'static str, usize)> {
    tinyagents_harness::mutation::MUTATIONS
        .iter()
        .map(|(name, _, invariant)| (*name, *invariant))
        .collect()
}

/// Every mutation: none in a build without the `mutations` feature.
#[cfg(not(feature = "mutations"))]
pub fn mutations() -> Vec<(&'static str, usize)> {
    Vec::new()
}

/// Plants the mutation `name` for the whole process (`None` removes it).
#[cfg(feature = "mutations")]
pub fn plant(name: Option<&str>) -> Result<(), String> {
    tinyagents_harness::mutation::plant(name)
}

/// Refuses: this build has no planted mutations.
#[cfg(not(feature = "mutations"))]
pub fn plant(name: Option<&str>) -> Result<(), String> {
    match name {
        None => Ok(()),
        Some(name) => Err(format!(
            "this build cannot plant `{name}`: build with `--features mutations`"
        )),
    }
}
