//! The response parsers on bad input: arbitrary bytes, provider-shaped
//! junk and valid streams cut anywhere. They never panic, and how a stream
//! is split into chunks never changes what it means.
//!
//! This is the stable-toolchain counterpart of the fuzz target in `fuzz/`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // tests

use std::sync::Mutex;

use proptest::prelude::*;
use serde_json::{Value, json};
use tinyagents_core::{ChatResponse, ModelDelta, ModelError, ModelToolCall};
use tinyagents_models::sse::{SseEvent, SseParser};
use tinyagents_models::{anthropic, openai};

type StreamParser =
    fn(Vec<&[u8]>, Option<tinyagents_core::DeltaSink<'_>>) -> Result<ChatResponse, ModelError>;

const PARSERS: [StreamParser; 2] = [
    |c, d| openai::parse_stream(c, d),
    |c, d| anthropic::parse_stream(c, d),
];

/// Words the providers' formats use, so generated junk reaches deep paths.
const WORDS: &[&str] = &[
    "[DONE]",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
    "text",
    "thinking",
    "tool_use",
    "text_delta",
    "thinking_delta",
    "input_json_delta",
    "function",
    "stop",
    "tool_calls",
    "{\"a\":",
    "1}",
    "",
    "add",
    "overloaded_error",
    "rate_limit_error",
    "context_length_exceeded",
];
const KEYS: &[&str] = &[
    "type",
    "index",
    "choices",
    "delta",
    "message",
    "content",
    "tool_calls",
    "id",
    "function",
    "name",
    "arguments",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "completion_tokens_details",
    "reasoning_tokens",
    "content_block",
    "partial_json",
    "text",
    "thinking",
    "input",
    "stop_reason",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "error",
    "reasoning_content",
    "refusal",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-2i64..3).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(WORDS).prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|pairs| {
                Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// Provider-shaped event streams: `event:` names and JSON `data:`.
fn event_stream() -> impl Strategy<Value = String> {
    let event = (
        prop::option::of(prop::sample::select(WORDS)),
        json_value(),
        any::<bool>(),
    );
    prop::collection::vec(event, 0..12).prop_map(|events| {
        events
            .into_iter()
            .map(|(name, data, done)| {
                let name = name.map(|n| format!("event: {n}\n")).unwrap_or_default();
                let data = if done {
                    "[DONE]".to_owned()
                } else {
                    data.to_string()
                };
                format!("{name}data: {data}\n\n")
            })
            .collect()
    })
}

/// Runs a stream parser over `chunks`, with the deltas it reported.
fn run(
    parser: StreamParser,
    chunks: Vec<&[u8]>,
) -> (Result<ChatResponse, ModelError>, Vec<ModelDelta>) {
    let deltas = Mutex::new(Vec::new());
    let sink = |d: ModelDelta| deltas.lock().unwrap().push(d);
    let result = parser(chunks, Some(&sink));
    (result, deltas.into_inner().unwrap())
}

/// `bytes` cut at the given points (sorted, deduplicated, in range).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        out.push(&bytes[at..cut]);
        at = cut;
    }
    out
}

fn sse_events(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, ModelError> {
    let mut parser = SseParser::new(1 << 16);
    let mut events = Vec::new();
    for chunk in chunks {
        parser.push(chunk);
        while let Some(event) = parser.next_event()? {
            events.push(event);
        }
    }
    events.extend(parser.finish()?);
    Ok(events)
}

proptest! {
    #[test]
    fn whole_bodies_of_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = openai::parse_response(&bytes);
        let _ = anthropic::parse_response(&bytes);
    }

    #[test]
    fn whole_bodies_of_provider_shaped_json_never_panic(value in json_value()) {
        let bytes = value.to_string().into_bytes();
        let _ = openai::parse_response(&bytes);
        let _ = anthropic::parse_response(&bytes);
    }

    #[test]
    fn streams_of_arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        for parser in PARSERS {
            let _ = run(parser, split(&bytes, &cuts));
        }
        let _ = sse_events(&split(&bytes, &cuts));
    }

    #[test]
    fn the_sse_parser_does_not_care_how_bytes_are_split(
        bytes in prop::collection::vec(prop::sample::select(b"data: x\r\nevent:y:\n {}".to_vec()), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        prop_assert_eq!(sse_events(&split(&bytes, &cuts)), sse_events(&[&bytes]));
    }

    #[test]
    fn provider_shaped_streams_mean_the_same_however_split(
        stream in event_stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let bytes = stream.as_bytes();
        for parser in PARSERS {
            prop_assert_eq!(run(parser, split(bytes, &cuts)), run(parser, vec![bytes]));
        }
    }

    #[test]
    fn a_valid_stream_cut_anywhere_parses_the_same(cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        for (parser, stream) in [(PARSERS[0], OPENAI_STREAM), (PARSERS[1], ANTHROPIC_STREAM)] {
            let whole = run(parser, vec![stream.as_bytes()]);
            prop_assert!(whole.0.is_ok());
            prop_assert_eq!(run(parser, split(stream.as_bytes(), &cuts)), whole);
        }
    }
}

/// The cap the clients use by default (`HttpOptions::max_event_bytes`).
const CAP: usize = 1 << 20;

/// `data: <len x's>` and a blank line, fed in `chunks` cut at `cuts` and
/// with the bytes from `bytewise` on pushed one at a time: the events, and
/// how many bytes the line-end search examined.
fn long_line(
    len: usize,
    cuts: &[usize],
    bytewise: usize,
) -> (Result<Vec<SseEvent>, ModelError>, u64, usize) {
    let text = format!("data: {}\n\n", "x".repeat(len));
    let bytes = text.as_bytes();
    let from = bytewise % (bytes.len() + 1);
    let mut chunks = split(&bytes[..from], cuts);
    chunks.extend(bytes[from..].chunks(1));
    let mut parser = SseParser::new(CAP);
    let mut events = Vec::new();
    let mut outcome = Ok(());
    'feed: for chunk in chunks {
        parser.push(chunk);
        loop {
            match parser.next_event() {
                Ok(Some(event)) => events.push(event),
                Ok(None) => break,
                Err(error) => {
                    outcome = Err(error);
                    break 'feed;
                }
            }
        }
    }
    let result = outcome.and_then(|()| {
        events.extend(parser.finish()?);
        Ok(events)
    });
    (result, parser.examined(), bytes.len())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Issue 12, item 1: a line up to the cap means the same however it is
    /// split (a long stretch of it a byte at a time), and the search for
    /// line ends examines each byte once: linear work, not quadratic.
    #[test]
    fn lines_up_to_the_cap_parse_the_same_in_linear_work_however_split(
        len in 0usize..CAP,
        cuts in prop::collection::vec(any::<usize>(), 0..32),
        bytewise in any::<usize>(),
    ) {
        let (split_up, examined, bytes) = long_line(len, &cuts, bytewise);
        let (whole, _, _) = long_line(len, &[], usize::MAX);
        prop_assert_eq!(&split_up, &whole);
        let events = split_up.unwrap();
        prop_assert_eq!(events.len(), 1);
        prop_assert_eq!(events[0].data.len(), len);
        prop_assert!(examined <= bytes as u64, "examined {} of {} bytes", examined, bytes);
    }

    /// A line over the cap is refused however it is split, and the parser
    /// stops at the cap (it never buffers the rest).
    #[test]
    fn lines_over_the_cap_are_refused_however_split(
        over in 17usize..4096,
        cuts in prop::collection::vec(any::<usize>(), 0..32),
        bytewise in any::<usize>(),
    ) {
        let (result, _, _) = long_line(CAP + over, &cuts, bytewise);
        prop_assert!(matches!(result, Err(ModelError::Malformed { .. })), "{:?}", result.map(|e| e.len()));
    }
}

const OPENAI_STREAM: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hé\",\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\r\n\r\n",
    "data: [DONE]\r\n\r\n",
);

const ANTHROPIC_STREAM: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"add\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

#[test]
fn compatible_servers_variations_are_understood() {
    // Content as parts, arguments as an object, Ollama-style `reasoning`.
    let body = json!({"choices": [{"message": {
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "reasoning": "r",
        "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}]
    }}]});
    let response = openai::parse_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(response.content, "ab");
    assert_eq!(response.reasoning.as_deref(), Some("r"));
    assert_eq!(
        response.tool_calls,
        vec![ModelToolCall::new(None, "add", json!({"a": 1}))]
    );

    // Tool-call deltas without an index: a new id starts a new call.
    let stream = concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"y\",\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"k\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\":2}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let response = openai::parse_stream([stream.as_bytes()], None).unwrap();
    assert_eq!(
        response.tool_calls,
        vec![
            ModelToolCall::new(Some("x".into()), "a", json!({})),
            ModelToolCall::new(Some("y".into()), "b", json!({"k": 2}))
        ]
    );
}

#[test]
fn meaningless_answers_are_malformed() {
    for body in [
        "",
        "null",
        "[]",
        "{}",
        r#"{"choices":[{"message":{"tool_calls":[{"function":{}}]}}]}"#,
    ] {
        assert!(
            matches!(
                openai::parse_response(body.as_bytes()),
                Err(ModelError::Malformed { .. })
            ),
            "{body}"
        );
    }
    for body in ["", "{}", r#"{"content":[{"type":"tool_use","id":"t"}]}"#] {
        assert!(
            matches!(
                anthropic::parse_response(body.as_bytes()),
                Err(ModelError::Malformed { .. })
            ),
            "{body}"
        );
    }
    let unknown_block = "data: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    assert!(matches!(
        anthropic::parse_stream([unknown_block.as_bytes()], None),
        Err(ModelError::Malformed { .. })
    ));
    let huge = format!("data: {}\n\n", "x".repeat(2 << 20));
    assert!(matches!(
        openai::parse_stream([huge.as_bytes()], None),
        Err(ModelError::Malformed { .. })
    ));
    assert!(matches!(
        openai::parse_stream([&b""[..]], None),
        Err(ModelError::Transport { .. })
    ));
}
