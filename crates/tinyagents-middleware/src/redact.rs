//! `Redactor`: finds secrets in text and JSON and replaces them with
//! `[REDACTED]`.
//!
//! Hand-written scanners, no regex: each pattern is a prefix, a key name or
//! a literal, so a linear scan per pattern finds them, and text without any
//! trigger is returned without allocating. What it finds by default:
//! - API keys by prefix: `sk-` (OpenAI, `sk-ant-` Anthropic), `AKIA`/`ASIA`
//!   (AWS), `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_` (GitHub),
//!   `glpat-` (GitLab), `xox[abps]-` (Slack), `AIza` (Google),
//!   `sk_live_`/`rk_live_` (Stripe);
//! - bearer tokens: `Bearer <token>`;
//! - values of sensitive keys, in JSON objects and in text (`password=...`,
//!   `"api_key": "..."`, `token: ...`): keys whose last word is `password`,
//!   `passwd`, `passphrase`, `secret(s)`, `token`, `apikey`, `credential(s)`,
//!   `authorization` or `cookie`, or whose last words are `api key`,
//!   `private key`, `access key` or `secret key` (words split at `_`, `-`,
//!   `.` and camel case, so `OPENAI_API_KEY`, `x-api-key`, `accessToken` and
//!   `client_secret` match while `max_tokens` does not).
//!
//! A host adds prefixes, key names, literal secrets and its own matchers.

use std::borrow::Cow;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;

mod scan;

use scan::{Body, Span, apply, find_bearer, is_key_byte, key_tail, keyed_value, merge};

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// A host's own secret finder: the byte ranges of `text` to redact. Ranges
/// that are out of bounds or not on character boundaries are ignored; a
/// matcher that panics redacts the whole text (fail closed).
pub type SecretMatcher = Arc<dyn Fn(&str) -> Vec<Range<usize>> + Send + Sync>;

#[derive(Debug, Clone)]
struct PrefixRule {
    prefix: String,
    min_body: usize,
    body: Body,
}

const DEFAULT_PREFIXES: &[(&str, usize, Body)] = &[
    ("sk-ant-", 20, Body::Token),
    ("sk-", 20, Body::Token),
    ("sk_live_", 16, Body::Token),
    ("rk_live_", 16, Body::Token),
    ("AKIA", 16, Body::UpperAlnum),
    ("ASIA", 16, Body::UpperAlnum),
    ("ghp_", 20, Body::Token),
    ("gho_", 20, Body::Token),
    ("ghu_", 20, Body::Token),
    ("ghs_", 20, Body::Token),
    ("ghr_", 20, Body::Token),
    ("github_pat_", 20, Body::Token),
    ("glpat-", 20, Body::Token),
    ("xoxa-", 10, Body::Token),
    ("xoxb-", 10, Body::Token),
    ("xoxp-", 10, Body::Token),
    ("xoxs-", 10, Body::Token),
    ("AIza", 30, Body::Token),
];

const DEFAULT_KEYS: &[&[&str]] = &[
    &["password"],
    &["passwd"],
    &["passphrase"],
    &["secret"],
    &["secrets"],
    &["token"],
    &["apikey"],
    &["api", "key"],
    &["private", "key"],
    &["access", "key"],
    &["secret", "key"],
    &["credential"],
    &["credentials"],
    &["authorization"],
    &["cookie"],
];

/// Finds and replaces secrets. Cheap to share (`Arc`) and to clone.
#[derive(Clone)]
pub struct Redactor {
    prefixes: Vec<PrefixRule>,
    keys: Vec<Vec<String>>,
    literals: Vec<String>,
    matchers: Vec<SecretMatcher>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("prefixes", &self.prefixes.len())
            .field("keys", &self.keys.len())
            .field("literals", &self.literals.len())
            .field("matchers", &self.matchers.len())
            .finish()
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self {
            prefixes: DEFAULT_PREFIXES
                .iter()
                .map(|&(prefix, min_body, body)| PrefixRule {
                    prefix: prefix.to_owned(),
                    min_body,
                    body,
                })
                .collect(),
            keys: DEFAULT_KEYS
                .iter()
                .map(|words| words.iter().map(|w| (*w).to_owned()).collect())
                .collect(),
            literals: Vec::new(),
            matchers: Vec::new(),
        }
    }
}

impl Redactor {
    /// The default patterns (see the module documentation).
    pub fn new() -> Self {
        Self::default()
    }

    /// Also redacts `prefix` followed by at least `min_body` characters of
    /// ASCII letters, digits, `_` and `-` (the whole token is redacted). The
    /// prefix must start a word.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>, min_body: usize) -> Self {
        let prefix = prefix.into();
        if !prefix.is_empty() {
            self.prefixes.push(PrefixRule {
                prefix,
                min_body,
                body: Body::Token,
            });
        }
        self
    }

    /// Also redacts the values of keys ending with `key`'s words
    /// (`"session_id"` matches `session_id`, `x-session-id`, `sessionId`;
    /// up to four words).
    #[must_use]
    pub fn with_key(mut self, key: &str) -> Self {
        let tail = key_tail(key);
        if !tail.words().is_empty() {
            self.keys.push(
                tail.words()
                    .iter()
                    .map(|w| w.to_ascii_lowercase())
                    .collect(),
            );
        }
        self
    }

    /// Also redacts every occurrence of the literal `secret`.
    #[must_use]
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        if !secret.is_empty() {
            self.literals.push(secret);
        }
        self
    }

    /// Also redacts what `matcher` finds.
    #[must_use]
    pub fn with_matcher(mut self, matcher: SecretMatcher) -> Self {
        self.matchers.push(matcher);
        self
    }

    /// Whether `key` names a secret.
    pub fn is_sensitive_key(&self, key: &str) -> bool {
        let tail = key_tail(key);
        self.keys.iter().any(|rule| tail.ends_with(rule))
    }

    /// `text` with its secrets replaced; borrowed when there were none.
    pub fn scrub_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let spans = self.find(text);
        if spans.is_empty() {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(apply(text, &spans))
        }
    }

    /// Like [`Self::scrub_text`], but text that is a JSON document is
    /// redacted as JSON and stays valid JSON. `None` when nothing changed.
    pub fn scrub_document(&self, text: &str) -> Option<String> {
        let spans = self.find(text);
        if spans.is_empty() {
            return None;
        }
        let trimmed = text.trim_start();
        let document = trimmed.starts_with('{') || trimmed.starts_with('[');
        if document
            && let Ok(mut value) = serde_json::from_str::<Value>(text)
            && self.redact_value(&mut value)
        {
            let rendered = if text.contains('\n') {
                serde_json::to_string_pretty(&value)
            } else {
                serde_json::to_string(&value)
            };
            if let Ok(rendered) = rendered {
                return Some(rendered);
            }
        }
        Some(apply(text, &spans))
    }

    /// Redacts `value` in place: values of sensitive keys are replaced
    /// (except `null` and booleans), strings are scrubbed. Returns whether
    /// anything changed.
    pub fn redact_value(&self, value: &mut Value) -> bool {
        match value {
            Value::String(text) => match self.scrub_text(text) {
                Cow::Borrowed(_) => false,
                Cow::Owned(scrubbed) => {
                    *text = scrubbed;
                    true
                }
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.redact_value(item) | changed),
            Value::Object(object) => object.iter_mut().fold(false, |changed, (key, inner)| {
                let replaced = if self.is_sensitive_key(key) && is_secret_shaped(inner) {
                    *inner = Value::String(REDACTED.to_owned());
                    true
                } else {
                    self.redact_value(inner)
                };
                replaced | changed
            }),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    /// The merged spans to redact in `text`.
    fn find(&self, text: &str) -> Vec<Span> {
        let mut spans = Vec::new();
        self.find_prefixed(text, &mut spans);
        find_bearer(text, &mut spans);
        self.find_keyed(text, &mut spans);
        for literal in &self.literals {
            spans.extend(
                text.match_indices(literal.as_str())
                    .map(|(i, m)| Span::plain(i, i + m.len())),
            );
        }
        for matcher in &self.matchers {
            match catch_unwind(AssertUnwindSafe(|| matcher(text))) {
                Ok(ranges) => spans.extend(
                    ranges
                        .into_iter()
                        .filter(|r| {
                            r.start < r.end
                                && r.end <= text.len()
                                && text.is_char_boundary(r.start)
                                && text.is_char_boundary(r.end)
                        })
                        .map(|r| Span::plain(r.start, r.end)),
                ),
                // Fail closed: a broken matcher hides the whole text.
                Err(_) if !text.is_empty() => spans.push(Span::plain(0, text.len())),
                Err(_) => {}
            }
        }
        merge(spans)
    }

    fn find_prefixed(&self, text: &str, spans: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        for rule in &self.prefixes {
            for (start, _) in text.match_indices(rule.prefix.as_str()) {
                if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
                    continue;
                }
                let body_start = start + rule.prefix.len();
                let body = bytes[body_start..]
                    .iter()
                    .take_while(|b| rule.body.accepts(**b))
                    .count();
                if body >= rule.min_body {
                    spans.push(Span::plain(start, body_start + body));
                }
            }
        }
    }

    /// Values after sensitive keys: `key=value`, `key: value`,
    /// `"key": "value"`.
    fn find_keyed(&self, text: &str, spans: &mut Vec<Span>) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if !is_key_byte(bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && is_key_byte(bytes[i]) {
                i += 1;
            }
            if i - start >= 3
                && self.is_sensitive_key(&text[start..i])
                && let Some(span) = keyed_value(text, i)
            {
                spans.push(span);
            }
        }
    }
}

fn is_secret_shaped(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) => false,
        Value::String(text) => text != REDACTED,
        _ => true,
    }
}
