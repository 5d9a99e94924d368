//! What outlives a process: recovering a run whose process died from its
//! last checkpoint, resuming a suspended run with a person's decisions
//! (after checking the stored state never widens what the run may do), the
//! sealed form of a suspended run, and reconciling a finished run's calls
//! in doubt. Each drives the loop (`crate::turns`) from a restored state.

mod reconcile;
mod recover;
mod resume;
mod resume_check;
pub(crate) mod seal;

pub use resume::ResumeOptions;
