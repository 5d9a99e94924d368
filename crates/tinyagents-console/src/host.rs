//! What the console asks of its host: to resume and to recover runs. The
//! console records decisions and findings itself; running an agent again
//! needs the agents, which only the host can build.

use async_trait::async_trait;
use tinyagents_core::RunId;

/// An error a host's hook returned, in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

impl HostError {
    /// An error saying `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

/// Runs the console cannot run itself. Each hook starts the work and
/// returns what a person should read (for example "resuming in process
/// 4242"); the console shows the run's progress from the stores. A hook
/// that errors or panics is shown as such, and nothing is recorded for it.
#[async_trait]
pub trait ConsoleHost: Send + Sync + 'static {
    /// Resumes `run`, whose waiting calls are all decided (the same path as
    /// `tinyagents resume`).
    async fn resume(&self, run: &RunId) -> Result<String, HostError>;

    /// Recovers `run` (a run whose holder is gone, or that failed part
    /// way); when its ledger has it finished, asks the tools of its calls
    /// in doubt again (the same path as `tinyagents recover`).
    async fn recover(&self, run: &RunId) -> Result<String, HostError>;
}
