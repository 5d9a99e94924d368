//! Time in the call path: a call's duration, and a future bounded by a
//! deadline whose timer is made only when it has to wait.

use futures_util::FutureExt;
use tokio::time::Instant;

/// Milliseconds since `since`.
pub(crate) fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs `future` until `end`; `None` when `end` passed first. Takes no
/// clock reading.
pub(crate) fn until<F: std::future::Future>(
    end: Option<Instant>,
    future: F,
) -> impl std::future::Future<Output = Option<F::Output>> {
    use futures_util::future::Either;
    match end {
        Some(end) => Either::Left(Deadline {
            future,
            end,
            sleep: None,
        }),
        None => Either::Right(future.map(Some)),
    }
}

pin_project_lite::pin_project! {
    /// A future bounded by a deadline, like `tokio::time::timeout`, but its
    /// timer is made only once the future has to wait: a call that answers
    /// on its first poll (most tools, a scripted model) never touches the
    /// timer wheel. The deadline is fixed when it is made, as tokio's is.
    struct Deadline<F> {
        #[pin]
        future: F,
        end: Instant,
        sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F: std::future::Future> std::future::Future for Deadline<F> {
    type Output = Option<F::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        if let std::task::Poll::Ready(output) = this.future.poll(cx) {
            return std::task::Poll::Ready(Some(output));
        }
        let end = *this.end;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(end)));
        sleep.as_mut().poll(cx).map(|()| None)
    }
}
