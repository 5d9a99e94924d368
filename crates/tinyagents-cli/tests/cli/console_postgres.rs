//! Issue 30: the console over a PostgreSQL store, next to a worker
//! process: a queued run that waits for a person is decided from the
//! console (`--leave-to-workers`: the console runs nothing), the worker
//! resumes it each time, and the console's run page draws the whole run
//! from the journal the worker wrote.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use tinyagents::postgres::{PgDatabase, PostgresRunStore};
use tinyagents::runs::RunStore as _;

use crate::console_browser::Console;
use crate::postgres::{database, decided_until_completed, on, worker};
use crate::support::{Scratch, code, payments, payments_file, stderr};

/// One HTTP/1.1 exchange with the console at `url` (its printed address):
/// the status and the body.
fn exchange(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let (base, token) = url.split_once("/?token=").unwrap();
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_on_postgres_decides_what_a_worker_then_resumes() {
    let db = database().await;
    let scratch = Scratch::new();
    let file = payments_file(scratch.path(), 5);
    let queued = on(
        &scratch,
        &db.url,
        &[
            "queue",
            "enqueue",
            file.to_str().unwrap(),
            "acme",
            "--id",
            "run-c",
        ],
    );
    assert_eq!(code(&queued), 0, "{}", stderr(&queued));
    let console = Console::start_with(&scratch, &["--db", &db.url, "--leave-to-workers"]);
    let mut busy = worker(&scratch, &db.url, &file, "w1", 30);
    let store = PostgresRunStore::open(&PgDatabase::connect(&db.url).await.unwrap())
        .await
        .unwrap();
    let mut decided = Vec::new();
    decided_until_completed(&store, "run-c", async || {
        let (status, inbox) = exchange(&console.url, "GET", "/inbox", "");
        assert_eq!(status, 200, "{inbox}");
        let waiting = store.waiting(10).await.unwrap();
        let call = waiting[0].call_id.to_string();
        assert!(inbox.contains(&format!("data-call=\"{call}\"")), "{inbox}");
        let form = format!(
            "run=run-c&call%3A{}=approve&reason=checked",
            call.replace('/', "%2F")
        );
        let (status, answer) = exchange(&console.url, "POST", "/decide", &form);
        assert_eq!(status, 303, "{answer}");
        decided.push(call);
    })
    .await;
    assert_eq!(
        decided.len(),
        2,
        "two payments, each decided once from the console"
    );
    assert_eq!(payments(scratch.path()), ["acme", "acme-fee"]);
    let (status, page) = exchange(&console.url, "GET", "/runs/run-c", "");
    assert_eq!(status, 200);
    assert!(page.contains("id=\"run-status\">finished"), "{page}");
    for call in &decided {
        assert!(
            page.contains(&format!(r#"data-call="{call}" data-state="done""#)),
            "{call}: {page}"
        );
    }
    assert!(
        page.contains("segment 3 · resume"),
        "three segments, from the worker's journal: {page}"
    );
    assert_eq!(
        page.matches("<td>alice</td>").count(),
        2,
        "both decided by the console's operator (alice)"
    );
    assert!(
        !page.contains("resuming in process"),
        "the console ran nothing itself"
    );
    busy.kill();
}
