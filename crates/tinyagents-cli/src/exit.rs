//! The exit codes of `tinyagents`.

/// The run completed (or a tool ended it); the command did what it was
/// asked.
pub const OK: u8 = 0;
/// The run failed, or the command could not do what it was asked.
pub const FAILED: u8 = 1;
/// A bad invocation, a bad agents file, or input naming what is not there
/// (an unknown run, a call that does not wait).
pub const USAGE: u8 = 2;
/// The run waits for a person's decision: `approve`, then `resume`.
pub const AWAITING_APPROVAL: u8 = 3;
/// A limit stopped the run.
pub const LIMIT: u8 = 4;
/// The run was cancelled (Ctrl-C), as a shell reports SIGINT.
pub const CANCELLED: u8 = 130;
