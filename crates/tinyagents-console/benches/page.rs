//! The page of a 2,000-call run: how long the console takes to answer
//! `GET /runs/{run}` (reading the record, the journal and the ledger rows,
//! folding the tree, rendering it) over loopback HTTP, and the same for
//! the live part alone (`/runs/{run}/tree`, what the page's script fetches
//! on each change). The run: 100 model turns of 20 calls each, every
//! fifth with a nested call, arguments and results captured, every call
//! with its ledger row.
//!
//! Then, when the browser peers are installed (`cargo xtask peers`:
//! Debian's Chromium, playwright-core in `.tools/browser`), the same page
//! loaded in headless Chromium: the median time to its load event.
//!
//! `cargo bench -p tinyagents-console` (or `cargo xtask bench`). Prints
//! plain lines: medians of 30 requests after 3 warm-ups, 10 loads after 2.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tinyagents_console::{Console, ConsoleOptions, ConsoleStores};
use tinyagents_core::{AgentEvent, CallId, RunId, RunStatus, ToolReplay, ToolResult, Usage};
use tinyagents_ledger::{EffectLedger, Outcome, SqliteLedger, StartedRow, Timestamp, args_hash};
use tinyagents_orchestrator::SqliteSessionStore;
use tinyagents_runs::{Ending, Hold, NewRun, RunStore, SqliteRunStore};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const TURNS: u32 = 100;
const CALLS_PER_TURN: u32 = 20;
const REPS: usize = 30;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    let runs = SqliteRunStore::open(dir.path().join("runs.db"))
        .await
        .unwrap();
    let ledger = Arc::new(
        SqliteLedger::open(dir.path().join("ledger.db"))
            .await
            .unwrap(),
    );
    let sessions = Arc::new(
        SqliteSessionStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    let run = big_run(&runs, ledger.as_ref()).await;
    let stores = ConsoleStores {
        runs: Arc::new(runs),
        ledger,
        sessions,
    };
    let options = ConsoleOptions {
        operator: "bench".into(),
        ..ConsoleOptions::default()
    };
    let console = Console::new(stores, options).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = console.clone();
    tokio::spawn(async move { serving.serve(listener, std::future::pending()).await });
    let bearer = format!("Bearer {}", console.token());
    for (what, path) in [
        ("run page", format!("/runs/{run}")),
        ("live tree", format!("/runs/{run}/tree")),
    ] {
        let mut times = Vec::new();
        let mut size = 0;
        for i in 0..REPS + 3 {
            let started = Instant::now();
            let body = get(addr, &path, &bearer).await;
            let took = started.elapsed();
            assert!(
                body.contains("data-calls=\"2400\""),
                "the page holds every call"
            );
            size = body.len();
            if i >= 3 {
                times.push(took);
            }
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "console {what:<9} 2,000 model-issued + 400 nested calls: median {:>7.1} ms over {REPS} requests (min {:.1}, max {:.1}); {} KiB; target < 1000 ms",
            ms(median),
            ms(times[0]),
            ms(times[times.len() - 1]),
            size / 1024
        );
    }
    browser_load(&console.url(addr), &format!("/runs/{run}")).await;
}

/// The page at `page` loaded in headless Chromium, when it is installed.
async fn browser_load(url: &str, page: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let modules = root.join(".tools/browser/node_modules");
    let chromium = std::env::var_os("TINYAGENTS_CHROMIUM")
        .map_or_else(|| std::path::PathBuf::from("/usr/bin/chromium"), Into::into);
    if !modules.join("playwright-core").is_dir() || !chromium.is_file() {
        println!("chromium: not measured (no browser peers; `cargo xtask peers` installs them)");
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/browser_load.mjs");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .env("CONSOLE_URL", url)
        .env("PAGE", page)
        .env("CHROMIUM", chromium)
        .env("PLAYWRIGHT_CORE", modules)
        .env("REPS", "10")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the browser load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!(
        "console run page  in {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A finished run of `TURNS` turns of `CALLS_PER_TURN` calls, journaled
/// and in the ledger; its id.
async fn big_run(runs: &SqliteRunStore, ledger: &dyn EffectLedger) -> RunId {
    let request = tinyagents_harness::RunRequest::new("pay everyone");
    let new = NewRun::new("payer", &request);
    let run = new.run_id.clone();
    let hold = Hold::this_process(Some("bench"), Duration::from_secs(600));
    let claim = runs.create(new, Some(&hold)).await.unwrap();
    ledger.begin_run(&run).await.unwrap();
    let mut at = Timestamp::now().as_millis();
    let mut events = vec![(
        Timestamp::from_millis(at),
        AgentEvent::RunStarted {
            run_id: run.clone(),
            agent_id: None,
        },
    )];
    let mut tick = |events: &mut Vec<(Timestamp, AgentEvent)>, event| {
        at += 1;
        events.push((Timestamp::from_millis(at), event));
    };
    for turn in 1..=TURNS {
        tick(&mut events, AgentEvent::ModelStarted { turn });
        tick(
            &mut events,
            AgentEvent::ModelCompleted {
                turn,
                usage: Usage::new(900, 80),
                duration_ms: 420,
                tool_calls: CALLS_PER_TURN,
                content: None,
                cost: None,
            },
        );
        for i in 1..=CALLS_PER_TURN {
            let id = format!("t{turn}c{i}");
            let args =
                json!({"to": format!("supplier-{turn}-{i}"), "amount": i * 10, "memo": "invoice"});
            let mut calls = vec![(CallId::new(id.clone()), None, "pay", args)];
            if i % 5 == 0 {
                let nested = CallId::new(format!("{id}/1"));
                calls.push((
                    nested,
                    Some(CallId::new(id.clone())),
                    "lookup",
                    json!({"q": id}),
                ));
            }
            for (call, parent, tool, args) in calls {
                tick(
                    &mut events,
                    AgentEvent::ToolStarted {
                        call_id: call.clone(),
                        parent_call_id: parent.clone(),
                        name: tool.into(),
                        arguments: Some(args.clone()),
                    },
                );
                let started = StartedRow::new(
                    run.clone(),
                    call.clone(),
                    tool,
                    args_hash(&args),
                    ToolReplay::Never,
                );
                ledger.record_started(started).await.unwrap();
                let result = ToolResult::text(format!("{tool} ok for {call}"));
                ledger
                    .record_settled(&run, &call, &Outcome::Completed(result))
                    .await
                    .unwrap();
                tick(
                    &mut events,
                    AgentEvent::ToolCompleted {
                        call_id: call,
                        parent_call_id: parent,
                        name: tool.into(),
                        duration_ms: 12,
                        is_error: false,
                        result: Some(format!("{tool} ok")),
                        metadata: None,
                    },
                );
            }
        }
    }
    tick(
        &mut events,
        AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            usage: Usage::default(),
            spent: tinyagents_core::Spent::default(),
        },
    );
    for batch in events.chunks(500) {
        assert!(runs.append_journal(&run, claim.epoch, batch).await.unwrap());
    }
    let ending = Ending::Ended {
        status: tinyagents_runs::RecordStatus::Completed,
        final_text: "paid".into(),
        usage: Usage::default(),
    };
    assert!(runs.end(&run, claim.epoch, &ending).await.unwrap());
    run
}

async fn get(addr: SocketAddr, path: &str, bearer: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {bearer}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(300)]
    );
    text
}
