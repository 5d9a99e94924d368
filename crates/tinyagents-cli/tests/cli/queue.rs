//! `tinyagents queue` over a throwaway PostgreSQL: runs queued and listed
//! from the command line, and a run that a worker (in this test process)
//! left awaiting approval shown, decided from the command line, and
//! resumed by the next worker.

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::core::CancellationToken;
use tinyagents::postgres::{
    FactoryError, LeasedRun, PgDatabase, QueueStatus, RunQueue, Worker, WorkerReport,
};
use tinyagents::prelude::*;
use tinyagents_postgres::testing::TestCluster;

use crate::support::{BIN, code, json_lines, stderr, stdout};

/// A database of a cluster of this test's own, and its queue.
struct Db {
    _cluster: TestCluster,
    url: String,
    db: PgDatabase,
    queue: RunQueue,
}

async fn setup() -> Db {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect(&url).await.unwrap();
    let queue = RunQueue::open(&db).await.unwrap();
    Db {
        _cluster: cluster,
        url,
        db,
        queue,
    }
}

/// The binary with `args`, the database given by `--db` (or by nothing:
/// `TINYAGENTS_DATABASE_URL` is cleared either way).
fn queue_cmd(url: Option<&str>, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = assert_cmd::Command::new(BIN);
    cmd.current_dir(dir.path())
        .env_remove("TINYAGENTS_DATABASE_URL")
        .env_remove("TINYAGENTS_STORE")
        .timeout(Duration::from_secs(60));
    // `--json` is the command line's, `--db` the queue's: both before the
    // subcommand's own arguments.
    let (json, rest) = match args.first() {
        Some(&"--json") => (true, &args[1..]),
        _ => (false, args),
    };
    if json {
        cmd.arg("--json");
    }
    cmd.arg("queue");
    if let Some(url) = url {
        cmd.args(["--db", url]);
    }
    cmd.args(rest).output().unwrap()
}

#[json_schema]
struct Cents {
    cents: u64,
}

/// Calls `refund` twice in one turn, then answers with what the calls
/// said (a denied call's answer is the denial).
fn refund_twice() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        let answers: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        Ok(if answers.is_empty() {
            ScriptedModel::tool_calls([
                ("refund", json!({ "cents": 100 })),
                ("refund", json!({ "cents": 250 })),
            ])
        } else {
            ChatResponse::text(format!("done: {}", answers.join(" | ")))
        })
    })
}

/// A worker whose agent's `refund` needs a person's approval and counts
/// its runs in `refunds`.
fn worker(db: &PgDatabase, name: &str, refunds: &Arc<AtomicUsize>) -> Worker {
    let refunds = Arc::clone(refunds);
    let factory = move |run: &LeasedRun| -> Result<AgentHarness, FactoryError> {
        let refunds = Arc::clone(&refunds);
        let refund = FnTool::new("refund", "Refunds.", move |args: Cents| {
            let refunds = Arc::clone(&refunds);
            async move {
                refunds.fetch_add(1, Ordering::SeqCst);
                anyhow::Ok(format!("refunded {}", args.cents))
            }
        })
        .map_spec(|spec| spec.replay(ToolReplay::Never).approval_required());
        let mut builder = AgentHarness::builder(refund_twice()).ledger(Arc::clone(&run.ledger));
        builder.register(Arc::new(refund))?;
        Ok(builder.build()?)
    };
    Worker::new(db, factory)
        .id(name)
        .poll_interval(Duration::from_millis(20))
}

async fn status(queue: &RunQueue, run: &RunId) -> QueueStatus {
    queue.get(run).await.unwrap().unwrap().status
}

/// Runs `worker` until `run` is in `until` (checked every 50 ms, 60 s at
/// most), then stops it.
async fn run_until(
    queue: &RunQueue,
    worker: Worker,
    run: &RunId,
    until: QueueStatus,
) -> WorkerReport {
    let cancel = CancellationToken::new();
    let task = tokio::spawn(worker.run(cancel.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while status(queue, run).await != until {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker did not get the run {until} in 60 s: {:?}",
            queue.list(10).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cancel.cancel();
    task.await.unwrap().unwrap()
}

/// A run enqueued and left awaiting approval by a first worker, which
/// refunded nothing.
async fn awaiting(db: &Db, refunds: &Arc<AtomicUsize>) -> RunId {
    let run = db
        .queue
        .enqueue(&RunRequest::new("refund c-42"))
        .await
        .unwrap();
    let report = run_until(
        &db.queue,
        worker(&db.db, "first", refunds),
        &run,
        QueueStatus::AwaitingApproval,
    )
    .await;
    assert_eq!(report.awaiting_approval, 1, "{report:?}");
    assert_eq!(refunds.load(Ordering::SeqCst), 0);
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueued_runs_are_listed_queued_with_the_counts_per_status() {
    let db = setup().await;
    let named = queue_cmd(Some(&db.url), &["enqueue", "refund c-1", "--id", "run-a"]);
    assert_eq!(code(&named), 0, "{}", stderr(&named));
    assert_eq!(stdout(&named), "run-a\n");
    // The database from the environment this time.
    let mut cmd = assert_cmd::Command::new(BIN);
    let fresh = cmd
        .env("TINYAGENTS_DATABASE_URL", &db.url)
        .args(["queue", "enqueue", "refund c-2"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(code(&fresh), 0, "{}", stderr(&fresh));
    let fresh_id = stdout(&fresh).trim().to_owned();
    assert!(fresh_id.starts_with("run-"), "{fresh_id}");
    assert_eq!(
        status(&db.queue, &RunId::new(&fresh_id)).await,
        QueueStatus::Queued
    );
    let taken = queue_cmd(Some(&db.url), &["enqueue", "again", "--id", "run-a"]);
    assert_eq!(code(&taken), 2);
    assert!(
        stderr(&taken).contains("run run-a is in the queue already"),
        "{}",
        stderr(&taken)
    );

    let listed = queue_cmd(Some(&db.url), &["list"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let text = stdout(&listed);
    let line = text
        .lines()
        .find(|l| l.starts_with("run-a "))
        .unwrap_or_else(|| panic!("no line of run-a in:\n{text}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields, ["run-a", "queued", "-", "0", "0"], "{text}");
    assert!(text.contains(&fresh_id), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "queued 2 · running 0 · awaiting_approval 0 · completed 0 · failed 0"),
        "{text}"
    );

    let lines = json_lines(&queue_cmd(Some(&db.url), &["--json", "list"]));
    assert_eq!(lines.len(), 3, "two runs and the counts: {lines:?}");
    assert_eq!(lines[0]["type"], "run");
    assert_eq!(lines[0]["run_id"], "run-a");
    assert_eq!(lines[0]["status"], "queued");
    assert_eq!(lines[0]["owner"], Value::Null);
    assert_eq!(lines[1]["run_id"], fresh_id.as_str());
    assert_eq!(lines[2]["type"], "counts");
    assert_eq!(
        (lines[2]["queued"].as_u64(), lines[2]["failed"].as_u64()),
        (Some(2), Some(0))
    );

    let first = stdout(&queue_cmd(Some(&db.url), &["list", "--limit", "1"]));
    assert!(!first.contains(&fresh_id), "{first}");
    assert!(first.contains("the oldest 1 of 2 runs"), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_and_approve_of_an_unknown_run_exit_2_naming_it() {
    let db = setup().await;
    for args in [["show", "run-nope"], ["approve", "run-nope"]] {
        let output = queue_cmd(Some(&db.url), &args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("run run-nope is not in the queue"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stdout(&output).is_empty(), "{}", stdout(&output));
    }
}

/// The queue takes every waiting call's decision at once: `--call` must
/// name them all. Once approved the run is queued again, a second
/// approval is refused, and the next worker runs both refunds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_awaiting_approval_is_shown_and_approved_then_a_worker_resumes_it() {
    let db = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = awaiting(&db, &refunds).await;
    let url = Some(db.url.as_str());

    let shown = queue_cmd(url, &["show", run.as_str()]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(
        text.contains(&format!("run {run} · awaiting_approval · owner -")),
        "{text}"
    );
    assert!(text.contains("waits for a decision on 2 call(s)"), "{text}");
    assert!(text.contains("⏸ p1 refund: "), "{text}");
    assert!(text.contains("⏸ p2 refund: "), "{text}");
    assert!(!text.contains("cents"), "no arguments shown: {text}");
    let lines = json_lines(&queue_cmd(url, &["--json", "show", run.as_str()]));
    let calls: Vec<&Value> = lines[0]["pending"].as_array().unwrap().iter().collect();
    assert_eq!(calls.len(), 2, "{lines:?}");
    assert_eq!(
        (&calls[0]["call_id"], &calls[0]["tool"]),
        (&json!("p1"), &json!("refund"))
    );
    assert!(calls[0]["reason"].as_str().is_some_and(|r| !r.is_empty()));
    let listed = stdout(&queue_cmd(url, &["list"]));
    assert!(listed.contains("waits on 2 call(s)"), "{listed}");

    let partial = queue_cmd(url, &["approve", run.as_str(), "--call", "p1"]);
    assert_eq!(code(&partial), 2, "{}", stderr(&partial));
    assert!(
        stderr(&partial).contains("also waits on p2 (refund)")
            && stderr(&partial).contains("nothing was recorded"),
        "{}",
        stderr(&partial)
    );
    let stranger = queue_cmd(url, &["approve", run.as_str(), "--call", "p9"]);
    assert_eq!(code(&stranger), 2, "{}", stderr(&stranger));
    assert!(
        stderr(&stranger).contains("call 'p9' of run '")
            && stderr(&stranger).contains("waiting: p1 (refund), p2 (refund)"),
        "{}",
        stderr(&stranger)
    );
    assert_eq!(
        status(&db.queue, &run).await,
        QueueStatus::AwaitingApproval,
        "the refused commands changed nothing"
    );

    let approved = queue_cmd(
        url,
        &["approve", run.as_str(), "--call", "p1", "--call", "p2"],
    );
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    let text = stdout(&approved);
    assert!(
        text.contains("approved p1 refund") && text.contains("approved p2 refund"),
        "{text}"
    );
    assert!(text.contains("is queued again"), "{text}");
    assert_eq!(status(&db.queue, &run).await, QueueStatus::Queued);
    let again = queue_cmd(url, &["approve", run.as_str()]);
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains(&format!("run {run} is queued, not awaiting approval")),
        "{}",
        stderr(&again)
    );

    run_until(
        &db.queue,
        worker(&db.db, "second", &refunds),
        &run,
        QueueStatus::Completed,
    )
    .await;
    assert_eq!(
        refunds.load(Ordering::SeqCst),
        2,
        "both approved refunds ran once"
    );
    let shown = stdout(&queue_cmd(url, &["show", run.as_str()]));
    assert!(
        shown.contains("answer: done: refunded 100 | refunded 250"),
        "{shown}"
    );
}

/// `--deny --reason` decides every waiting call: the run is queued again,
/// the next worker runs no refund, and the model reads the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_run_is_queued_again_and_its_model_reads_the_reason() {
    let db = setup().await;
    let refunds = Arc::new(AtomicUsize::new(0));
    let run = awaiting(&db, &refunds).await;
    let url = Some(db.url.as_str());

    let denied = queue_cmd(
        url,
        &[
            "--json",
            "approve",
            run.as_str(),
            "--deny",
            "--reason",
            "not during the freeze",
        ],
    );
    assert_eq!(code(&denied), 0, "{}", stderr(&denied));
    let decisions = json_lines(&denied);
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    for decision in &decisions {
        assert_eq!(decision["type"], "decision");
        assert_eq!(decision["approved"], false);
        assert_eq!(decision["reason"], "not during the freeze");
    }
    assert_eq!(status(&db.queue, &run).await, QueueStatus::Queued);
    let again = queue_cmd(url, &["approve", run.as_str(), "--deny"]);
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("not awaiting approval"),
        "{}",
        stderr(&again)
    );

    run_until(
        &db.queue,
        worker(&db.db, "second", &refunds),
        &run,
        QueueStatus::Completed,
    )
    .await;
    assert_eq!(refunds.load(Ordering::SeqCst), 0, "no denied refund ran");
    let done = db.queue.get(&run).await.unwrap().unwrap();
    let answer = done.outcome.unwrap().final_text;
    assert_eq!(
        answer.matches("not during the freeze").count(),
        2,
        "{answer}"
    );
}

#[test]
fn a_missing_database_is_a_usage_error_naming_the_flag_and_the_variable() {
    for args in [&["list"][..], &["enqueue", "hello"], &["approve", "run-a"]] {
        let output = queue_cmd(None, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        let said = stderr(&output);
        assert!(
            said.contains("--db") && said.contains("TINYAGENTS_DATABASE_URL"),
            "{args:?}: {said}"
        );
    }
}
