//! Retries, Retry-After, timeouts, connection errors and cancellation,
//! through the OpenAI-compatible client (both providers share the layer).

use std::time::{Duration, Instant};

use tinyagents_core::ModelError;

use crate::server::{Reply, Server};
use crate::{chat, fast_http, hello, openai_model};

const OK: &str = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}"#;

#[tokio::test]
async fn server_errors_are_retried_until_an_answer() {
    let server = Server::start(vec![
        Reply::json(503, r#"{"error":{"message":"busy"}}"#),
        Reply::json(502, "bad gateway"),
        Reply::json(200, OK),
    ])
    .await;
    let response = chat(&openai_model(&server, fast_http()), &hello(), &[])
        .await
        .unwrap();
    assert_eq!(response.content, "done");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_stop_at_the_policy_limit() {
    let busy = || Reply::json(500, r#"{"error":{"message":"internal"}}"#);
    let server = Server::start(vec![busy(), busy(), busy(), Reply::json(200, OK)]).await;
    let error = chat(&openai_model(&server, fast_http()), &hello(), &[])
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ModelError::Server {
            status: 500,
            message: "internal".into()
        }
    );
    assert_eq!(server.requests().len(), 3, "one attempt and two retries");
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let server = Server::start(vec![
        Reply::json(
            429,
            r#"{"error":{"message":"slow down","type":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after", "1"),
        Reply::json(200, OK),
    ])
    .await;
    let started = Instant::now();
    let response = chat(&openai_model(&server, fast_http()), &hello(), &[])
        .await
        .unwrap();
    assert_eq!(response.content, "done");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_attempt_that_takes_too_long_times_out_once() {
    let server = Server::start(vec![Reply::hang(), Reply::json(200, OK)]).await;
    let model = openai_model(
        &server,
        fast_http().with_timeout(Duration::from_millis(200)),
    );
    let error = chat(&model, &hello(), &[]).await.unwrap_err();
    assert_eq!(error, ModelError::Timeout { after_ms: 200 });
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    // Port 0 always refuses a connection. (A port bound and released here
    // could be handed to another test's server running at the same time,
    // whose scripted replies this request would then take.)
    let config =
        tinyagents_models::OpenAiConfig::compatible("http://127.0.0.1:0/v1".to_owned(), "m")
            .with_http(fast_http());
    let model = tinyagents_models::OpenAiModel::new(config).unwrap();
    let error = chat(&model, &hello(), &[]).await.unwrap_err();
    assert!(matches!(error, ModelError::Transport { .. }), "{error:?}");
}

#[tokio::test]
async fn dropping_the_call_closes_the_connection() {
    let server = Server::start(vec![Reply::hang()]).await;
    let model = openai_model(&server, fast_http());
    let call = async { chat(&model, &hello(), &[]).await };
    tokio::select! {
        result = call => panic!("a hanging server cannot answer: {result:?}"),
        () = server.received() => {}
    }
    // The call's future is dropped here: the server sees the client leave.
    assert!(server.client_left().await, "the connection stayed open");
    assert_eq!(server.requests().len(), 1);
}
