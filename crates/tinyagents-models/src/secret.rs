//! Credential hygiene: the secrets a client knows (its API key, the
//! password in its base URL, sensitive header values) never reach a `Debug`
//! text, an error or an event. URLs are shown without their user-info, and
//! an error body that echoes one of the client's own secrets (some proxies
//! do) is scrubbed before it becomes a [`ModelError`].

use std::sync::Arc;

use tinyagents_core::ModelError;

/// What replaces a secret in a text.
pub(crate) const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not scrubbed from texts: a key of one or
/// two characters would blank out ordinary words. (They are still never
/// printed by `Debug`.)
const MIN_SCRUBBED: usize = 4;

/// Header names whose values are credentials.
const SENSITIVE_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
];

/// Whether a header of this name carries a credential.
pub(crate) fn is_sensitive_header(name: &str) -> bool {
    SENSITIVE_HEADERS
        .iter()
        .any(|sensitive| name.eq_ignore_ascii_case(sensitive))
}

/// `url` without the user-info of its authority: `https://u:p@host/v1`
/// reads `https://[redacted]@host/v1`. A text that is not a URL comes back
/// unchanged.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!("{}{REDACTED}{}", &url[..authority_start], &rest[at..]),
        None => url.to_owned(),
    }
}

/// The user-info of `url`'s authority, split at its first `:` (user,
/// password), as written (percent-encoded).
#[cfg(feature = "http")]
fn user_info(url: &str) -> Option<(&str, Option<&str>)> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let info = &authority[..authority.rfind('@')?];
    Some(match info.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (info, None),
    })
}

/// Decodes `%XX` escapes (invalid ones are kept as written; bytes that
/// are not UTF-8 read as U+FFFD).
#[cfg(feature = "http")]
fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Standard base64 with padding (how basic credentials travel).
#[cfg(feature = "http")]
fn base64(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
}

/// The secrets one client knows, to scrub from what it reports.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Arc<[String]>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} hidden)", self.0.len())
    }
}

impl Secrets {
    /// The secrets of a client with `api_key`, calling `base_url`, sending
    /// `headers`: the key, the URL's user-info (as written and decoded),
    /// and the values of sensitive headers.
    #[cfg(feature = "http")]
    pub(crate) fn of(api_key: Option<&str>, base_url: &str, headers: &[(String, String)]) -> Self {
        let mut secrets: Vec<String> = Vec::new();
        secrets.extend(api_key.map(str::to_owned));
        if let Some((user, password)) = user_info(base_url) {
            for part in std::iter::once(user).chain(password) {
                secrets.push(part.to_owned());
                secrets.push(percent_decoded(part));
            }
            // As the HTTP client sends it: `Authorization: Basic …`.
            let pair = format!(
                "{}:{}",
                percent_decoded(user),
                password.map(percent_decoded).unwrap_or_default()
            );
            secrets.push(base64(pair.as_bytes()));
        }
        for (name, value) in headers {
            if is_sensitive_header(name) {
                secrets.push(value.clone());
                // `Bearer <token>`: the token alone is the secret too.
                if let Some((_, token)) = value.split_once(' ') {
                    secrets.push(token.to_owned());
                }
            }
        }
        secrets.retain(|s| s.len() >= MIN_SCRUBBED);
        // Longest first, so a secret that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self(secrets.into())
    }

    /// `text` with every secret replaced by `[redacted]`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in self.0.iter() {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }

    /// `error` with every secret scrubbed from its message.
    pub(crate) fn scrub_error(&self, error: ModelError) -> ModelError {
        if self.0.is_empty() {
            return error;
        }
        match error {
            ModelError::Authentication { message } => ModelError::Authentication {
                message: self.scrub(&message),
            },
            ModelError::RateLimited {
                retry_after,
                message,
            } => ModelError::RateLimited {
                retry_after,
                message: self.scrub(&message),
            },
            ModelError::ContextLength { message } => ModelError::ContextLength {
                message: self.scrub(&message),
            },
            ModelError::Server { status, message } => ModelError::Server {
                status,
                message: self.scrub(&message),
            },
            ModelError::Malformed { message } => ModelError::Malformed {
                message: self.scrub(&message),
            },
            ModelError::Transport { message } => ModelError::Transport {
                message: self.scrub(&message),
            },
            ModelError::InvalidRequest { message } => ModelError::InvalidRequest {
                message: self.scrub(&message),
            },
            // Timeouts and exhausted scripts carry no text.
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "http")]
    #[test]
    fn base64_is_standard() {
        assert_eq!(base64(b"svc:secret"), "c3ZjOnNlY3JldA==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b""), "");
    }

    #[test]
    fn urls_lose_their_user_info_and_nothing_else() {
        assert_eq!(
            redact_url("https://svc:s3cret@proxy.example:8443/v1?x=1"),
            "https://[redacted]@proxy.example:8443/v1?x=1"
        );
        assert_eq!(redact_url("http://tok@h/v1"), "http://[redacted]@h/v1");
        assert_eq!(
            redact_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1"
        );
        assert_eq!(
            redact_url("http://h/a@b"),
            "http://h/a@b",
            "an @ in the path is not user-info"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[cfg(feature = "http")]
    #[test]
    fn every_known_secret_is_scrubbed_however_it_is_written() {
        let headers = vec![
            (
                "Authorization".to_owned(),
                "Bearer hdr-token-123".to_owned(),
            ),
            ("HTTP-Referer".to_owned(), "https://my.app".to_owned()),
        ];
        let secrets = Secrets::of(
            Some("sk-key-0001"),
            "https://svc:p%40ss-word@h/v1",
            &headers,
        );
        let text = "key sk-key-0001, url pw p%40ss-word and p@ss-word, token hdr-token-123, user svc, https://my.app";
        let scrubbed = secrets.scrub(text);
        for leaked in ["sk-key-0001", "p%40ss-word", "p@ss-word", "hdr-token-123"] {
            assert!(!scrubbed.contains(leaked), "{leaked} in {scrubbed}");
        }
        assert!(
            scrubbed.contains("https://my.app"),
            "a header that is no credential stays"
        );
        assert!(
            scrubbed.contains("user svc"),
            "a user name shorter than 4 bytes is left: {scrubbed}"
        );
        let error = secrets.scrub_error(ModelError::Authentication {
            message: "invalid key sk-key-0001".into(),
        });
        assert_eq!(
            error.to_string(),
            "authentication failed: invalid key [redacted]"
        );
    }
}
