//! Issue 29: the command line on PostgreSQL. `run`, `approve`, `resume`
//! and `show` over `--db` (and `[store] url`); `queue` over the same run
//! store; `tinyagents worker FILE` processes that take an agents file's
//! runs, four at once with one killed; and the randomized kill campaign
//! on the approval path through workers.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyagents::postgres::{PgDatabase, PostgresRunStore};
use tinyagents::runs::{Decision, RecordStatus, RunQuery, RunStore as _};
use tinyagents_postgres::testing::TestCluster;

use crate::support::{
    BIN, Scratch, code, json_lines, payments, payments_file, result_of, run_id, stderr, stdout,
};

/// A database of a cluster of the test's own.
pub(crate) struct Db {
    _cluster: TestCluster,
    pub(crate) url: String,
}

pub(crate) async fn database() -> Db {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    Db {
        _cluster: cluster,
        url,
    }
}

/// The binary in `scratch` with `--db url` and `args`.
pub(crate) fn on(scratch: &Scratch, url: &str, args: &[&str]) -> std::process::Output {
    scratch
        .cmd()
        .env_remove("TINYAGENTS_STORE")
        .args(["--db", url])
        .args(args)
        .output()
        .unwrap()
}

/// Waits (two minutes at most) for `run` to complete, calling `decide`
/// each time it waits for a person; how many times it did. A failed run
/// fails the test.
pub(crate) async fn decided_until_completed(
    store: &PostgresRunStore,
    run: &str,
    mut decide: impl AsyncFnMut(),
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut decisions = 0;
    loop {
        let record = store.get(&run.into()).await.unwrap().unwrap();
        assert!(Instant::now() < deadline, "not finished: {record:?}");
        match record.status {
            RecordStatus::Completed => return decisions,
            RecordStatus::AwaitingApproval => {
                decide().await;
                decisions += 1;
            }
            RecordStatus::Failed => panic!("the run failed: {record:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A worker process, killed when dropped: a test that fails part way
/// leaves no worker behind (one whose database is gone would retry for
/// ever).
pub(crate) struct Reaped(Option<Child>);

impl Reaped {
    /// Kills it (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether it has exited.
    fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Waits for it to exit by itself; its JSON lines.
    fn lines(mut self) -> Vec<Value> {
        let Some(child) = self.0.take() else {
            return Vec::new();
        };
        let output = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `tinyagents worker` process over `url`, stopping once idle for
/// `idle_secs`.
pub(crate) fn worker(
    scratch: &Scratch,
    url: &str,
    file: &std::path::Path,
    name: &str,
    idle_secs: u32,
) -> Reaped {
    let child = scratch
        .std_command()
        .env_remove("TINYAGENTS_STORE")
        .args(["--json", "--db", url, "worker"])
        .arg(file)
        .args(["--concurrency", "4", "--lease-secs", "1", "--name", name])
        .args(["--exit-when-idle", &idle_secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Reaped(Some(child))
}

/// Issue 29: `--db` puts the ledger, sessions and run records in
/// PostgreSQL: a run waits, is approved and resumed in new processes, and
/// `runs` and `show` read it there; an agents file's `[store] url` does
/// the same without the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_runs_approves_and_resumes_on_postgres() {
    let db = database().await;
    let scratch = Scratch::new();
    let file = payments_file(scratch.path(), 5);
    let first = on(
        &scratch,
        &db.url,
        &["--json", "run", file.to_str().unwrap(), "acme"],
    );
    assert_eq!(code(&first), 3, "{}", stderr(&first));
    let run = run_id(&json_lines(&first));
    assert!(
        !scratch.store().join("runs.db").exists(),
        "nothing in a directory"
    );
    for _ in 0..2 {
        let approved = on(&scratch, &db.url, &["approve", &run, "--by", "ops"]);
        assert_eq!(code(&approved), 0, "{}", stderr(&approved));
        let resumed = on(&scratch, &db.url, &["--json", "resume", &run]);
        if code(&resumed) == 0 {
            assert_eq!(result_of(&json_lines(&resumed))["status"], "completed");
            break;
        }
        assert_eq!(code(&resumed), 3, "{}", stderr(&resumed));
    }
    assert_eq!(payments(scratch.path()), ["acme", "acme-fee"]);
    let listed = json_lines(&on(&scratch, &db.url, &["--json", "runs"]));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"], "completed");
    assert_eq!(listed[0]["calls"], 3);
    let shown = stdout(&on(&scratch, &db.url, &["show", &run]));
    assert!(shown.contains("p2 payments_pay approved by ops"), "{shown}");
    assert!(shown.contains("ledger: finished"), "{shown}");

    let text = std::fs::read_to_string(&file).unwrap();
    let with_url = scratch.path().join("with-url.toml");
    std::fs::write(
        &with_url,
        format!(
            "main = \"payer\"\n[store]\nurl = \"{}\"\n{}",
            db.url,
            text.replacen("main = \"payer\"\n", "", 1)
        ),
    )
    .unwrap();
    let second = scratch
        .cmd()
        .env_remove("TINYAGENTS_STORE")
        .env_remove("TINYAGENTS_DATABASE_URL")
        .args(["--json", "run", with_url.to_str().unwrap(), "beta"])
        .output()
        .unwrap();
    assert_eq!(code(&second), 3, "{}", stderr(&second));
    let listed = json_lines(&on(&scratch, &db.url, &["--json", "runs"]));
    assert_eq!(
        listed.len(),
        2,
        "the file's url is the same store: {listed:?}"
    );
}

/// Issue 29: `queue` over the run store: a run of an agents file queued,
/// listed with the counts per status, taken by a `tinyagents worker`
/// process, decided with `queue approve` (one call, then the other), and
/// finished by the worker; an unknown run is bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_is_taken_by_a_worker_decided_from_the_queue_and_finished() {
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
            "run-a",
        ],
    );
    assert_eq!(code(&queued), 0, "{}", stderr(&queued));
    assert_eq!(stdout(&queued), "run-a\n");
    let taken = on(
        &scratch,
        &db.url,
        &[
            "queue",
            "enqueue",
            file.to_str().unwrap(),
            "again",
            "--id",
            "run-a",
        ],
    );
    assert_eq!(code(&taken), 2);
    assert!(
        stderr(&taken).contains("run run-a is in the run store already"),
        "{}",
        stderr(&taken)
    );
    let listed = stdout(&on(&scratch, &db.url, &["queue", "list"]));
    assert!(
        listed.contains("run-a") && listed.contains("queued 1 · running 0"),
        "{listed}"
    );
    for args in [
        ["queue", "show", "run-nope"],
        ["queue", "approve", "run-nope"],
    ] {
        let output = on(&scratch, &db.url, &args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("no run 'run-nope'"),
            "{}",
            stderr(&output)
        );
    }

    let mut busy = worker(&scratch, &db.url, &file, "w1", 30);
    let store = PostgresRunStore::open(&PgDatabase::connect(&db.url).await.unwrap())
        .await
        .unwrap();
    let approvals = decided_until_completed(&store, "run-a", async || {
        let decided = on(
            &scratch,
            &db.url,
            &["queue", "approve", "run-a", "--by", "ops"],
        );
        assert_eq!(code(&decided), 0, "{}", stderr(&decided));
    })
    .await;
    assert_eq!(approvals, 2, "two payments, each decided once");
    assert_eq!(payments(scratch.path()), ["acme", "acme-fee"]);
    let shown = stdout(&on(&scratch, &db.url, &["queue", "show", "run-a"]));
    assert!(shown.contains("resume by w1"), "{shown}");
    busy.kill();
}

/// Issue 29: four `tinyagents worker` processes on one PostgreSQL run an
/// agents file's 24 queued runs, each waiting twice for a person (decided
/// as they wait); one worker is SIGKILLed part way. Every run completes
/// once, every payment is made once, no row is left started, and every
/// waiting call was decided once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_finish_every_run_once_when_one_is_killed() {
    const RUNS: usize = 24;
    let db = database().await;
    let scratch = Scratch::new();
    let file = payments_file(scratch.path(), 20);
    let pg = PgDatabase::connect(&db.url).await.unwrap();
    let store = PostgresRunStore::open(&pg).await.unwrap();
    for n in 0..RUNS {
        let queued = on(
            &scratch,
            &db.url,
            &["queue", "enqueue", file.to_str().unwrap(), &format!("r{n}")],
        );
        assert_eq!(code(&queued), 0, "{}", stderr(&queued));
    }
    let mut workers: Vec<Reaped> = (0..4)
        .map(|i| worker(&scratch, &db.url, &file, &format!("w{i}"), 4))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut killed = false;
    loop {
        let records = store.list(&RunQuery::default()).await.unwrap();
        let done = records
            .iter()
            .filter(|r| r.status == RecordStatus::Completed)
            .count();
        if !killed && done >= RUNS / 4 {
            workers[0].kill();
            killed = true;
        }
        if done == RUNS {
            break;
        }
        assert!(
            records.iter().all(|r| r.status != RecordStatus::Failed),
            "a run failed: {:?}",
            records.iter().find(|r| r.status == RecordStatus::Failed)
        );
        assert!(
            Instant::now() < deadline,
            "only {done} of {RUNS} runs completed"
        );
        for waiting in store.waiting(1_000).await.unwrap() {
            let _ = store
                .decide(
                    &waiting.run_id,
                    "decider",
                    &[Decision::approve(waiting.call_id.clone())],
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(killed);
    let reports: Vec<Vec<Value>> = workers.drain(1..).map(Reaped::lines).collect();
    for lines in &reports {
        assert!(
            lines.iter().any(|l| l["type"] == "worker"),
            "a worker reported: {lines:?}"
        );
    }
    let made = payments(scratch.path());
    let unique: BTreeSet<&String> = made.iter().collect();
    assert_eq!(made.len(), unique.len(), "no payment twice: {made:?}");
    assert!(made.len() <= 2 * RUNS);
    for record in store.list(&RunQuery::default()).await.unwrap() {
        let history = store.history(&record.run_id).await.unwrap();
        let ends = history
            .iter()
            .filter(|h| {
                matches!(
                    &h.event,
                    tinyagents::runs::RunEvent::Ended {
                        status: RecordStatus::Completed,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(ends, 1, "completed once: {history:?}");
        let calls = store.approvals(&record.run_id).await.unwrap();
        let mut suspensions: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for call in &calls {
            assert!(call.decision.is_some(), "{call:?}");
            suspensions
                .entry(call.call_id.to_string())
                .or_default()
                .insert(call.suspension);
        }
        assert!(suspensions.values().all(|s| s.len() == 1), "{calls:?}");
        let shown = json_lines(&on(
            &scratch,
            &db.url,
            &["--json", "show", record.run_id.as_str()],
        ));
        assert!(
            shown
                .iter()
                .filter(|l| l.get("depth").is_some())
                .all(|r| r["status"] != "started"),
            "a row left started: {shown:?}"
        );
    }
}

/// Issue 29: the randomized kill campaign through workers: one run per
/// trial, `tinyagents worker` processes killed at random moments while
/// the run goes through its approvals (decided with `queue approve`,
/// itself sometimes killed), new workers taking it over once the lease
/// runs out, until it completes. TINYAGENTS_WORKER_CRASH_TRIALS trials
/// (6 by default; `cargo xtask crash` runs more), seeded by
/// TINYAGENTS_CRASH_SEED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_worker_kills_on_the_approval_path_strand_no_run_and_repeat_nothing() {
    let (trials, base) = crate::support::campaign("TINYAGENTS_WORKER_CRASH_TRIALS", 6);
    eprintln!("crash campaign (workers): {trials} trials from seed {base}");
    let db = database().await;
    let pg = PgDatabase::connect(&db.url).await.unwrap();
    let store = PostgresRunStore::open(&pg).await.unwrap();
    for n in 0..trials {
        worker_trial(&db.url, &store, base.wrapping_add(n)).await;
    }
}

async fn worker_trial(url: &str, store: &PostgresRunStore, seed: u64) {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut below = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let scratch = Scratch::new();
    let delay = 20 + below(100);
    let file = payments_file(scratch.path(), u32::try_from(delay).unwrap());
    let run = format!("trial-{seed:x}");
    let queued = on(
        &scratch,
        url,
        &[
            "queue",
            "enqueue",
            file.to_str().unwrap(),
            &run,
            "--id",
            &run,
        ],
    );
    assert_eq!(code(&queued), 0, "seed {seed}: {}", stderr(&queued));
    let id = run.as_str().into();
    let mut alive: Option<Reaped> = None;
    let mut log: Vec<String> = Vec::new();
    let mut judged_epoch = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let record = store.get(&id).await.unwrap().unwrap();
        assert!(
            Instant::now() < deadline,
            "seed {seed}: the run was stranded ({:?}): {log:?}",
            record.status
        );
        match record.status {
            RecordStatus::Completed => break,
            RecordStatus::Failed => {
                panic!("seed {seed}: the run failed: {:?}: {log:?}", record.error)
            }
            RecordStatus::AwaitingApproval => {
                let mut decider = Command::new(BIN)
                    .current_dir(scratch.path())
                    .env_remove("TINYAGENTS_STORE")
                    .args(["--db", url, "queue", "approve", &run])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                if below(100) < 30 {
                    tokio::time::sleep(Duration::from_millis(below(60))).await;
                    let _ = decider.kill();
                    log.push("approve (killed)".into());
                } else {
                    log.push("approve".into());
                }
                let _ = decider.wait();
            }
            // Each claim of the run is judged once: half the time its
            // worker is killed somewhere in what the claim runs.
            RecordStatus::Running if record.epoch > judged_epoch => {
                judged_epoch = record.epoch;
                if below(100) < 50
                    && let Some(mut w) = alive.take()
                {
                    tokio::time::sleep(Duration::from_millis(below(3 * delay + 100))).await;
                    w.kill();
                    log.push(format!("worker killed in epoch {}", record.epoch));
                }
            }
            _ => {}
        }
        if alive.as_mut().is_none_or(Reaped::exited) {
            alive = Some(worker(
                &scratch,
                url,
                &file,
                &format!("w-{}", log.len()),
                30,
            ));
            log.push("worker".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(alive);
    let made = payments(scratch.path());
    let unique: BTreeSet<&String> = made.iter().collect();
    assert_eq!(
        made.len(),
        unique.len(),
        "seed {seed}: a payment twice: {made:?}: {log:?}"
    );
    let calls = store.approvals(&id).await.unwrap();
    let mut suspensions: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for call in &calls {
        assert!(call.decision.is_some(), "seed {seed}: {call:?}");
        suspensions
            .entry(call.call_id.to_string())
            .or_default()
            .insert(call.suspension);
    }
    assert_eq!(suspensions.len(), 2, "seed {seed}: {calls:?}");
    assert!(
        suspensions.values().all(|s| s.len() == 1),
        "seed {seed}: an approval asked twice: {calls:?}: {log:?}"
    );
    let shown = json_lines(&on(&scratch, url, &["--json", "show", &run]));
    assert!(
        shown
            .iter()
            .filter(|l| l.get("depth").is_some())
            .all(|r| r["status"] != "started"),
        "seed {seed}: a row left started: {shown:?}"
    );
}
