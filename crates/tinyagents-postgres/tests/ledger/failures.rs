//! What opening refuses (a newer schema, an unreachable server, a database
//! that is gone), and what a write meets on a read-only server, under a
//! statement timeout and across a server restart: a clear error each
//! time, and nothing committed lost.

use std::net::TcpListener;
use std::time::Duration;

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{CallStatus, EffectLedger, LedgerError, Outcome};
use tinyagents_postgres::{
    LEDGER_SCHEMA_VERSION, PgDatabase, PgError, PostgresLedger, PostgresLedgerOptions,
};

use crate::common::{Fresh, started, stored_rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_ledger_schema_is_refused_at_open() {
    let fresh = Fresh::start().await;
    let database = fresh.database().await;
    PostgresLedger::open(&database)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    fresh
        .raw()
        .await
        .execute(
            "UPDATE tinyagents_schema SET version = 99 WHERE component = 'ledger'",
            &[],
        )
        .await
        .unwrap();
    match PostgresLedger::open(&database).await {
        Err(LedgerError::UnsupportedVersion {
            path,
            found,
            supported,
        }) => {
            assert_eq!((found, supported), (99, LEDGER_SCHEMA_VERSION));
            let path = path.display().to_string();
            assert!(
                path.contains(database.target()) && path.contains("ledger"),
                "names the database and the component: {path}"
            );
        }
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_clear_error_at_connect() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("host=127.0.0.1 port={port} user=tinyagents dbname=nowhere");
    match PgDatabase::connect(&url).await {
        Err(err @ PgError::Unreachable { .. }) => {
            let text = err.to_string();
            assert!(
                text.contains(&format!("127.0.0.1:{port}/nowhere")) && text.contains("unreachable"),
                "names the server and says it is unreachable: {text}"
            );
        }
        other => panic!("an unreachable server must be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_gone_is_a_clear_error_at_open() {
    let fresh = Fresh::start().await;
    let database = fresh.database().await;
    let name: String = fresh
        .raw()
        .await
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    let (admin, connection) =
        tokio_postgres::connect(&fresh.cluster.admin_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
    match PostgresLedger::open(&database).await {
        Err(LedgerError::Open { path, detail, .. }) => {
            assert_eq!(path.display().to_string(), database.target());
            assert!(detail.contains("does not exist"), "says why: {detail}");
        }
        other => panic!("opening a dropped database must fail, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_refuses_a_started_row_naming_itself_read_only() {
    let fresh = Fresh::start().await;
    PostgresLedger::open(&fresh.database().await)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let raw = fresh.raw().await;
    let name: String = raw
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    raw.batch_execute(&format!(
        "ALTER DATABASE {name} SET default_transaction_read_only = on"
    ))
    .await
    .unwrap();
    // New connections only read; an up-to-date schema opens without a write.
    let database = fresh.database().await;
    let ledger = PostgresLedger::open(&database).await.unwrap();
    let run = RunId::from("read-only");
    match ledger
        .record_started(started(&run, "p1", ToolReplay::Safe))
        .await
    {
        Err(LedgerError::Storage {
            operation, detail, ..
        }) => {
            assert_eq!(operation, "record_started");
            assert!(
                detail.contains("read-only") && detail.contains(database.target()),
                "names the server and says it is read-only: {detail}"
            );
        }
        other => panic!("a read-only server must refuse the write, got {other:?}"),
    }
    assert_eq!(ledger.get(&run, &CallId::new("p1")).await.unwrap(), None);
    assert_eq!(stored_rows(&raw, &run).await, 0, "nothing written");
    ledger.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_on_a_locked_row_is_a_clear_error_and_loses_nothing() {
    let fresh = Fresh::start().await;
    let database = fresh
        .database_with(|options| options.statement_timeout(Duration::from_millis(300)))
        .await;
    let ledger = PostgresLedger::open(&database).await.unwrap();
    let run = RunId::from("timeout");
    let row = started(&run, "p1", ToolReplay::Safe);
    ledger.record_started(row.clone()).await.unwrap();
    ledger
        .record_started(started(&run, "p2", ToolReplay::Safe))
        .await
        .unwrap();
    let before = ledger.get(&run, &row.call_id).await.unwrap();

    // Another process holds p1's row (a long transaction, sleeping).
    let holder = fresh.raw().await;
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM tinyagents_calls WHERE run_id = 'timeout' AND call_id = 'p1' \
             FOR UPDATE",
        )
        .await
        .unwrap();
    let sleeping = tokio::spawn(async move {
        holder.batch_execute("SELECT pg_sleep(2)").await.unwrap();
        holder
    });
    // Starting p1 again (a replay-safe call in doubt) waits for its row.
    match ledger.record_started(row.clone()).await {
        Err(LedgerError::Storage {
            operation, detail, ..
        }) => {
            assert_eq!(operation, "record_started");
            assert!(
                detail.contains("statement timeout") && detail.contains(database.target()),
                "names the server and the timeout: {detail}"
            );
        }
        other => panic!("the locked row must time out, got {other:?}"),
    }
    let holder = sleeping.await.unwrap();
    holder.batch_execute("ROLLBACK").await.unwrap();

    assert_eq!(
        ledger.get(&run, &row.call_id).await.unwrap(),
        before,
        "p1 unchanged"
    );
    assert_eq!(ledger.rows(&run).await.unwrap().len(), 2, "p2 kept");
    ledger.flush().await.unwrap();
    ledger.record_started(row.clone()).await.unwrap();
    let restarted = ledger.get(&run, &row.call_id).await.unwrap().unwrap();
    assert_eq!(
        (restarted.status, restarted.attempts),
        (CallStatus::Started, 2)
    );
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_run_reports_the_lost_write_and_the_ledger_works_again() {
    let fresh = Fresh::start().await;
    // Riders stay uncommitted until a started row commits them.
    let database = fresh
        .database_with(|options| options.idle_in_transaction_timeout(Duration::from_secs(120)))
        .await;
    let options = PostgresLedgerOptions::default().linger(Duration::from_secs(60));
    let ledger = PostgresLedger::open_with(&database, options).await.unwrap();
    let run = RunId::from("restart");
    let p1 = started(&run, "p1", ToolReplay::Safe);
    ledger.record_started(p1.clone()).await.unwrap();
    let done = Outcome::Completed(ToolResult::text("ok"));
    ledger
        .record_settled(&run, &p1.call_id, &done)
        .await
        .unwrap();
    // Read on the writer's connection: the settle is applied, uncommitted.
    let applied = ledger.get(&run, &p1.call_id).await.unwrap().unwrap();
    assert_eq!(applied.status, CallStatus::Completed);

    tokio::task::block_in_place(|| fresh.cluster.restart()).unwrap();

    // The next call works on a new connection.
    let p2 = started(&run, "p2", ToolReplay::Safe);
    ledger.record_started(p2.clone()).await.unwrap();
    // The settle of p1 in flight was lost with its transaction: reported.
    match ledger.flush().await {
        Err(LedgerError::Deferred { count, first }) => {
            assert_eq!(count, 1);
            let text = first.to_string();
            assert!(
                text.contains("lost") && text.contains(database.target()),
                "says the write was lost and where: {text}"
            );
        }
        other => panic!("the lost settle must be reported, got {other:?}"),
    }
    ledger.flush().await.unwrap();
    // Committed rows kept; the lost settle left p1 in doubt, as promised.
    let p1_row = ledger.get(&run, &p1.call_id).await.unwrap().unwrap();
    assert_eq!((p1_row.status, p1_row.attempts), (CallStatus::Started, 1));
    ledger
        .record_settled(&run, &p1.call_id, &done)
        .await
        .unwrap();
    ledger.flush().await.unwrap();
    ledger.shutdown().await.unwrap();

    let reader = PostgresLedger::open(&fresh.database().await).await.unwrap();
    let statuses: Vec<(String, CallStatus)> = reader
        .rows(&run)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.call_id.to_string(), row.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("p1".to_owned(), CallStatus::Completed),
            ("p2".to_owned(), CallStatus::Started)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_holding_nul_is_refused_before_it_reaches_the_database() {
    let fresh = Fresh::start().await;
    let ledger = PostgresLedger::open(&fresh.database().await).await.unwrap();
    let bad = RunId::from("run\0with a NUL");
    match ledger
        .record_started(started(&bad, "p1", ToolReplay::Safe))
        .await
    {
        Err(LedgerError::Storage {
            operation, detail, ..
        }) => {
            assert_eq!(operation, "record_started");
            assert!(
                detail.contains("NUL") && detail.contains("run id"),
                "says why: {detail}"
            );
        }
        other => panic!("a run id holding NUL must be refused, got {other:?}"),
    }
    // The writer is unharmed: the next write and the flush succeed.
    let run = RunId::from("fine");
    ledger
        .record_started(started(&run, "p1", ToolReplay::Safe))
        .await
        .unwrap();
    ledger.flush().await.unwrap();
    assert_eq!(stored_rows(&fresh.raw().await, &run).await, 1);
    ledger.shutdown().await.unwrap();
}
