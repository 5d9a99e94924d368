//! `RedactionMiddleware`: scrubs secrets from the results of model-issued
//! calls (`after_tool`, so the transcript and the events never hold them)
//! and from payloads bound for events and persistence (`redact`: arguments
//! under payload capture, ledger rows). What counts as a secret is the
//! [`Redactor`]'s business.
//!
//! Like every `after_tool`, it does not run for nested calls: their results
//! reach only the calling tool, and their arguments reach events only under
//! `PayloadCapture::tool_io`, through `redact` if the harness calls it.

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{RunContext, State, TinyAgentsError, ToolCall, ToolResult};

use crate::hooks::Middleware;
use crate::redact::Redactor;

/// Replaces secrets with `[REDACTED]` in results and payloads.
#[derive(Debug, Clone, Default)]
pub struct RedactionMiddleware {
    redactor: Redactor,
}

impl RedactionMiddleware {
    /// Redaction with the default patterns.
    pub fn new() -> Self {
        Self::default()
    }

    /// Redaction with `redactor`'s patterns (the defaults plus the host's).
    pub fn with_redactor(redactor: Redactor) -> Self {
        Self { redactor }
    }

    /// The patterns in use.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Scrubs a result in place: its content (as JSON when it is a JSON
    /// document, so it stays one) and its metadata.
    pub fn scrub_result(&self, result: &mut ToolResult) {
        if let Some(scrubbed) = self.redactor.scrub_document(&result.content) {
            result.content = scrubbed;
        }
        if let Some(metadata) = &mut result.metadata {
            self.redactor.redact_value(metadata);
        }
    }
}

#[async_trait]
impl Middleware for RedactionMiddleware {
    fn name(&self) -> &str {
        "redaction"
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _call: &ToolCall,
        result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.scrub_result(result);
        Ok(())
    }

    fn redact(&self, payload: &mut Value) {
        self.redactor.redact_value(payload);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::redact::REDACTED;
    use crate::testing::{call, ctx_with};
    use serde_json::json;

    const OPENAI: &str = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z";
    const ANTHROPIC: &str = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0Ed";
    const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
    const GITHUB: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";

    fn scrub(text: &str) -> String {
        Redactor::new().scrub_text(text).into_owned()
    }

    #[test]
    fn api_keys_are_found_by_prefix() {
        for key in [OPENAI, ANTHROPIC, AWS, GITHUB, "xoxb-2048-1024-AbCdEfGhIj"] {
            let text = format!("key={key} and '{key}', ({key}).");
            let out = scrub(&text);
            assert!(!out.contains(key), "{out}");
            assert_eq!(out.matches(REDACTED).count(), 3, "{out}");
        }
        assert_eq!(scrub(&format!("use {OPENAI} now")), "use [REDACTED] now");
    }

    #[test]
    fn words_that_only_look_like_prefixes_are_kept() {
        for text in [
            "task-manager-queue-processing-module is fine",
            "sk-learn is a library",
            "AKIA is short",
            "the bearer of bad news",
            "bearer instruments",
            "max_tokens: 1024",
            "token_count = 5",
        ] {
            assert_eq!(scrub(text), text);
            assert!(matches!(
                Redactor::new().scrub_text(text),
                std::borrow::Cow::Borrowed(_)
            ));
        }
    }

    #[test]
    fn bearer_tokens_and_authorization_headers_are_scrubbed() {
        assert_eq!(
            scrub("curl -H 'Authorization: Bearer eyJhbGciOi.J9.abc123' x"),
            "curl -H 'Authorization: Bearer [REDACTED]' x"
        );
        assert_eq!(scrub("bearer abcdefgh12345678"), "bearer [REDACTED]");
        assert_eq!(
            scrub("Authorization: Basic dXNlcjpwYXNzd29yZA=="),
            "Authorization: Basic [REDACTED]"
        );
    }

    #[test]
    fn sensitive_keys_in_text_are_scrubbed() {
        assert_eq!(
            scrub("db: password=hunter2&user=bob"),
            "db: password=[REDACTED]&user=bob"
        );
        assert_eq!(
            scrub("https://x.test/cb?access_token=abc.def&state=1"),
            "https://x.test/cb?access_token=[REDACTED]&state=1"
        );
        assert_eq!(
            scrub("OPENAI_API_KEY=\"hello world\""),
            "OPENAI_API_KEY=\"[REDACTED]\""
        );
        assert_eq!(
            scrub("client_secret: s3cr3t\nnext: 1"),
            "client_secret: [REDACTED]\nnext: 1"
        );
        assert_eq!(
            scrub(r#"{"apiKey": "k-1", "pin_password": 1234, "token": null}"#),
            r#"{"apiKey": "[REDACTED]", "pin_password": "[REDACTED]", "token": null}"#
        );
        // Scrubbing twice changes nothing more.
        let once = scrub("password=[REDACTED] token: \"[REDACTED]\"");
        assert_eq!(once, "password=[REDACTED] token: \"[REDACTED]\"");
    }

    #[test]
    fn key_names_split_into_words() {
        let r = Redactor::new();
        for key in [
            "password",
            "DB_PASSWORD",
            "x-api-key",
            "apiKey",
            "APIKey",
            "accessToken",
            "client_secret",
            "Authorization",
        ] {
            assert!(r.is_sensitive_key(key), "{key}");
        }
        for key in [
            "max_tokens",
            "token_count",
            "secret_name",
            "keyboard",
            "passage",
            "tokenizer",
        ] {
            assert!(!r.is_sensitive_key(key), "{key}");
        }
    }

    #[test]
    fn json_values_are_redacted_by_key_and_by_content() {
        let mut value = json!({
            "user": "ann",
            "password": "hunter2",
            "credentials": {"user": "ann", "pin": 1},
            "headers": {"Authorization": "Bearer abc.def.ghi123"},
            "notes": [format!("my key is {AWS}"), "nothing here"],
            "max_tokens": 100,
            "secret": null,
        });
        assert!(Redactor::new().redact_value(&mut value));
        assert_eq!(
            value,
            json!({
                "user": "ann",
                "password": REDACTED,
                "credentials": REDACTED,
                "headers": {"Authorization": REDACTED},
                "notes": ["my key is [REDACTED]", "nothing here"],
                "max_tokens": 100,
                "secret": null,
            })
        );
        assert!(!Redactor::new().redact_value(&mut value));
    }

    #[test]
    fn json_documents_stay_json() {
        let text = format!(r#"{{"ok":true,"api_key":12345,"log":"used {OPENAI}"}}"#);
        let out = Redactor::new().scrub_document(&text).unwrap();
        let parsed: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            parsed,
            json!({"ok": true, "api_key": REDACTED, "log": "used [REDACTED]"})
        );
        assert_eq!(Redactor::new().scrub_document("{\"a\": 1}"), None);
        // Not JSON after all: scrubbed as text.
        assert_eq!(
            Redactor::new().scrub_document("{ password=abc").as_deref(),
            Some("{ password=[REDACTED]")
        );
    }

    #[test]
    fn host_patterns_are_added() {
        let matcher: crate::redact::SecretMatcher = Arc::new(|text: &str| {
            text.find("PIN ")
                .map(|i| i + 4..(i + 8).min(text.len()))
                .into_iter()
                .collect()
        });
        let r = Redactor::new()
            .with_prefix("acme_", 8)
            .with_key("session_id")
            .with_secret("correct horse battery")
            .with_matcher(matcher);
        assert_eq!(r.scrub_text("acme_12345678 acme_1"), "[REDACTED] acme_1");
        assert_eq!(
            r.scrub_text("x-session-id: abc"),
            "x-session-id: [REDACTED]"
        );
        assert!(r.is_sensitive_key("sessionId"));
        assert_eq!(
            r.scrub_text("it is correct horse battery staple"),
            "it is [REDACTED] staple"
        );
        assert_eq!(r.scrub_text("PIN 1234 ok"), "PIN [REDACTED] ok");
    }

    #[test]
    fn a_panicking_matcher_redacts_everything() {
        let boom: crate::redact::SecretMatcher = Arc::new(|_: &str| panic!("bad matcher"));
        let r = Redactor::new().with_matcher(boom);
        assert_eq!(r.scrub_text("harmless text"), REDACTED);
        let bad_ranges: crate::redact::SecretMatcher =
            Arc::new(|_: &str| vec![std::ops::Range { start: 5, end: 2 }, 0..999]);
        assert_eq!(
            Redactor::new().with_matcher(bad_ranges).scrub_text("héllo"),
            "héllo"
        );
    }

    #[tokio::test]
    async fn after_tool_scrubs_content_and_metadata() {
        let mw = RedactionMiddleware::new();
        let mut ctx = ctx_with([]);
        let mut result = ToolResult::text(format!("export GITHUB_TOKEN={GITHUB}"))
            .with_metadata(json!({"request": {"headers": {"x-api-key": "abc"}}}));
        mw.after_tool(
            &mut ctx,
            &State::default(),
            &call("p1", "env", json!({})),
            &mut result,
        )
        .await
        .unwrap();
        assert_eq!(result.content, "export GITHUB_TOKEN=[REDACTED]");
        assert_eq!(
            result.metadata,
            Some(json!({"request": {"headers": {"x-api-key": REDACTED}}}))
        );
    }

    #[test]
    fn redact_scrubs_payloads() {
        let mw =
            RedactionMiddleware::with_redactor(Redactor::new().with_secret("tenant-42-private"));
        let mut payload = json!({"q": "tinyagents", "auth": format!("Bearer {OPENAI}"), "note": "tenant-42-private"});
        mw.redact(&mut payload);
        assert_eq!(
            payload,
            json!({"q": "tinyagents", "auth": "Bearer [REDACTED]", "note": REDACTED})
        );
        assert!(mw.redactor().is_sensitive_key("password"));
    }
}
