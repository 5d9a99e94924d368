//! What both wire formats share: the provider seam the HTTP layer drives,
//! the mapping of HTTP failures to [`ModelError`], and small JSON helpers.

use std::time::Duration;

use serde_json::Value;
use tinyagents_core::{ChatResponse, DeltaSink, ModelError};

use crate::sse::{SseEvent, SseParser};

/// The longest provider message kept in an error.
const MAX_ERROR_MESSAGE: usize = 1000;

/// Turns one provider's streamed events into a [`ChatResponse`].
pub(crate) trait StreamDecoder: Default + Send {
    /// Takes one event; `Ok(true)` once the provider said the response is
    /// complete (later bytes are not read).
    fn event(&mut self, event: &SseEvent, sink: Option<DeltaSink<'_>>) -> Result<bool, ModelError>;

    /// The response, once the stream ended. A stream that ended before the
    /// provider marked it complete is a [`ModelError::Transport`] error.
    fn finish(self) -> Result<ChatResponse, ModelError>;
}

/// One provider's wire format, as the HTTP layer needs it.
pub(crate) trait WireFormat {
    /// Its stream decoder.
    type Decoder: StreamDecoder;

    /// Parses a whole (non-streamed) response body.
    fn parse_body(body: &[u8]) -> Result<ChatResponse, ModelError>;
}

/// An SSE parser feeding a provider's decoder: the one path streamed bytes
/// take, on the wire and in the public `parse_stream` functions.
pub(crate) struct Stream<D> {
    parser: SseParser,
    decoder: D,
}

impl<D: StreamDecoder> Stream<D> {
    pub(crate) fn new(max_event_bytes: usize) -> Self {
        Self {
            parser: SseParser::new(max_event_bytes),
            decoder: D::default(),
        }
    }

    /// Takes bytes as they arrived; the response once the provider marked
    /// it complete.
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        sink: Option<DeltaSink<'_>>,
    ) -> Result<Option<ChatResponse>, ModelError> {
        self.parser.push(bytes);
        while let Some(event) = self.parser.next_event()? {
            if self.decoder.event(&event, sink)? {
                return Ok(Some(std::mem::take(&mut self.decoder).finish()?));
            }
        }
        Ok(None)
    }

    /// Ends the stream (the connection closed).
    pub(crate) fn end(mut self, sink: Option<DeltaSink<'_>>) -> Result<ChatResponse, ModelError> {
        if let Some(event) = self.parser.finish()? {
            self.decoder.event(&event, sink)?;
        }
        self.decoder.finish()
    }
}

/// Decodes a whole stream given as its chunks.
pub(crate) fn decode_stream<'b, D: StreamDecoder>(
    chunks: impl IntoIterator<Item = &'b [u8]>,
    sink: Option<DeltaSink<'_>>,
) -> Result<ChatResponse, ModelError> {
    let mut stream = Stream::<D>::new(crate::HttpOptions::default().max_event_bytes);
    for chunk in chunks {
        if let Some(response) = stream.push(chunk, sink)? {
            return Ok(response);
        }
    }
    stream.end(sink)
}

/// A failed attempt, with what the retry loop needs to know about it.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: ModelError,
    pub(crate) retryable: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl Failure {
    pub(crate) fn fatal(error: ModelError) -> Self {
        Self {
            error,
            retryable: false,
            retry_after: None,
        }
    }
}

impl From<ModelError> for Failure {
    /// Retryable exactly when the error is a rate limit, a server error or a
    /// transport error (not a timeout: see [`RetryPolicy`](crate::RetryPolicy)).
    fn from(error: ModelError) -> Self {
        let retryable = matches!(
            error,
            ModelError::RateLimited { .. }
                | ModelError::Server { .. }
                | ModelError::Transport { .. }
        );
        let retry_after = match &error {
            ModelError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        };
        Self {
            error,
            retryable,
            retry_after,
        }
    }
}

/// Maps an HTTP error status and its body (either provider's error shape, or
/// Ollama's `{"error": "text"}`, or plain text) to a typed failure.
pub(crate) fn classify_status(status: u16, body: &[u8], retry_after: Option<Duration>) -> Failure {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let (kind, message) = match &parsed {
        Some(value) => error_parts(value),
        None => (String::new(), clip(&String::from_utf8_lossy(body))),
    };
    let message = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        message
    };
    let error = match status {
        401 | 403 => ModelError::Authentication { message },
        429 => {
            // Billing exhaustion is reported as 429 but waiting does not help.
            let quota = kind == "insufficient_quota";
            let error = ModelError::RateLimited {
                retry_after,
                message,
            };
            return Failure {
                error,
                retryable: !quota,
                retry_after,
            };
        }
        413 => ModelError::ContextLength { message },
        408 | 500..=599 => ModelError::Server { status, message },
        400..=499 if is_context_length(&kind, &message) => ModelError::ContextLength { message },
        400..=499 => ModelError::InvalidRequest { message },
        _ => ModelError::Server { status, message },
    };
    let mut failure = Failure::from(error);
    failure.retry_after = retry_after;
    failure
}

/// Maps an error object that arrived inside a stream (or a 200 body).
pub(crate) fn classify_error_value(value: &Value) -> ModelError {
    let (kind, message) = error_parts(value);
    let message = if message.is_empty() {
        "provider reported an error".to_owned()
    } else {
        message
    };
    match kind.as_str() {
        "rate_limit_error" | "rate_limit_exceeded" => ModelError::RateLimited {
            retry_after: None,
            message,
        },
        "overloaded_error" => ModelError::Server {
            status: 529,
            message,
        },
        "authentication_error" | "permission_error" | "invalid_api_key" => {
            ModelError::Authentication { message }
        }
        _ if is_context_length(&kind, &message) => ModelError::ContextLength { message },
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            ModelError::InvalidRequest { message }
        }
        _ => ModelError::Server {
            status: 500,
            message,
        },
    }
}

/// The error's kind (`type`, else `code`) and message, from any of the
/// shapes providers use.
fn error_parts(value: &Value) -> (String, String) {
    let inner = value.get("error").unwrap_or(value);
    if let Some(text) = inner.as_str() {
        return (String::new(), clip(text));
    }
    let field = |name: &str| inner.get(name).and_then(Value::as_str).unwrap_or_default();
    let kind = if field("code").is_empty() || field("code") == "null" {
        field("type")
    } else {
        field("code")
    };
    let kind = if kind == "error" || kind.is_empty() {
        field("type")
    } else {
        kind
    };
    let message = match inner.get("message") {
        Some(Value::String(text)) => clip(text),
        Some(other) => clip(&other.to_string()),
        None => String::new(),
    };
    (kind.to_owned(), message)
}

fn is_context_length(kind: &str, message: &str) -> bool {
    if kind == "context_length_exceeded" || kind == "request_too_large" {
        return true;
    }
    let lower = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// Cuts provider text to [`MAX_ERROR_MESSAGE`] bytes at a character boundary.
pub(crate) fn clip(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_ERROR_MESSAGE {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_MESSAGE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

pub(crate) fn malformed(message: impl Into<String>) -> ModelError {
    ModelError::Malformed {
        message: message.into(),
    }
}

/// Parses bytes as a JSON object, or says why not.
pub(crate) fn parse_object(bytes: &[u8], what: &str) -> Result<Value, ModelError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| malformed(format!("{what} is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(malformed(format!("{what} is not a JSON object")));
    }
    Ok(value)
}

/// A string field, if present and a string.
pub(crate) fn str_field<'a>(value: &'a Value, name: &str) -> Option<&'a str> {
    value.get(name).and_then(Value::as_str)
}

/// The ids a transcript's tool calls go by on the wire.
///
/// A call keeps its provider's id when it has one that no earlier call of the
/// transcript used; otherwise (no id, or a provider that repeats ids) it goes
/// by the harness's id, which is unique in the run. Either is rewritten to the
/// characters every provider accepts (`[A-Za-z0-9_-]`). A tool result finds
/// its call's id by the harness id, so the pairing stays valid.
#[derive(Debug, Default)]
pub(crate) struct WireIds<'a> {
    by_call: std::collections::HashMap<&'a str, String>,
    used: std::collections::HashSet<String>,
}

impl<'a> WireIds<'a> {
    /// The id of a call in an assistant message.
    pub(crate) fn call(&mut self, call_id: &'a str, provider_id: Option<&str>) -> String {
        if let Some(id) = self.by_call.get(call_id) {
            return id.clone();
        }
        let mut id = safe_id(provider_id.filter(|id| !id.is_empty()).unwrap_or(call_id));
        if self.used.contains(&id) {
            id = safe_id(call_id);
        }
        self.used.insert(id.clone());
        self.by_call.insert(call_id, id.clone());
        id
    }

    /// The id a tool result answers.
    pub(crate) fn result(&self, call_id: &str, provider_id: Option<&str>) -> String {
        match self.by_call.get(call_id) {
            Some(id) => id.clone(),
            None => safe_id(provider_id.filter(|id| !id.is_empty()).unwrap_or(call_id)),
        }
    }
}

fn safe_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_typed_errors() {
        let openai = br#"{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert!(
            matches!(classify_status(401, openai, None).error, ModelError::Authentication { message } if message == "Incorrect API key")
        );
        let quota = br#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        let failure = classify_status(429, quota, None);
        assert!(!failure.retryable);
        let limited = classify_status(429, b"slow down", Some(Duration::from_secs(2)));
        assert!(limited.retryable);
        assert_eq!(
            limited.error,
            ModelError::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
                message: "slow down".into()
            }
        );
        let ctx = br#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            classify_status(400, ctx, None).error,
            ModelError::ContextLength { .. }
        ));
        let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            classify_status(400, anthropic, None).error,
            ModelError::ContextLength { .. }
        ));
        let ollama = br#"{"error":"model 'x' not found"}"#;
        assert!(
            matches!(classify_status(404, ollama, None).error, ModelError::InvalidRequest { message } if message.contains("not found"))
        );
        let overloaded = classify_status(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            None,
        );
        assert!(overloaded.retryable);
        assert_eq!(
            overloaded.error,
            ModelError::Server {
                status: 529,
                message: "Overloaded".into()
            }
        );
        assert_eq!(
            classify_status(502, b"", None).error,
            ModelError::Server {
                status: 502,
                message: "HTTP 502".into()
            }
        );
    }

    #[test]
    fn ids_are_unique_safe_and_paired() {
        let mut ids = WireIds::default();
        assert_eq!(ids.call("p1", Some("call_1")), "call_1");
        assert_eq!(ids.call("p2", None), "p2");
        assert_eq!(ids.call("p1/2", Some("")), "p1_2");
        // A provider that repeats its ids: the later call goes by the harness id.
        assert_eq!(ids.call("p3", Some("call_1")), "p3");
        assert_eq!(ids.result("p3", Some("call_1")), "p3");
        assert_eq!(ids.result("p1", Some("call_1")), "call_1");
        assert_eq!(ids.result("p9", Some("orphan")), "orphan");
        assert_eq!(clip(&"é".repeat(600)).chars().count(), 501);
    }
}
