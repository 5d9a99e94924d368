//! Containment of host code: every hook, gate, wrap layer and callback the
//! harness calls runs here, so an error or a panic becomes a refusal that
//! names who failed, and never unwinds the run.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tinyagents_core::TinyAgentsError;

/// Awaits a fallible hook of `who`: its error becomes a denial naming `who`
/// (a denial it raised itself keeps its own text), a panic a denial that
/// says so.
pub(crate) async fn contain<T>(
    who: &str,
    hook: impl Future<Output = Result<T, TinyAgentsError>>,
) -> Result<T, TinyAgentsError> {
    match AssertUnwindSafe(hook).catch_unwind().await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(denied_by(who, &error)),
        Err(panic) => Err(panicked(who, panic.as_ref())),
    }
}

/// Awaits an infallible hook of `who`; a panic becomes a denial.
pub(crate) async fn contain_unit(
    who: &str,
    hook: impl Future<Output = ()>,
) -> Result<(), TinyAgentsError> {
    AssertUnwindSafe(hook)
        .catch_unwind()
        .await
        .map_err(|panic| panicked(who, panic.as_ref()))
}

/// Maps a hook's error to a fail-closed denial that names the hook.
pub(crate) fn denied_by(who: &str, error: &TinyAgentsError) -> TinyAgentsError {
    match error {
        TinyAgentsError::Denied { .. } => error.clone(),
        other => TinyAgentsError::Denied {
            by: who.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// The denial of a hook that panicked.
pub(crate) fn panicked(who: &str, panic: &(dyn std::any::Any + Send)) -> TinyAgentsError {
    TinyAgentsError::Denied {
        by: who.to_owned(),
        reason: format!("it panicked: {}", panic_text(panic)),
    }
}

/// The message a panic carried, when it was text.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_or_a_panic_is_a_denial_naming_the_hook() {
        let failed = contain("audit", async {
            Err::<(), _>(TinyAgentsError::Config("boom".into()))
        })
        .await;
        assert_eq!(
            failed,
            Err(TinyAgentsError::Denied {
                by: "audit".into(),
                reason: "configuration error: boom".into()
            })
        );
        let panicked = contain("audit", async {
            if true {
                panic!("hook exploded");
            }
            Ok::<(), TinyAgentsError>(())
        })
        .await;
        let Err(TinyAgentsError::Denied { by, reason }) = panicked else {
            panic!("a panic must be a denial");
        };
        assert_eq!(by, "audit");
        assert!(reason.contains("it panicked: hook exploded"), "{reason}");
        assert_eq!(contain("audit", async { Ok(7) }).await, Ok(7));
    }
}
