//! Issue 30: the console over PostgreSQL stores (run store, ledger,
//! sessions): a run that waits is in the inbox, decided from the console
//! with who and why, and, no host here, queued for a worker; its journal
//! and tree read from PostgreSQL.

use std::sync::Arc;

use tinyagents::console::{Console, ConsoleOptions, ConsoleStores};
use tinyagents::postgres::testing::TestCluster;
use tinyagents::postgres::{PgDatabase, PostgresLedger, PostgresRunStore, PostgresSessionStore};
use tinyagents::prelude::*;
use tinyagents::runs::{
    Ending, Journal, NewRun, RecordStatus, RunStore as _, SharedRunStore, drive_journaled,
};

use crate::fixture::{Payments, harness, hold, payment, serve};
use crate::http::{form, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_and_decides_runs_kept_in_postgresql() {
    let cluster = TestCluster::start().unwrap();
    let db = PgDatabase::connect(&cluster.database().await.unwrap())
        .await
        .unwrap();
    let runs = PostgresRunStore::open(&db).await.unwrap();
    let ledger = Arc::new(PostgresLedger::open(&db).await.unwrap());
    let sessions = Arc::new(PostgresSessionStore::open(&db).await.unwrap());
    let payments = Payments::default();
    let harness = harness(
        Arc::clone(&ledger) as _,
        true,
        &[payment("acme", 12)],
        &payments,
    );
    let request = RunRequest::new("pay acme");
    let run = NewRun::new("payer", &request);
    let id = run.run_id.clone();
    let claim = runs.create(run, Some(&hold())).await.unwrap();
    let shared: SharedRunStore = Arc::new(runs.clone());
    let mut journal = Journal::new(Arc::clone(&shared), id.clone(), claim.epoch);
    let mut handle = harness.start(request.with_run_id(id.clone()));
    let done = drive_journaled(&mut handle, &mut journal, |e| panic!("{e}"))
        .await
        .unwrap();
    assert!(
        runs.end(&id, claim.epoch, &Ending::of(&done))
            .await
            .unwrap()
    );

    let stores = ConsoleStores {
        runs: shared,
        ledger,
        sessions,
    };
    let options = ConsoleOptions {
        operator: "carol".into(),
        ..ConsoleOptions::default()
    };
    let console = Console::new(stores, options).unwrap();
    let (addr, _stop) = serve(&console).await;
    let bearer = format!("Bearer {}", console.token());
    let inbox = send(addr, "GET", "/inbox", &[("Authorization", &bearer)], "").await;
    assert_eq!(inbox.status, 200, "{}", inbox.body);
    assert!(inbox.body.contains(&format!("data-run=\"{id}\"")) && inbox.body.contains("acme"));
    let page = send(
        addr,
        "GET",
        &format!("/runs/{id}"),
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert!(
        page.body.contains(r#"data-call="p1" data-state="waiting""#),
        "{}",
        page.body
    );
    let fields = form(&[
        ("run", id.as_str()),
        ("call:p1", "approve"),
        ("reason", "invoice 7"),
    ]);
    let decided = send(
        addr,
        "POST",
        "/decide",
        &[("Authorization", &bearer)],
        &fields,
    )
    .await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    let record = runs.get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Queued, "left for a worker");
    let calls = runs.approvals(&id).await.unwrap();
    let decision = calls[0].decision.as_ref().unwrap();
    assert_eq!(
        (decision.by.as_str(), decision.reason.as_deref()),
        ("carol", Some("invoice 7"))
    );
    let listed = send(addr, "GET", "/", &[("Authorization", &bearer)], "").await;
    assert!(
        listed.body.contains("decided, to resume"),
        "{}",
        listed.body
    );
}
