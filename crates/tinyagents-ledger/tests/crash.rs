//! Crash tests at the ledger level: a child process (this test binary,
//! re-executed with `CHILD_ENV` set) writes rows and is killed with SIGKILL;
//! the test reopens the file and checks what the guarantee promises.
//!
//! The child reports each acknowledged write as a line on its stdout, so the
//! parent knows exactly which rows were acknowledged when it killed it; the
//! points inside a commit are reached through a `CommitHook` that announces
//! itself and blocks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{
    CallStatus, CommitPoint, EffectLedger, Outcome, SqliteLedger, SqliteOptions, StartedRow,
    args_hash,
};

const CHILD_ENV: &str = "TINYAGENTS_LEDGER_CRASH_CHILD";
const DB_ENV: &str = "TINYAGENTS_LEDGER_CRASH_DB";
/// Only a guard against a hung child: the tests never rely on timing.
const GUARD: Duration = Duration::from_secs(120);

fn started(run: &str, call: &str) -> StartedRow {
    StartedRow::new(
        RunId::from(run),
        CallId::new(call),
        "transfer",
        args_hash(&json!({"call": call})),
        ToolReplay::Never,
    )
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// The child's side. Ignored in a normal run; the parents run it by name.
#[test]
#[ignore = "child process of the crash tests; run by them"]
fn crash_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let path = PathBuf::from(std::env::var(DB_ENV).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let armed = Arc::new(AtomicBool::new(false));
        let hook_armed = armed.clone();
        let hook_mode = mode.clone();
        let options = SqliteOptions::default().commit_hook(move |point| {
            if !hook_armed.load(Ordering::SeqCst) {
                return;
            }
            match (hook_mode.as_str(), point) {
                ("before-commit", CommitPoint::BeforeCommit { started: 1.. }) => {
                    say("PAUSED before commit");
                    park_forever();
                }
                ("after-commit", CommitPoint::AfterCommit { started: 1.. }) => {
                    say("PAUSED after commit");
                    park_forever();
                }
                _ => {}
            }
        });
        let ledger = Arc::new(SqliteLedger::open_with(&path, options).await.unwrap());
        match mode.as_str() {
            "stream" => {
                // 64 runs start calls concurrently, forever; each ack is told.
                for r in 0..64 {
                    let ledger = ledger.clone();
                    tokio::spawn(async move {
                        let run = format!("run-{r}");
                        for k in 1.. {
                            let call = format!("p{k}");
                            ledger.record_started(started(&run, &call)).await.unwrap();
                            say(&format!("ACK {run} {call}"));
                            if k % 2 == 0 {
                                let outcome =
                                    Outcome::Completed(ToolResult::text(format!("done {k}")));
                                ledger
                                    .record_settled(
                                        &RunId::from(run.as_str()),
                                        &CallId::new(&call),
                                        &outcome,
                                    )
                                    .await
                                    .unwrap();
                                say(&format!("SETTLED {run} {call}"));
                            }
                        }
                    });
                }
                park_forever();
            }
            _ => {
                ledger.record_started(started("run", "p0")).await.unwrap();
                let outcome = Outcome::Completed(ToolResult::text("paid"));
                ledger
                    .record_settled(&RunId::from("run"), &CallId::new("p0"), &outcome)
                    .await
                    .unwrap();
                // The settled row rides on the next commit; make it durable.
                ledger.flush().await.unwrap();
                say("ACK run p0");
                armed.store(true, Ordering::SeqCst);
                // Blocks inside the commit, in the hook, until killed.
                ledger.record_started(started("run", "p1")).await.unwrap();
                say("ACK run p1");
                park_forever();
            }
        }
    });
}

/// The child process, killed when dropped (so a failing test leaves no
/// process behind).
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the child in `mode` on `db`, with its stdout read line by line.
/// Only the child's own lines (from the first of `ACK`, `SETTLED`, `PAUSED`
/// on, as libtest may print before them on the same line) are passed on.
fn spawn_child(mode: &str, db: &Path) -> (ChildGuard, mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env(DB_ENV, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let start = ["ACK ", "SETTLED ", "PAUSED "]
                .iter()
                .filter_map(|marker| line.find(marker))
                .min();
            let Some(start) = start else { continue };
            if tx.send(line[start..].to_owned()).is_err() {
                break;
            }
        }
    });
    (ChildGuard(Some(child)), rx)
}

fn next_line(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(GUARD)
        .expect("the child stopped talking (or exited) before the expected point")
}

fn kill(mut guard: ChildGuard) {
    let mut child = guard.0.take().unwrap();
    child.kill().unwrap(); // SIGKILL on unix
    let status = child.wait().unwrap();
    assert!(!status.success());
}

fn reopen(db: &Path) -> (tokio::runtime::Runtime, SqliteLedger) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = SqliteOptions::default().create_if_missing(false);
    let ledger = runtime
        .block_on(SqliteLedger::open_with(db, options))
        .unwrap();
    (runtime, ledger)
}

/// Every started row the child had acknowledged when it was killed is in
/// the file, and every acknowledged settled row is settled.
#[test]
fn acknowledged_started_rows_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let (child, rx) = spawn_child("stream", &db);
    let mut acked = Vec::new();
    let mut settled = HashSet::new();
    while acked.len() < 2000 {
        let line = next_line(&rx);
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("ACK"), Some(run), Some(call)) => acked.push((run.to_owned(), call.to_owned())),
            (Some("SETTLED"), Some(run), Some(call)) => {
                settled.insert((run.to_owned(), call.to_owned()));
            }
            _ => {}
        }
    }
    kill(child);
    // Lines the child wrote before it died were acknowledged too.
    for line in rx.try_iter() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["SETTLED", run, call] = words[..] {
            settled.insert((run.to_owned(), call.to_owned()));
        }
    }
    // A settled row rides on the next commit: it is durable once a later
    // started row of the same run (sent after it) was acknowledged.
    let mut last_acked: HashMap<String, u64> = HashMap::new();
    for (run, call) in &acked {
        let k = call[1..].parse::<u64>().unwrap();
        let last = last_acked.entry(run.clone()).or_default();
        *last = (*last).max(k);
    }
    let (runtime, ledger) = reopen(&db);
    runtime.block_on(async {
        let mut durable_settles = 0;
        for (run, call) in &acked {
            let row = ledger
                .get(&RunId::from(run.as_str()), &CallId::new(call))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged started row {run}/{call} is missing"));
            assert_eq!(row.tool_name, "transfer");
            let k = call[1..].parse::<u64>().unwrap();
            if settled.contains(&(run.clone(), call.clone())) && k < last_acked[run] {
                assert_eq!(row.status, CallStatus::Completed, "{run}/{call}");
                durable_settles += 1;
            } else {
                // Settled or not, both are allowed: the settle may have been
                // lost with the process (the call is then in doubt).
                assert!(matches!(
                    row.status,
                    CallStatus::Started | CallStatus::Completed
                ));
            }
        }
        assert!(durable_settles > 0, "the test checked no settled row");
        // Every unsettled row is listed as in doubt for its run.
        let runs = ledger.unfinished_runs().await.unwrap();
        assert!(runs.len() >= last_acked.len());
        for run in runs {
            for row in ledger.unresolved(&run).await.unwrap() {
                assert!(row.is_in_doubt());
            }
        }
    });
}

/// Killed inside the commit, before it is durable: the row is not there and
/// its caller was never told it was; the rows before it are intact.
#[test]
fn a_started_row_killed_before_its_commit_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let (child, rx) = spawn_child("before-commit", &db);
    assert_eq!(next_line(&rx), "ACK run p0");
    assert_eq!(next_line(&rx), "PAUSED before commit");
    kill(child);
    let (runtime, ledger) = reopen(&db);
    runtime.block_on(async {
        let run = RunId::from("run");
        let p0 = ledger.get(&run, &CallId::new("p0")).await.unwrap().unwrap();
        assert_eq!(p0.status, CallStatus::Completed);
        assert!(
            ledger
                .get(&run, &CallId::new("p1"))
                .await
                .unwrap()
                .is_none()
        );
        assert!(ledger.unresolved(&run).await.unwrap().is_empty());
    });
}

/// Killed after the commit but before the caller was answered: the row is
/// there, in doubt, though its tool never ran: a started row means "may
/// have run", never "ran".
#[test]
fn a_started_row_killed_after_its_commit_is_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let (child, rx) = spawn_child("after-commit", &db);
    assert_eq!(next_line(&rx), "ACK run p0");
    assert_eq!(next_line(&rx), "PAUSED after commit");
    kill(child);
    let (runtime, ledger) = reopen(&db);
    runtime.block_on(async {
        let run = RunId::from("run");
        let doubt = ledger.unresolved(&run).await.unwrap();
        assert_eq!(doubt.len(), 1);
        assert_eq!(doubt[0].call_id, CallId::new("p1"));
        assert_eq!(doubt[0].replay, ToolReplay::Never);
        // Recovery must not start it again.
        let again = ledger.record_started(started("run", "p1")).await;
        assert!(again.is_err(), "a Never call in doubt restarted: {again:?}");
    });
}
