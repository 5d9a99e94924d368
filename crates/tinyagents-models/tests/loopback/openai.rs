//! Chat Completions over loopback: request shape, whole and streamed
//! answers, parallel tool calls, typed errors and truncated streams.

use serde_json::json;
use tinyagents_core::{CallId, Message, ModelDelta, ModelError, ModelToolCall, Usage};
use tinyagents_models::{OpenAiConfig, OpenAiModel};

use crate::server::{Reply, Server};
use crate::{add_tool, chat, chat_streaming, fast_http, hello, openai_model, pieces};

const WHOLE: &str = r#"{
  "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant", "content": null,
      "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}},
        {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 3"}}
      ]
    },
    "finish_reason": "tool_calls"
  }],
  "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}
}"#;

const STREAM: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\": 1,\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\" \\\"b\\\": 2}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    ": keep-alive comment\n\n",
    "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n",
    "data: [DONE]\n\n",
);

/// [`hello`], then a turn that only called `add` (provider id `call_0`),
/// answered `result`.
fn after_one_call(result: &str, is_error: bool) -> Vec<Message> {
    let mut messages = hello();
    messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![
            ModelToolCall::from_text(Some("call_0".into()), "add", "{}")
                .into_call(CallId::new("p1")),
        ],
        reasoning: None,
    });
    messages.push(Message::Tool {
        call_id: CallId::new("p1"),
        provider_id: Some("call_0".into()),
        name: "add".into(),
        content: result.into(),
        is_error,
    });
    messages
}

#[tokio::test]
async fn sends_the_transcript_and_reads_parallel_tool_calls() {
    let server = Server::start(vec![Reply::json(200, WHOLE)]).await;
    let model = openai_model(&server, fast_http());
    let messages = after_one_call("missing a and b", true);
    let response = chat(&model, &messages, &add_tool()).await.unwrap();

    assert_eq!(response.content, "");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage, Usage::new(12, 7));
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(
        response.tool_calls[0],
        ModelToolCall::new(Some("call_a".into()), "add", json!({"a": 1, "b": 2}))
    );
    // Arguments that are not JSON are kept verbatim for the harness.
    assert_eq!(
        response.tool_calls[1].raw_arguments.as_deref(),
        Some("{\"a\": 3")
    );

    let sent = &server.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    let body = sent.json();
    assert_eq!(body["model"], "gpt-test");
    assert!(body.get("stream").is_none());
    assert_eq!(body["tools"][0]["function"]["name"], "add");
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_0");
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_0", "content": "missing a and b"})
    );
}

#[tokio::test]
async fn streams_tool_call_deltas_split_across_chunks() {
    let server = Server::start(vec![Reply::sse(&pieces(STREAM, 37))]).await;
    let model = openai_model(&server, fast_http());
    let (response, deltas) = chat_streaming(&model, &hello(), &add_tool()).await;
    let response = response.unwrap();

    assert_eq!(
        response.tool_calls,
        vec![
            ModelToolCall::new(Some("call_a".into()), "add", json!({"a": 1, "b": 2})),
            ModelToolCall::new(Some("call_b".into()), "add", json!({})),
        ]
    );
    assert_eq!(response.usage, Usage::new(12, 7));
    assert_eq!(
        deltas,
        vec![
            ModelDelta::ToolCallStarted {
                index: 0,
                name: "add".into()
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: "{\"a\": 1,".into()
            },
            ModelDelta::ToolCallStarted {
                index: 1,
                name: "add".into()
            },
            ModelDelta::ToolCallArguments {
                index: 1,
                fragment: "{}".into()
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: " \"b\": 2}".into()
            },
        ]
    );
    let body = server.requests()[0].json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn streams_text_and_reasoning() {
    let stream = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Think.\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\r\n\r\n",
        "data: [DONE]\r\n\r\n",
    );
    let server = Server::start(vec![Reply::sse(&pieces(stream, 5))]).await;
    let (response, deltas) =
        chat_streaming(&openai_model(&server, fast_http()), &hello(), &[]).await;
    let response = response.unwrap();
    assert_eq!(response.content, "Hello");
    assert_eq!(response.reasoning.as_deref(), Some("Think."));
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        deltas,
        vec![
            ModelDelta::Reasoning {
                text: "Think.".into()
            },
            ModelDelta::Text { text: "Hel".into() },
            ModelDelta::Text { text: "lo".into() },
        ]
    );
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_answers() {
    let server = Server::start(vec![Reply::json(200, WHOLE)]).await;
    let (response, deltas) =
        chat_streaming(&openai_model(&server, fast_http()), &hello(), &add_tool()).await;
    assert_eq!(response.unwrap().tool_calls.len(), 2);
    assert!(deltas.is_empty());
}

#[tokio::test]
async fn a_truncated_stream_after_deltas_is_a_transport_error_and_not_retried() {
    let cut = &STREAM[..STREAM.find("finish_reason\":\"tool_calls").unwrap()];
    let cut = &cut[..cut.rfind("\n\n").unwrap() + 2];
    let server = Server::start(vec![Reply::sse_until_close(&[cut]), Reply::sse(&[STREAM])]).await;
    let (response, deltas) =
        chat_streaming(&openai_model(&server, fast_http()), &hello(), &add_tool()).await;
    assert!(
        matches!(response, Err(ModelError::Transport { .. })),
        "{response:?}"
    );
    assert!(!deltas.is_empty());
    assert_eq!(
        server.requests().len(),
        1,
        "deltas were already shown: no retry"
    );
}

#[tokio::test]
async fn a_truncated_stream_before_any_delta_is_retried() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    let server = Server::start(vec![
        Reply::sse_until_close(&[first]),
        Reply::sse(&[STREAM]),
    ])
    .await;
    let (response, _) =
        chat_streaming(&openai_model(&server, fast_http()), &hello(), &add_tool()).await;
    assert_eq!(response.unwrap().tool_calls.len(), 2);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn http_errors_are_typed_and_final_ones_are_not_retried() {
    let cases = [
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        ),
        (
            404,
            r#"{"error":"model \"llama9\" not found, try pulling it first"}"#,
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        ),
    ];
    for (status, body) in cases {
        let server = Server::start(vec![Reply::json(status, body)]).await;
        let error = chat(&openai_model(&server, fast_http()), &hello(), &[])
            .await
            .unwrap_err();
        let ok = match status {
            401 => {
                matches!(error, ModelError::Authentication { ref message } if message.contains("Incorrect API key"))
            }
            400 => matches!(error, ModelError::ContextLength { .. }),
            404 => {
                matches!(error, ModelError::InvalidRequest { ref message } if message.contains("not found"))
            }
            _ => matches!(
                error,
                ModelError::RateLimited {
                    retry_after: None,
                    ..
                }
            ),
        };
        assert!(ok, "{status}: {error:?}");
        assert_eq!(server.requests().len(), 1, "{status} must not be retried");
    }
}

#[tokio::test]
async fn an_error_inside_the_stream_is_typed() {
    let stream = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_exceeded\"}}\n\n";
    let server = Server::start(vec![Reply::sse(&[stream])]).await;
    let http = fast_http().with_retry(tinyagents_models::RetryPolicy::none());
    let (response, _) = chat_streaming(&openai_model(&server, http), &hello(), &[]).await;
    assert!(
        matches!(response, Err(ModelError::RateLimited { .. })),
        "{response:?}"
    );
}

#[tokio::test]
async fn junk_and_oversized_bodies_are_malformed() {
    let server = Server::start(vec![
        Reply::json(200, "<html>gateway</html>"),
        Reply::json(200, r#"{"choices": []}"#),
        Reply::json(200, &format!(r#"{{"pad": "{}"}}"#, "x".repeat(4096))),
        Reply::sse(&["data: {not json}\n\n"]),
    ])
    .await;
    let model = openai_model(&server, fast_http().with_max_body_bytes(1024));
    for _ in 0..3 {
        let error = chat(&model, &hello(), &[]).await.unwrap_err();
        assert!(matches!(error, ModelError::Malformed { .. }), "{error:?}");
    }
    let (response, _) = chat_streaming(&model, &hello(), &[]).await;
    assert!(
        matches!(response, Err(ModelError::Malformed { .. })),
        "{response:?}"
    );
    assert_eq!(
        server.requests().len(),
        4,
        "malformed answers are not retried"
    );
}

/// Issue 12: a server that cannot stream tool calls (the `llama-cpp:`
/// spec sets it) gets a request that offers tools whole, even when the
/// caller listens for deltas, with `""` as a tool-only turn's text; a
/// request without tools still streams.
#[tokio::test]
async fn a_server_without_streamed_tool_calls_gets_tool_requests_whole() {
    let server = Server::start(vec![
        Reply::json(200, WHOLE),
        Reply::sse(&pieces(STREAM, 64)),
    ])
    .await;
    let config = OpenAiConfig::compatible(format!("{}/v1", server.url()), "local")
        .with_tool_only_content(tinyagents_models::ToolOnlyContent::EmptyString)
        .with_stream_with_tools(false)
        .with_http(fast_http());
    let model = OpenAiModel::new(config).unwrap();
    let messages = after_one_call("3", false);
    let (whole, deltas) = chat_streaming(&model, &messages, &add_tool()).await;
    assert_eq!(whole.unwrap().tool_calls.len(), 2);
    assert!(deltas.is_empty(), "answered whole");
    let sent = server.requests()[0].json();
    assert_eq!(sent.get("stream"), None);
    assert_eq!(sent["tool_choice"], json!("auto"));
    assert_eq!(sent["messages"][2]["content"], json!(""));
    let (streamed, deltas) = chat_streaming(&model, &hello(), &[]).await;
    assert!(streamed.is_ok());
    assert!(!deltas.is_empty(), "no tools offered: streamed");
    assert_eq!(server.requests()[1].json()["stream"], json!(true));
}
