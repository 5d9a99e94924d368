//! The HTTP layer both providers share: one POST per attempt under a
//! timeout, the body read under a size cap (whole, or as server-sent events
//! fed to the provider's decoder), failures typed, and retries with backoff.
//!
//! TLS is rustls on the `ring` provider, set up once per process and shared
//! by every client. Cancelling is dropping the future: the connection is
//! closed and no retry follows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tinyagents_core::{ChatResponse, DeltaSink, ModelDelta, ModelError};

use crate::retry::{self, RetryPolicy};
use crate::secret::{Secrets, is_sensitive_header};
use crate::wire::{Failure, Stream, WireFormat, classify_status, malformed};

/// The most bytes of an error response that are read (for its message).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Transport settings of a provider client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// The longest one attempt may take, from sending the request to the
    /// last byte of the response (a streamed response included). Exceeding
    /// it is [`ModelError::Timeout`], which is not retried.
    pub timeout: Duration,
    /// The longest a connection may take to open (a connection error, retried).
    pub connect_timeout: Duration,
    /// When and how failed attempts are retried.
    pub retry: RetryPolicy,
    /// The most bytes a response body may have, streamed or not.
    pub max_body_bytes: usize,
    /// The most bytes one streamed event may have.
    pub max_event_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            max_body_bytes: 16 * 1024 * 1024,
            max_event_bytes: 1024 * 1024,
        }
    }
}

impl HttpOptions {
    /// Sets the per-attempt timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the body cap.
    #[must_use]
    pub fn with_max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// Sets the cap of one streamed event.
    #[must_use]
    pub fn with_max_event_bytes(mut self, n: usize) -> Self {
        self.max_event_bytes = n;
        self
    }
}

/// An HTTP client with its settings.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
    options: HttpOptions,
    /// What the client's errors must never show.
    secrets: Secrets,
}

impl Http {
    pub(crate) fn new(options: HttpOptions, secrets: Secrets) -> Result<Self, ModelError> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config()?)
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| ModelError::InvalidRequest {
                message: format!(
                    "cannot build the HTTP client: {}",
                    tinyagents_core::error_chain(&e)
                ),
            })?;
        Ok(Self {
            client,
            options,
            secrets,
        })
    }

    pub(crate) fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// POSTs `body` to `url` and decodes the answer, retrying per policy.
    pub(crate) async fn send<W: WireFormat>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<ChatResponse, ModelError> {
        let emitted = AtomicBool::new(false);
        let counting = |delta: ModelDelta| {
            emitted.store(true, Ordering::Relaxed);
            if let Some(sink) = sink {
                sink(delta);
            }
        };
        let sink: Option<DeltaSink<'_>> = sink.map(|_| &counting as DeltaSink<'_>);
        let policy = &self.options.retry;
        let mut retry = 0;
        loop {
            let failure = match self.attempt::<W>(url, headers, body.clone(), sink).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            if !failure.retryable || retry >= policy.max_retries || emitted.load(Ordering::Relaxed)
            {
                return Err(self.secrets.scrub_error(failure.error));
            }
            let Some(wait) = policy.delay(retry, failure.retry_after) else {
                return Err(self.secrets.scrub_error(failure.error));
            };
            tokio::time::sleep(wait).await;
            retry += 1;
        }
    }

    async fn attempt<W: WireFormat>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<ChatResponse, Failure> {
        let timeout = self.options.timeout;
        match tokio::time::timeout(timeout, self.exchange::<W>(url, headers, body, sink)).await {
            Ok(result) => result,
            Err(_) => Err(Failure::fatal(ModelError::Timeout {
                after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            })),
        }
    }

    async fn exchange<W: WireFormat>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
        sink: Option<DeltaSink<'_>>,
    ) -> Result<ChatResponse, Failure> {
        let mut response = self
            .client
            .post(url)
            .headers(headers.clone())
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = retry::retry_after(response.headers());
            let body = read_body(&mut response, MAX_ERROR_BODY, true)
                .await
                .unwrap_or_default();
            return Err(classify_status(status, &body, retry_after));
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        if !is_stream {
            let body = read_body(&mut response, self.options.max_body_bytes, false).await?;
            return W::parse_body(&body).map_err(Failure::from);
        }
        let mut stream = Stream::<W::Decoder>::new(self.options.max_event_bytes);
        let mut total = 0usize;
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            total = total.saturating_add(chunk.len());
            if total > self.options.max_body_bytes {
                return Err(Failure::fatal(too_large(self.options.max_body_bytes)));
            }
            if let Some(done) = stream.push(&chunk, sink)? {
                return Ok(done);
            }
        }
        Ok(stream.end(sink)?)
    }
}

/// Reads a whole body, refusing more than `cap` bytes (or, when `truncate`,
/// keeping only the first `cap`).
async fn read_body(
    response: &mut reqwest::Response,
    cap: usize,
    truncate: bool,
) -> Result<Vec<u8>, Failure> {
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !truncate && declared.is_some_and(|n| n > cap as u64) {
        return Err(Failure::fatal(too_large(cap)));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len().saturating_add(chunk.len()) > cap {
            if truncate {
                body.extend_from_slice(&chunk[..cap - body.len()]);
                break;
            }
            return Err(Failure::fatal(too_large(cap)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn too_large(cap: usize) -> ModelError {
    malformed(format!("response body exceeds {cap} bytes"))
}

fn transport(error: reqwest::Error) -> Failure {
    Failure::from(ModelError::Transport {
        message: tinyagents_core::error_chain(&error.without_url()),
    })
}

/// [`tls_client_config`](crate::tls_client_config), as a provider error.
fn tls_config() -> Result<rustls::ClientConfig, ModelError> {
    crate::tls_client_config().map_err(|message| ModelError::InvalidRequest {
        message: format!("cannot set up TLS: {message}"),
    })
}

/// Adds a config's extra headers to `headers`, those that carry
/// credentials marked sensitive.
pub(crate) fn insert_headers(
    headers: &mut HeaderMap,
    extra: &[(String, String)],
) -> Result<(), ModelError> {
    for (name, value) in extra {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| ModelError::InvalidRequest {
                message: format!("invalid header name {name:?}"),
            })?;
        let mut value = header_value(value, "a header value")?;
        value.set_sensitive(is_sensitive_header(name.as_str()));
        headers.insert(name, value);
    }
    Ok(())
}

pub(crate) fn header_value(value: &str, what: &str) -> Result<HeaderValue, ModelError> {
    HeaderValue::from_str(value).map_err(|_| ModelError::InvalidRequest {
        message: format!("{what} is not a valid HTTP header value"),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn tls_is_set_up_once_with_ring() {
        let config = tls_config().unwrap();
        assert!(!config.crypto_provider().cipher_suites.is_empty());
        assert!(Arc::ptr_eq(
            config.crypto_provider(),
            tls_config().unwrap().crypto_provider()
        ));
        assert!(Http::new(HttpOptions::default(), Secrets::default()).is_ok());
    }
}
