//! Holding a run while this process runs it: the lease renewed every
//! third of its length, and the run cancelled if another process has taken
//! it (its lease ran out while this one was stopped, and a recovery or a
//! worker claimed it). The fence of the run's ledger writes (PostgreSQL)
//! or the epoch of its record's end keeps such a process from writing
//! anything that counts.

use std::time::Duration;

use tinyagents::core::{CancellationToken, RunId};
use tinyagents::runs::{Hold, SharedRunStore};

/// How long this command's claims hold a run without a renewal.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// This process as the holder of the runs it runs.
pub(crate) fn this_process() -> Hold {
    Hold::this_process(None, LEASE)
}

/// Renews a held run's lease until dropped.
pub(crate) struct Keeper {
    task: tokio::task::JoinHandle<()>,
}

impl Keeper {
    /// Keeps `run`, held under `epoch`, for `hold`; cancels `stop` when the
    /// run turns out to be taken by another claim.
    pub(crate) fn keep(
        runs: SharedRunStore,
        hold: &Hold,
        run: RunId,
        epoch: u64,
        stop: CancellationToken,
    ) -> Self {
        let owner = hold.holder.owner.clone();
        let lease = hold.lease;
        let task = tokio::spawn(async move {
            let held = [(run, epoch)];
            loop {
                tokio::time::sleep(lease / 3).await;
                match runs.renew(&owner, lease, &held).await {
                    Ok(renewed) if renewed.is_empty() => {
                        eprintln!(
                            "warning: run {} was taken by another process; this one stops it",
                            held[0].0
                        );
                        stop.cancel();
                        return;
                    }
                    Ok(_) => {}
                    // Not renewed this time; the next beat tries again.
                    Err(error) => eprintln!("warning: the run's lease was not renewed: {error}"),
                }
            }
        });
        Self { task }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
