//! The fleet: 256 runs, four worker processes, a kill and a zombie.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tinyagents::ledger::EffectLedger;
use tinyagents::orchestrator::CHILD_RUN_SEPARATOR;
use tinyagents::postgres::testing::TestCluster;
use tinyagents::postgres::{PgDatabase, PostgresLedger, PostgresRunStore, WorkerReport};
use tinyagents::prelude::*;
use tinyagents::runs::{NewRun, RecordStatus, RunQuery, RunStore as _};

use super::agent::{EFFECTS_DDL, PAYMENTS_PER_RUN};
use super::{DB_ENV, LEASE, NAME_ENV};

const RUNS: usize = 256;

fn spawn_worker(url: &str, name: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "worker_process", "--nocapture"])
        .env(DB_ENV, url)
        .env(NAME_ENV, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("a worker process")
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {}", child.id());
}

async fn completed(store: &PostgresRunStore) -> u64 {
    store
        .counts()
        .await
        .unwrap()
        .iter()
        .find(|(status, _)| *status == RecordStatus::Completed)
        .map_or(0, |(_, n)| *n)
}

async fn wait_for_completed(store: &PostgresRunStore, at_least: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while completed(store).await < at_least {
        // Ended otherwise than completed: failed, or (what the queue
        // recorded as failed) cancelled or stopped at a limit.
        let query = RunQuery {
            statuses: RecordStatus::ALL
                .into_iter()
                .filter(|s| s.has_ended() && *s != RecordStatus::Completed)
                .collect(),
            ..RunQuery::default()
        };
        let failed = store.list(&query).await.unwrap();
        assert!(failed.is_empty(), "runs failed: {failed:?}");
        assert!(
            Instant::now() < deadline,
            "fewer than {at_least} runs completed within {within:?}: {:?}",
            store.counts().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The report a worker process printed as it stopped.
fn report_of(child: Child) -> WorkerReport {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "a worker failed: {:?}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("{\"report\"") || l.contains("\"report\""))
        .unwrap_or_else(|| panic!("no report in the worker's output: {stdout}"));
    let value: serde_json::Value = serde_json::from_str(line).unwrap();
    serde_json::from_value(value["report"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_survive_a_kill_and_a_zombie() {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let db = PgDatabase::connect(&url).await.unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    let ledger = PostgresLedger::open(&db).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(EFFECTS_DDL).await.unwrap();
    for i in 0..RUNS {
        let request = RunRequest::new(format!("customer {i}"))
            .with_run_id(RunId::from(format!("fleet-{i:03}")));
        store
            .create(NewRun::new("coordinator", &request), None)
            .await
            .unwrap();
    }

    let mut workers: Vec<Child> = (0..4)
        .map(|i| spawn_worker(&url, &format!("w{i}")))
        .collect();
    // Kill w0 once the fleet is busy: its runs are mid-call.
    wait_for_completed(&store, 24, Duration::from_secs(120)).await;
    let killed = workers.remove(0);
    signal(&killed, "KILL");
    drop(killed.wait_with_output());
    // Stop w1 past its lease and its transactions' timeout, then wake it.
    wait_for_completed(&store, 64, Duration::from_secs(120)).await;
    let zombie = workers.remove(0);
    signal(&zombie, "STOP");
    tokio::time::sleep(LEASE * 4).await;
    signal(&zombie, "CONT");

    wait_for_completed(&store, RUNS as u64, Duration::from_secs(240)).await;
    let zombie_report = report_of(zombie);
    let reports: Vec<WorkerReport> = workers.into_iter().map(report_of).collect();

    // Every run completed, once: the store holds each as completed with
    // the coordinator's answer, and no worker's end of it was counted
    // twice (the killed worker's completions are those not counted here).
    let runs = store.list(&RunQuery::default().limit(1_000)).await.unwrap();
    assert_eq!(runs.len(), RUNS);
    for run in &runs {
        assert_eq!(run.status, RecordStatus::Completed, "{run:?}");
        assert_eq!(run.final_text.as_deref(), Some("done"), "{run:?}");
    }
    let counted: u64 = reports
        .iter()
        .chain([&zombie_report])
        .map(|r| r.completed)
        .sum();
    assert!(
        counted <= RUNS as u64,
        "completions counted {counted} > {RUNS}"
    );

    // The zombie's runs went to others: its ends were refused (lost), and
    // the others recovered runs (the killed worker's and the zombie's).
    assert!(
        zombie_report.lost >= 1,
        "the zombie lost no run: {zombie_report:?}"
    );
    println!("zombie: {zombie_report:?}; others: {reports:?}");
    let recovered: u64 = reports.iter().map(|r| r.recovered).sum();
    assert!(recovered >= 2, "runs recovered by the others: {recovered}");

    // No payment happened twice.
    let twice = client
        .query(
            "SELECT key, count(*) FROM fleet_effects WHERE kind = 'pay' \
             GROUP BY key HAVING count(*) > 1",
            &[],
        )
        .await
        .unwrap();
    assert!(twice.is_empty(), "payments made twice: {:?}", twice.len());
    assert_every_effect_has_its_row(&client, &ledger).await;

    // Each run paid four times, except for payments whose effect is
    // unknown: those are under calls listed in doubt (a `pay`, a `batch`
    // whose two nested payments may not all have happened, a delegation to
    // the clerk whose payment may not have), under the run
    // or its delegated run, and only runs that were recovered have any.
    let in_doubt = ledger.in_doubt().await.unwrap();
    let mut doubted: HashMap<String, i64> = HashMap::new();
    for call in &in_doubt {
        let payments = match call.row.tool_name.as_str() {
            "pay" => 1,
            "batch" => 2,
            // The delegated clerk pays once.
            "clerk" => 1,
            other => panic!("a call of `{other}` in doubt: only tools that never repeat are"),
        };
        let run = call.idempotency_key.run_id.as_str();
        let top = run
            .split(CHILD_RUN_SEPARATOR)
            .next()
            .unwrap_or(run)
            .to_owned();
        *doubted.entry(top).or_default() += payments;
    }
    let paid = client
        .query(
            "SELECT split_part(run_id, $1, 1), count(*) FROM fleet_effects \
             WHERE kind = 'pay' GROUP BY 1",
            &[&CHILD_RUN_SEPARATOR],
        )
        .await
        .unwrap();
    let paid: HashMap<String, i64> = paid.iter().map(|r| (r.get(0), r.get(1))).collect();
    for run in &runs {
        let id = run.run_id.as_str();
        let made = paid.get(id).copied().unwrap_or(0);
        let unknown = doubted.get(id).copied().unwrap_or(0);
        assert!(
            made <= PAYMENTS_PER_RUN && made + unknown >= PAYMENTS_PER_RUN,
            "run {id}: {made} payments made, {unknown} in doubt"
        );
        if unknown > 0 {
            // Every claim raises the epoch: a recovered run has two at least.
            assert!(
                run.epoch >= 2,
                "run {id} has calls in doubt but was never recovered"
            );
        }
    }
    ledger.shutdown().await.unwrap();
}

/// No row lost: every effect a tool made has its call's started row in the
/// ledger (written before the tool ran), completed or still in doubt.
pub(crate) async fn assert_every_effect_has_its_row(
    client: &tokio_postgres::Client,
    ledger: &PostgresLedger,
) {
    let effects = client
        .query("SELECT run_id, call_id, kind FROM fleet_effects", &[])
        .await
        .unwrap();
    assert!(!effects.is_empty(), "no effect at all");
    for effect in &effects {
        let (run, call): (String, String) = (effect.get(0), effect.get(1));
        let row = ledger
            .get(&RunId::from(run.clone()), &CallId::new(call.clone()))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("an effect of {run}/{call} without its ledger row"));
        assert_ne!(
            row.status,
            tinyagents::ledger::CallStatus::Deferred,
            "{run}/{call} acted but is recorded as not having acted"
        );
    }
}
