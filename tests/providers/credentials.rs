//! Issue 12, credential hygiene: a key planted in each place a client holds
//! one (the base URL's user-info, the API key, a sensitive header) and
//! echoed back by a server in its error body (as some proxies do) appears in
//! no output: `Debug` of configs, models and specs, error texts, and the
//! events and error of a run through the harness.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use tinyagents::prelude::*;
use tinyagents::{
    core::ModelError, models::AnthropicConfig, models::AnthropicModel, models::ModelSpec,
    models::OpenAiConfig, models::OpenAiModel,
};
use tinyagents_tests::collector;

const URL_PASSWORD: &str = "url-pass-PLANTED-1";
const API_KEY: &str = "sk-key-PLANTED-2";
const HEADER_TOKEN: &str = "header-tok-PLANTED-3";
/// `svc:url-pass-PLANTED-1` in base64, as basic credentials travel.
const BASIC: &str = "c3ZjOnVybC1wYXNzLVBMQU5URUQtMQ==";

/// A server that answers every request 401 with a JSON body quoting the
/// whole request it received (its headers included).
fn echoing_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let echo = format!("{head}{}", String::from_utf8_lossy(&body));
            let answer = serde_json::json!({"error": {"message": format!("bad credentials in: {echo}"), "type": "auth"}})
                .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    format!("http://svc:{URL_PASSWORD}@{address}")
}

fn assert_clean(what: &str, text: &str) {
    for planted in [URL_PASSWORD, API_KEY, HEADER_TOKEN, BASIC] {
        assert!(!text.contains(planted), "{what} leaks {planted}: {text}");
    }
}

async fn run_and_check(model: Arc<dyn ChatModel>, what: &str) {
    let harness = AgentHarness::builder(model).build().unwrap();
    let (sink, collected) = collector();
    let error = harness
        .run_with(RunRequest::new("hello"), &sink)
        .await
        .unwrap_err();
    drop(sink);
    let events = collected.await.unwrap();
    assert!(
        matches!(&error, TinyAgentsError::Model(ModelError::Authentication { message }) if message.contains("bad credentials in")),
        "{what}: the server's own words arrive: {error:?}"
    );
    assert!(
        error.to_string().contains("[redacted]"),
        "{what}: the echoed secrets are replaced: {error}"
    );
    assert_clean(&format!("{what} error"), &error.to_string());
    assert_clean(&format!("{what} error (Debug)"), &format!("{error:?}"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::RunFailed { .. }))
    );
    for event in &events {
        assert_clean(&format!("{what} event"), &format!("{event:?}"));
    }
}

#[tokio::test]
async fn i12_2_3_no_planted_credential_reaches_any_output_of_either_client() {
    let base = echoing_server();
    let openai = OpenAiConfig::compatible(format!("{base}/v1"), "m")
        .with_api_key(API_KEY)
        .with_header("X-Api-Key", HEADER_TOKEN);
    assert_clean("OpenAiConfig Debug", &format!("{openai:?}"));
    let model = OpenAiModel::new(openai).unwrap();
    assert_clean("OpenAiModel Debug", &format!("{model:?}"));
    run_and_check(Arc::new(model), "openai").await;

    let anthropic = AnthropicConfig::new("m")
        .with_api_key(API_KEY)
        .with_header("Authorization", format!("Bearer {HEADER_TOKEN}"));
    let mut anthropic = anthropic;
    anthropic.base_url = format!("{base}/v1");
    assert_clean("AnthropicConfig Debug", &format!("{anthropic:?}"));
    let model = AnthropicModel::new(anthropic).unwrap();
    assert_clean("AnthropicModel Debug", &format!("{model:?}"));
    run_and_check(Arc::new(model), "anthropic").await;
}

#[test]
fn i12_2_a_spec_with_credentials_in_its_url_never_shows_them() {
    let spec = format!("openai-compatible:https://svc:{URL_PASSWORD}@proxy.example/v1#m");
    let parsed = ModelSpec::parse(&spec).unwrap();
    assert_clean("ModelSpec Debug", &format!("{parsed:?}"));
    for bad in [
        format!("openai-compatible:https://svc:{URL_PASSWORD}@proxy.example/v1"),
        format!("openai-compatible:ftp://svc:{URL_PASSWORD}@proxy.example/v1#m"),
        format!("llama-cpp:https://svc:{URL_PASSWORD}@proxy.example/v1#"),
    ] {
        let error = ModelSpec::parse(&bad).unwrap_err();
        assert_clean("SpecError", &error.to_string());
        assert_clean("SpecError Debug", &format!("{error:?}"));
    }
}
