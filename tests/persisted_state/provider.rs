//! Item 5 at the provider: the OpenAI-compatible client reads argument
//! text nesting past the max from a loopback server; the harness refuses
//! the call naming the depth, the run completes, and the model is sent its
//! own call back as the text it wrote.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{core::MAX_ARGUMENT_DEPTH, models::OpenAiConfig, models::OpenAiModel};
use tinyagents_tests::assert_transcript_paired;

use crate::{Recorder, answer, nested_text, too_deep};

/// How long the server waits for each connection before it gives up.
const WAIT: Duration = Duration::from_secs(30);

/// Serves `replies` (JSON bodies), one a connection, on 127.0.0.1; the
/// thread gives back the bodies of the requests it answered, and stops
/// after the last reply or when no client comes within [`WAIT`].
fn serve(replies: Vec<String>) -> (SocketAddr, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for reply in replies {
            let Some(mut stream) = accept(&listener) else {
                break;
            };
            bodies.push(read_body(&mut stream));
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                reply.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(reply.as_bytes()).unwrap();
        }
        bodies
    });
    (addr, handle)
}

fn accept(listener: &TcpListener) -> Option<TcpStream> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(WAIT)).unwrap();
                return Some(stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    None
}

/// Reads one request and returns its body (`content-length` framed).
fn read_body(stream: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut buffer).unwrap();
        assert!(read > 0, "the client closed before its request ended");
        data.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse().unwrap());
    while data.len() < head_end + length {
        let read = stream.read(&mut buffer).unwrap();
        assert!(read > 0, "the client closed before its body ended");
        data.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8(data[head_end..head_end + length].to_vec()).unwrap()
}

/// A Chat Completions answer calling `echo` with `arguments` (the text).
fn tool_call_reply(arguments: &str) -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{
                    "id": "call_a", "type": "function",
                    "function": {"name": "echo", "arguments": arguments}
                }]
            },
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    })
    .to_string()
}

/// A Chat Completions final answer `done`.
fn text_reply() -> String {
    json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 2, "model": "gpt-test",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "done"},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    })
    .to_string()
}

/// Through the OpenAI-compatible client on loopback, argument text nesting
/// the max + 1, 127, 128 and 129 levels is refused naming the depth, the
/// run completes, and the second request sends the model its call back as
/// the very text it wrote, answered by the refusal.
#[tokio::test]
async fn i11_5_through_the_openai_client_deep_argument_text_is_refused_and_sent_back_as_written() {
    for depth in [MAX_ARGUMENT_DEPTH + 1, 127, 128, 129] {
        let text = nested_text(depth);
        let (addr, server) = serve(vec![tool_call_reply(&text), text_reply()]);
        let config = OpenAiConfig::compatible(format!("http://{addr}/v1"), "gpt-test")
            .with_api_key("sk-test");
        let model = OpenAiModel::new(config).unwrap();
        let echo = Recorder::new("echo");
        let mut builder = AgentHarness::builder(std::sync::Arc::new(model));
        builder.register(echo.tool()).unwrap();
        let run = builder.build().unwrap().run("go").await.unwrap();
        let refusal = too_deep("echo", depth);
        assert_eq!(run.status, RunStatus::Completed, "depth {depth}");
        assert_eq!(run.final_text, "done");
        assert_eq!(answer(&run.messages, "p1"), Some((refusal.clone(), true)));
        assert!(echo.seen().is_empty());
        assert_transcript_paired(&run.messages);

        let bodies = server.join().unwrap();
        assert_eq!(bodies.len(), 2, "depth {depth}: two model calls");
        let second: Value = serde_json::from_str(&bodies[1]).unwrap();
        let messages = second["messages"].as_array().unwrap();
        let sent_call = messages
            .iter()
            .find_map(|m| m["tool_calls"].get(0))
            .expect("the assistant's call is sent back");
        assert_eq!(sent_call["function"]["arguments"], json!(text));
        let sent_answer = messages
            .iter()
            .find(|m| m["role"] == "tool")
            .expect("the call's answer is sent");
        assert_eq!(sent_answer["content"], json!(refusal));
    }
}
