//! A small HTTP/1.1 server on 127.0.0.1, started by each test, that answers
//! each request with the next scripted reply and records what it was sent.
//!
//! Every reply closes its connection, so each attempt of a client is one
//! connection and one recorded request.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How a reply's body is sent.
#[derive(Debug)]
pub enum Body {
    /// With a `Content-Length`.
    Full(Vec<u8>),
    /// `Transfer-Encoding: chunked`, one HTTP chunk per piece.
    Chunked(Vec<Vec<u8>>),
    /// No length: the pieces, then the connection closes (a truncated stream
    /// when the pieces stop early).
    UntilClose(Vec<Vec<u8>>),
    /// No answer at all; the connection stays open until the client leaves.
    Hang,
}

/// One scripted reply.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Reply {
    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Body::Full(body.as_bytes().to_vec()),
        }
    }

    pub fn sse(pieces: &[&str]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Body::Chunked(pieces.iter().map(|p| p.as_bytes().to_vec()).collect()),
        }
    }

    /// An event stream whose connection closes after `pieces`.
    pub fn sse_until_close(pieces: &[&str]) -> Self {
        Self {
            body: Body::UntilClose(pieces.iter().map(|p| p.as_bytes().to_vec()).collect()),
            ..Self::sse(&[])
        }
    }

    pub fn hang() -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: Body::Hang,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the server was sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

#[derive(Debug, Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    received: Notify,
    disconnected: Notify,
}

#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            ..Shared::default()
        });
        let serving = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, Arc::clone(&serving)));
            }
        });
        Self { addr, shared, task }
    }

    /// The root URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits (at most 10 s) until a request has arrived.
    pub async fn received(&self) {
        let wait = self.shared.received.notified();
        if self.shared.requests.lock().unwrap().is_empty() {
            tokio::time::timeout(Duration::from_secs(10), wait)
                .await
                .expect("no request arrived");
        }
    }

    /// Waits (at most 10 s) until a client left a hanging connection.
    pub async fn client_left(&self) -> bool {
        tokio::time::timeout(Duration::from_secs(10), self.shared.disconnected.notified())
            .await
            .is_ok()
    }
}

async fn serve(mut socket: TcpStream, shared: Arc<Shared>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    shared.requests.lock().unwrap().push(request);
    shared.received.notify_one();
    let reply = shared.replies.lock().unwrap().pop_front();
    let reply =
        reply.unwrap_or_else(|| Reply::json(418, r#"{"error":{"message":"no reply scripted"}}"#));
    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let result = match reply.body {
        Body::Full(body) => {
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            write_all(&mut socket, &[head.as_bytes(), &body].concat()).await
        }
        Body::Chunked(pieces) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            let mut ok = write_all(&mut socket, head.as_bytes()).await;
            for piece in pieces {
                let chunk = [format!("{:x}\r\n", piece.len()).as_bytes(), &piece, b"\r\n"].concat();
                ok = ok && write_all(&mut socket, &chunk).await;
            }
            ok && write_all(&mut socket, b"0\r\n\r\n").await
        }
        Body::UntilClose(pieces) => {
            head.push_str("\r\n");
            let mut ok = write_all(&mut socket, head.as_bytes()).await;
            for piece in pieces {
                ok = ok && write_all(&mut socket, &piece).await;
            }
            ok
        }
        Body::Hang => {
            let mut buf = [0u8; 1024];
            while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
            shared.disconnected.notify_one();
            return;
        }
    };
    if result {
        let _ = socket.shutdown().await;
    }
}

async fn write_all(socket: &mut TcpStream, bytes: &[u8]) -> bool {
    socket.write_all(bytes).await.is_ok() && socket.flush().await.is_ok()
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}
