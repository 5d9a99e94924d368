//! Messages over loopback: request shape and headers, whole and streamed
//! answers, tool use, errors inside the stream, rate limits.

use std::time::Duration;

use serde_json::json;
use tinyagents_core::{CallId, Message, ModelDelta, ModelError, ModelToolCall, Usage};

use crate::server::{Reply, Server};
use crate::{add_tool, anthropic_model, chat, chat_streaming, fast_http, hello, pieces};

const WHOLE: &str = r#"{
  "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
  "content": [
    {"type": "thinking", "thinking": "They want a sum.", "signature": "sig"},
    {"type": "text", "text": "Adding."},
    {"type": "tool_use", "id": "toolu_a", "name": "add", "input": {"a": 1, "b": 2}},
    {"type": "tool_use", "id": "toolu_b", "name": "add", "input": {}}
  ],
  "stop_reason": "tool_use", "stop_sequence": null,
  "usage": {"input_tokens": 20, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5, "output_tokens": 9}
}"#;

const STREAM: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-test\",\"stop_reason\":null,\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Adding.\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_a\",\"name\":\"add\",\"input\":{}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1, \"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"b\\\": 2}\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_b\",\"name\":\"add\",\"input\":{}}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

#[tokio::test]
async fn sends_system_tools_and_results_and_reads_tool_use() {
    let server = Server::start(vec![Reply::json(200, WHOLE)]).await;
    let model = anthropic_model(&server, fast_http());
    let mut messages = hello();
    messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![
            ModelToolCall::from_text(Some("toolu_0".into()), "add", r#"{"a":1}"#)
                .into_call(CallId::new("p1")),
            ModelToolCall::from_text(None, "add", "{}").into_call(CallId::new("p2")),
        ],
        reasoning: None,
    });
    for (id, provider) in [("p1", Some("toolu_0")), ("p2", None)] {
        messages.push(Message::Tool {
            call_id: CallId::new(id),
            provider_id: provider.map(str::to_owned),
            name: "add".into(),
            content: "3".into(),
            is_error: false,
        });
    }
    let response = chat(&model, &messages, &add_tool()).await.unwrap();

    assert_eq!(response.content, "Adding.");
    assert_eq!(response.reasoning.as_deref(), Some("They want a sum."));
    assert_eq!(response.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 28,
            output_tokens: 9,
            cached_input_tokens: 5,
            reasoning_tokens: 0,
        }
    );
    assert_eq!(
        response.tool_calls,
        vec![
            ModelToolCall::new(Some("toolu_a".into()), "add", json!({"a": 1, "b": 2})),
            ModelToolCall::new(Some("toolu_b".into()), "add", json!({})),
        ]
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("ant-test"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    let body = sent.json();
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(body["messages"][1]["content"][0]["id"], "toolu_0");
    assert_eq!(body["messages"][1]["content"][1]["id"], "p2");
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_0", "content": "3"},
            {"type": "tool_result", "tool_use_id": "p2", "content": "3"}
        ]})
    );
}

#[tokio::test]
async fn streams_text_and_tool_use_split_across_chunks() {
    let server = Server::start(vec![Reply::sse(&pieces(STREAM, 29))]).await;
    let (response, deltas) = chat_streaming(
        &anthropic_model(&server, fast_http()),
        &hello(),
        &add_tool(),
    )
    .await;
    let response = response.unwrap();

    assert_eq!(response.content, "Adding.");
    assert_eq!(response.usage, Usage::new(20, 15));
    assert_eq!(response.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        response.tool_calls,
        vec![
            ModelToolCall::new(Some("toolu_a".into()), "add", json!({"a": 1, "b": 2})),
            ModelToolCall::new(Some("toolu_b".into()), "add", json!({})),
        ]
    );
    assert_eq!(
        deltas,
        vec![
            ModelDelta::Text {
                text: "Adding.".into()
            },
            ModelDelta::ToolCallStarted {
                index: 0,
                name: "add".into()
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: "{\"a\": 1, ".into()
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: "\"b\": 2}".into()
            },
            ModelDelta::ToolCallStarted {
                index: 1,
                name: "add".into()
            },
        ]
    );
    assert_eq!(server.requests()[0].json()["stream"], true);
}

#[tokio::test]
async fn an_overloaded_error_mid_stream_is_a_server_error_and_not_retried() {
    let cut = &STREAM[..STREAM.find("event: content_block_stop").unwrap()];
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let server = Server::start(vec![Reply::sse(&[cut, error]), Reply::sse(&[STREAM])]).await;
    let (response, deltas) =
        chat_streaming(&anthropic_model(&server, fast_http()), &hello(), &[]).await;
    assert_eq!(
        response,
        Err(ModelError::Server {
            status: 529,
            message: "Overloaded".into()
        })
    );
    assert_eq!(
        deltas,
        vec![ModelDelta::Text {
            text: "Adding.".into()
        }]
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn overloaded_responses_are_retried() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let server = Server::start(vec![Reply::json(529, overloaded), Reply::json(200, WHOLE)]).await;
    let response = chat(&anthropic_model(&server, fast_http()), &hello(), &[])
        .await
        .unwrap();
    assert_eq!(response.content, "Adding.");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_long_retry_after_is_returned_not_waited_for() {
    let limited = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    let server = Server::start(vec![
        Reply::json(429, limited).header("retry-after", "3600"),
    ])
    .await;
    let error = chat(&anthropic_model(&server, fast_http()), &hello(), &[])
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::RateLimited { retry_after: Some(wait), .. } if wait == Duration::from_secs(3600)),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_stream_without_message_stop_is_truncated() {
    let cut = &STREAM[..STREAM.find("event: message_stop").unwrap()];
    let server = Server::start(vec![Reply::sse_until_close(&[cut])]).await;
    let (response, _) = chat_streaming(&anthropic_model(&server, fast_http()), &hello(), &[]).await;
    assert!(
        matches!(response, Err(ModelError::Transport { .. })),
        "{response:?}"
    );
}
