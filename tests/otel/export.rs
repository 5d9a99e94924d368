//! The OTLP exporter itself: a bad endpoint is an error naming it, at
//! install; spans reach a real (loopback) OTLP/HTTP receiver as protobuf,
//! through `provider` + `layer` and through `install`, whose guard flushes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use tinyagents::otel::{Export, OtelError};

use super::*;

/// One request the receiver took.
#[derive(Debug)]
struct Received {
    request_line: String,
    content_type: String,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on loopback: answers every request 200 and
/// reports it. Its thread ends when the test process does.
fn receiver() -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || serve(stream, &tx));
        }
    });
    (url, rx)
}

/// Serves one connection's requests (keep-alive) until it closes.
fn serve(stream: std::net::TcpStream, tx: &mpsc::Sender<Received>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        writer
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            )
            .unwrap();
        let _ = tx.send(Received {
            request_line: request_line.trim_end().to_owned(),
            content_type,
            body,
        });
    }
}

fn assert_otlp(received: &Received) {
    assert_eq!(received.request_line, "POST /v1/traces HTTP/1.1");
    assert_eq!(received.content_type, "application/x-protobuf");
    assert!(!received.body.is_empty());
}

/// A one-turn agent, its spans exported.
async fn one_run() {
    Agent::builder("exported")
        .model(ScriptedModel::new([ChatResponse::text("hello")]))
        .build()
        .unwrap()
        .run("hi")
        .await
        .unwrap();
}

#[test]
fn a_bad_endpoint_is_an_error_naming_it_at_install() {
    let error = Export::http("not a url").install().unwrap_err();
    assert!(
        matches!(&error, OtelError::InvalidEndpoint { endpoint, .. } if endpoint == "not a url"),
        "{error:?}"
    );
    assert!(error.to_string().contains("'not a url'"), "{error}");
    let error = Export::http("file:///v1/traces").install().unwrap_err();
    assert!(
        matches!(error, OtelError::UnsupportedScheme { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn spans_reach_a_loopback_otlp_http_receiver_through_provider_and_layer() {
    let (url, received) = receiver();
    let provider = Export::http(&url)
        .service_name("otel-test")
        .provider()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(tinyagents::otel::layer(&provider));
    let default = tracing::subscriber::set_default(subscriber);
    one_run().await;
    drop(default);
    provider.shutdown().unwrap();
    let request = received.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_otlp(&request);
    // The service name and the span names travel in the protobuf body.
    let body = String::from_utf8_lossy(&request.body);
    assert!(body.contains("otel-test"), "service name");
    assert!(body.contains("invoke_agent exported"), "span name");
}

/// The only test that sets the global subscriber (nextest runs each test in
/// its own process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_exports_its_guard_flushes_and_a_second_install_is_an_error() {
    let (url, received) = receiver();
    let guard = Export::http(&url).install().unwrap();
    one_run().await;
    guard.shutdown().unwrap();
    let request = received.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_otlp(&request);
    assert!(
        String::from_utf8_lossy(&request.body).contains("tinyagents"),
        "default service name"
    );
    let again = Export::http(&url).install().unwrap_err();
    assert!(
        matches!(again, OtelError::SubscriberAlreadySet { .. }),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_export_builds_in_a_runtime_and_shuts_down_without_a_receiver() {
    // Nothing listens on the port: the export fails, the run does not.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let provider = Export::grpc(&url).provider().unwrap();
    let subscriber = tracing_subscriber::registry().with(tinyagents::otel::layer(&provider));
    let default = tracing::subscriber::set_default(subscriber);
    one_run().await;
    drop(default);
    let started = std::time::Instant::now();
    let _ = tokio::task::spawn_blocking(move || provider.shutdown())
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
}
