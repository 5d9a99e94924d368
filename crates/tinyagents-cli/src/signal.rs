//! Ctrl-C: the first cancels what runs (its token is a child of this
//! one), the second exits at once.

use tinyagents::core::CancellationToken;

use crate::exit;

/// The process's Ctrl-C.
#[derive(Debug, Clone)]
pub(crate) struct Interrupt {
    fired: CancellationToken,
}

impl Interrupt {
    /// Starts listening for Ctrl-C (on the current runtime).
    pub(crate) fn install() -> Self {
        let fired = CancellationToken::new();
        let token = fired.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            token.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted again: exiting at once");
                std::process::exit(i32::from(exit::CANCELLED));
            }
        });
        Self { fired }
    }

    /// A cancellation token that fires on the first Ctrl-C.
    pub(crate) fn token(&self) -> CancellationToken {
        self.fired.child_token()
    }

    /// Whether Ctrl-C was pressed.
    pub(crate) fn fired(&self) -> bool {
        self.fired.is_cancelled()
    }

    /// Waits for the first Ctrl-C.
    pub(crate) async fn wait(&self) {
        self.fired.cancelled().await;
    }
}
