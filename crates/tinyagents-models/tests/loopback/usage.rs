//! Token usage over loopback: the cache and reasoning breakdowns of both
//! providers, in whole and streamed answers, and zeros when a server leaves
//! them out, sends `null` or sends junk.

use serde_json::{Value, json};
use tinyagents_core::{ChatResponse, Usage};

use crate::server::{Reply, Server};
use crate::{anthropic_model, chat, chat_streaming, fast_http, hello, openai_model, pieces};

/// Cut size for streams, so usage objects straddle chunks.
const CUT: usize = 7;

/// A whole Chat Completions answer `Hi.` whose `usage` is `usage`.
fn openai_body(usage: &Value) -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."},
            "finish_reason": "stop"}],
        "usage": usage
    })
    .to_string()
}

/// A streamed answer `Hi.` as `stream_options.include_usage` makes it:
/// `"usage": null` on every chunk but a last, choice-less one.
fn openai_stream(usage: &Value) -> String {
    let chunks = [
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}], "usage": null}),
        json!({"choices": [{"index": 0, "delta": {"content": "."}, "finish_reason": "stop"}], "usage": null}),
        json!({"choices": [], "usage": usage}),
    ];
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// A whole Messages answer `Hi.` whose `usage` is `usage`.
fn anthropic_body(usage: &Value) -> String {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Hi."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": usage
    })
    .to_string()
}

/// A streamed answer `Hi.`: `start` is `message_start`'s usage, `delta`
/// `message_delta`'s.
fn anthropic_stream(start: &Value, delta: &Value) -> String {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-test", "usage": start}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta}),
        json!({"type": "message_stop"}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// The answers to one whole and one streamed request, each served by
/// `replies` in turn.
async fn whole_and_streamed(replies: Vec<Reply>, anthropic: bool) -> (ChatResponse, ChatResponse) {
    let server = Server::start(replies).await;
    let (whole, streamed) = if anthropic {
        let model = anthropic_model(&server, fast_http());
        (
            chat(&model, &hello(), &[]).await,
            chat_streaming(&model, &hello(), &[]).await.0,
        )
    } else {
        let model = openai_model(&server, fast_http());
        (
            chat(&model, &hello(), &[]).await,
            chat_streaming(&model, &hello(), &[]).await.0,
        )
    };
    let (whole, streamed) = (whole.unwrap(), streamed.unwrap());
    assert_eq!(
        (whole.content.as_str(), streamed.content.as_str()),
        ("Hi.", "Hi.")
    );
    assert_eq!(server.requests().len(), 2);
    (whole, streamed)
}

/// OpenAI's answer for usage `usage`, whole and streamed.
async fn openai(usage: &Value) -> (Usage, Usage) {
    let stream = openai_stream(usage);
    let replies = vec![
        Reply::json(200, &openai_body(usage)),
        Reply::sse(&pieces(&stream, CUT)),
    ];
    let (whole, streamed) = whole_and_streamed(replies, false).await;
    (whole.usage, streamed.usage)
}

/// Anthropic's answer for the whole body's usage `whole` and the stream's
/// `start` and `delta` usages.
async fn anthropic(whole: &Value, start: &Value, delta: &Value) -> (Usage, Usage) {
    let stream = anthropic_stream(start, delta);
    let replies = vec![
        Reply::json(200, &anthropic_body(whole)),
        Reply::sse(&pieces(&stream, CUT)),
    ];
    let (whole, streamed) = whole_and_streamed(replies, true).await;
    (whole.usage, streamed.usage)
}

#[tokio::test]
async fn openai_reports_cached_and_reasoning_tokens_whole_and_streamed() {
    let usage = json!({
        "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    });
    let expected = Usage {
        input_tokens: 2006,
        output_tokens: 300,
        cached_input_tokens: 1920,
        reasoning_tokens: 256,
    };
    assert_eq!(openai(&usage).await, (expected, expected));
}

#[tokio::test]
async fn openai_usage_without_or_with_null_details_has_zero_cached_and_reasoning_tokens() {
    for usage in [
        json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}),
        json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
            "prompt_tokens_details": null, "completion_tokens_details": null}),
        json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19,
            "prompt_tokens_details": {"cached_tokens": null}, "completion_tokens_details": {}}),
    ] {
        let expected = Usage::new(12, 7);
        assert_eq!(openai(&usage).await, (expected, expected), "{usage}");
    }
}

#[tokio::test]
async fn openai_junk_usage_details_are_ignored_and_the_answer_kept() {
    for usage in [
        json!({"prompt_tokens": 12, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": "5"},
            "completion_tokens_details": {"reasoning_tokens": -3}}),
        json!({"prompt_tokens": 12, "completion_tokens": 7,
            "prompt_tokens_details": "cached", "completion_tokens_details": [4]}),
    ] {
        let expected = Usage::new(12, 7);
        assert_eq!(openai(&usage).await, (expected, expected), "{usage}");
    }
}

#[tokio::test]
async fn anthropic_counts_cache_reads_and_writes_as_input_whole_and_streamed() {
    let whole = json!({"input_tokens": 20, "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 5, "output_tokens": 9,
        "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0}});
    let start = json!({"input_tokens": 20, "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 5, "output_tokens": 1});
    let expected = Usage {
        input_tokens: 28,
        output_tokens: 9,
        cached_input_tokens: 5,
        reasoning_tokens: 0,
    };
    // `message_delta` with only the output count, as the API long sent it,
    // and with every count again, cumulative, as it sends it now.
    for delta in [json!({"output_tokens": 9}), whole.clone()] {
        assert_eq!(
            anthropic(&whole, &start, &delta).await,
            (expected, expected),
            "{delta}"
        );
    }
}

#[tokio::test]
async fn anthropic_usage_without_or_with_null_cache_counts_has_zero_cached_tokens() {
    for usage in [
        json!({"input_tokens": 20, "output_tokens": 9}),
        json!({"input_tokens": 20, "output_tokens": 9,
            "cache_creation_input_tokens": null, "cache_read_input_tokens": null}),
    ] {
        let expected = Usage::new(20, 9);
        assert_eq!(
            anthropic(&usage, &usage, &json!({"output_tokens": 9})).await,
            (expected, expected),
            "{usage}"
        );
    }
}

#[tokio::test]
async fn anthropic_junk_cache_counts_are_ignored_and_the_answer_kept() {
    let usage = json!({"input_tokens": 20, "output_tokens": 9,
        "cache_creation_input_tokens": "3", "cache_read_input_tokens": {"n": 5}});
    let expected = Usage::new(20, 9);
    assert_eq!(
        anthropic(&usage, &usage, &json!({"output_tokens": 9})).await,
        (expected, expected)
    );
}
