//! Exponential backoff: the one rule for how long to wait before a retry,
//! shared by the providers' retries (`tinyagents-models`) and the tool
//! retry wrap (`tinyagents-middleware`).

use std::time::Duration;

/// The wait before retry number `retry` (0-based): `initial * 2^retry`,
/// capped at `max`. It never overflows: a doubling past the cap is the cap.
pub fn exponential_backoff(initial: Duration, max: Duration, retry: u32) -> Duration {
    let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
    initial.checked_mul(factor).unwrap_or(max).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_never_overflows() {
        let (initial, max) = (Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<_> = (0..4)
            .map(|n| exponential_backoff(initial, max, n).as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        assert_eq!(exponential_backoff(initial, max, u32::MAX), max);
        let huge = Duration::from_secs(u64::MAX / 2);
        assert_eq!(exponential_backoff(huge, Duration::MAX, 40), Duration::MAX);
    }
}
