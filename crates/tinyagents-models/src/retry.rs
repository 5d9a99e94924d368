//! When to try a failed request again, and how long to wait first:
//! exponential backoff with jitter, and the provider's `Retry-After`.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tinyagents_core::exponential_backoff;

#[cfg(any(feature = "openai", feature = "anthropic"))]
use reqwest::header::HeaderMap;

/// How a provider client retries a request that failed with a rate limit
/// (429), a server error (5xx, 529) or a connection error.
///
/// The wait before retry `n` (0-based) is `initial_backoff * 2^n`, capped at
/// `max_backoff`, then, with `jitter`, drawn uniformly from its upper half.
/// When the provider sent `Retry-After` (or `retry-after-ms`), that wait is
/// used instead; one longer than `max_retry_after` is not waited for: the
/// error is returned at once, carrying the provider's delay.
///
/// A streamed response that already delivered deltas is never retried (the
/// listener would see the text twice), and neither is a timeout (the next
/// attempt would likely time out too, multiplying the wait).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// The wait before the first retry.
    pub initial_backoff: Duration,
    /// The longest computed wait.
    pub max_backoff: Duration,
    /// The longest provider-requested wait that is honoured by waiting.
    pub max_retry_after: Duration,
    /// Whether waits are randomised (so many clients do not retry in step).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// Sets the number of retries.
    #[must_use]
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets the first and the longest computed wait.
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Sets the longest provider-requested wait honoured by waiting.
    #[must_use]
    pub fn with_max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// Turns jitter on or off.
    #[must_use]
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// How long to wait before retry number `retry` (0-based), or `None`
    /// when the provider asked for a longer wait than this policy honours.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if let Some(wait) = retry_after {
            return (wait <= self.max_retry_after).then_some(wait);
        }
        let backoff = exponential_backoff(self.initial_backoff, self.max_backoff, retry);
        if !self.jitter {
            return Some(backoff);
        }
        let half = backoff / 2;
        let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let extra = if spread == 0 {
            0
        } else {
            random_u64() % spread
        };
        Some(half + Duration::from_nanos(extra))
    }
}

/// A random number from the standard library's randomly keyed hasher, so
/// jitter needs no extra dependency.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos().into())
            .unwrap_or_default(),
    );
    hasher.finish()
}

// Reading `Retry-After` needs the HTTP stack; the policy does not.
#[cfg(any(feature = "openai", feature = "anthropic"))]
/// The wait a response asked for: `retry-after-ms` (OpenAI), or
/// `Retry-After` as seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    // The server's own headers first; then the upstream's as a proxy
    // forwards them (LiteLLM prefixes them `llm_provider-`).
    for prefix in ["", "llm_provider-"] {
        if let Some(wait) = retry_after_named(headers, prefix) {
            return Some(wait);
        }
    }
    None
}

#[cfg(any(feature = "openai", feature = "anthropic"))]
fn retry_after_named(headers: &HeaderMap, prefix: &str) -> Option<Duration> {
    if let Some(ms) = header_str(headers, &format!("{prefix}retry-after-ms"))
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        return seconds(ms / 1000.0);
    }
    let value = header_str(headers, &format!("{prefix}retry-after"))?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    // An HTTP date in any of the three forms HTTP recipients accept; one
    // already past asks for no wait.
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(any(feature = "openai", feature = "anthropic"))]
fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

#[cfg(any(feature = "openai", feature = "anthropic"))]
fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::try_from_secs_f64(secs.min(1e9)).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_stays_in_the_upper_half() {
        let policy = RetryPolicy::default()
            .with_backoff(Duration::from_millis(100), Duration::from_millis(350))
            .with_jitter(false);
        let waits: Vec<_> = (0..4)
            .map(|n| policy.delay(n, None).unwrap().as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        assert_eq!(policy.delay(1000, None), Some(Duration::from_millis(350)));
        let jittered = policy.with_jitter(true);
        for n in 0..50 {
            let wait = jittered.delay(n % 3, None).unwrap();
            let full = Duration::from_millis([100, 200, 350][(n % 3) as usize]);
            assert!(wait >= full / 2 && wait <= full, "{wait:?} vs {full:?}");
        }
    }

    #[test]
    fn retry_after_wins_unless_it_is_too_long() {
        let policy = RetryPolicy::default().with_max_retry_after(Duration::from_secs(10));
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(policy.delay(0, Some(Duration::from_secs(11))), None);
    }

    #[cfg(any(feature = "openai", feature = "anthropic"))]
    #[test]
    fn reads_retry_after_in_every_form() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        headers.clear();
        headers.insert(
            "retry-after",
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        let soon = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        headers.insert("retry-after", HeaderValue::from_str(&soon).unwrap());
        let wait = retry_after(&headers).unwrap();
        assert!(
            wait <= Duration::from_secs(30) && wait >= Duration::from_secs(28),
            "{wait:?}"
        );
        for junk in [
            "",
            "-1",
            "NaN",
            "inf",
            "soon",
            "Sun, 99 Nov 1994 08:49:37 GMT",
        ] {
            headers.insert("retry-after", HeaderValue::from_str(junk).unwrap());
            assert_eq!(retry_after(&headers), None, "{junk}");
        }
    }

    /// Issue 12: behind LiteLLM the upstream's wait arrives prefixed; the
    /// server's own header still wins.
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    #[test]
    fn reads_a_proxys_forwarded_retry_after_as_a_fallback() {
        let mut headers = HeaderMap::new();
        headers.insert("llm_provider-retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(
            "llm_provider-retry-after-ms",
            HeaderValue::from_static("250"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.insert("retry-after", HeaderValue::from_static("9"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(9)));
    }
}
