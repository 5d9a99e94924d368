//! `[telemetry]`: the run's spans exported by OTLP (HTTP/protobuf) to a
//! receiver on loopback.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::mpsc;

use crate::support::{Scratch, code, stderr};

/// One OTLP/HTTP request the receiver got: path, content type, body.
struct Received {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// A receiver answering every request with 200, sending what it got.
fn receiver() -> (u16, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (send, got) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let (mut length, mut content_type) = (0, String::new());
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap_or((header, ""));
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "content-type" => value.trim().clone_into(&mut content_type),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            );
            let _ = send.send(Received {
                path,
                content_type,
                body,
            });
        }
    });
    (port, got)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Issue 16: an agents file's `[telemetry]` exports the run's spans: the
/// receiver gets OTLP/protobuf on `/v1/traces` with the GenAI span names of
/// the main agent, its calls and the delegated agent, flushed before the
/// process exits.
#[test]
fn a_run_exports_its_spans_to_the_files_otlp_endpoint() {
    let (port, got) = receiver();
    let scratch = Scratch::new();
    let file = scratch.file(
        "traced.toml",
        &format!(
            r#"
[telemetry]
otlp_endpoint = "http://127.0.0.1:{port}/v1/traces"
service_name = "cli-test"

[mcp.everything]
command = "node"
args = ["EVERYTHING"]

[agents.lead]
model = "scripted"
agents = ["counter"]
script = [
    {{ tool = "counter", arguments = {{ query = "count" }}, usage = {{ input = 7, output = 3 }} }},
    {{ text = "Counted." }},
]

[agents.counter]
model = "scripted"
tools = ["everything_get-sum"]
script = [
    {{ tool = "everything_get-sum", arguments = {{ a = 1, b = 2 }} }},
    {{ text = "3" }},
]
"#
        ),
    );
    let output = scratch.run(&["--json", "run", file.to_str().unwrap(), "count"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let mut body = Vec::new();
    let mut requests = 0;
    while let Ok(request) = got.recv_timeout(std::time::Duration::from_secs(5)) {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.content_type, "application/x-protobuf");
        body.extend(request.body);
        requests += 1;
    }
    assert!(requests > 0, "no export reached the receiver");
    for name in [
        "cli-test",
        "invoke_agent lead",
        "chat scripted",
        "execute_tool counter",
        "invoke_agent counter",
        "execute_tool everything_get-sum",
        "gen_ai.usage.input_tokens",
    ] {
        assert!(contains(&body, name), "{name:?} not exported");
    }
    // Capture is off: the arguments never left the process.
    assert!(!contains(&body, "\"query\""), "a payload was exported");
}

/// Issue 16: a `[telemetry]` endpoint the exporter cannot use is an error
/// at its key, before the run starts.
#[test]
fn a_bad_endpoint_is_an_error_at_its_key() {
    let scratch = Scratch::new();
    let file = scratch.file(
        "bad.toml",
        "[telemetry]\notlp_endpoint = \"http://\"\n[agents.a]\nmodel = \"scripted\"\nscript = [{ text = \"x\" }]\n",
    );
    let output = scratch.run(&["run", file.to_str().unwrap(), "hi"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("bad.toml:2:17: telemetry.otlp_endpoint: "),
        "{}",
        stderr(&output)
    );
}
