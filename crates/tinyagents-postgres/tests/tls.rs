//! TLS: a server offering it is reached over it with its certificate
//! verified against the CA given, the ledger works over it, and a server
//! whose certificate does not verify is refused, not reached in the clear.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{CallStatus, EffectLedger, Outcome, StartedRow, args_hash};
use tinyagents_postgres::testing::TestCluster;
use tinyagents_postgres::{PgDatabase, PgError, PgOptions, PostgresLedger};

/// The database's sessions the server sees using TLS (asked over a plain
/// connection, which is not one of them).
async fn tls_sessions(url: &str) -> i64 {
    let (client, connection) =
        tokio_postgres::connect(&format!("{url} sslmode=disable"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE s.ssl AND a.datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_offering_tls_is_reached_over_it_with_its_certificate_verified() {
    let cluster = TestCluster::start_tls().unwrap();
    let url = cluster.database().await.unwrap();
    let ca = cluster.ca_file().unwrap();
    let options = PgOptions::new(format!("{url} sslmode=require")).ca_file(&ca);
    let db = PgDatabase::connect_with(options).await.unwrap();
    let ledger = PostgresLedger::open(&db).await.unwrap();
    let (run, call) = (RunId::from("over-tls"), CallId::model(1));
    let hash = args_hash(&serde_json::json!({}));
    let row = StartedRow::new(run.clone(), call.clone(), "lookup", hash, ToolReplay::Safe);
    ledger.record_started(row).await.unwrap();
    let found = Outcome::Completed(ToolResult::text("found"));
    ledger.record_settled(&run, &call, &found).await.unwrap();
    ledger.flush().await.unwrap();
    let stored = ledger.get(&run, &call).await.unwrap().unwrap();
    assert_eq!(
        stored.status,
        CallStatus::Completed,
        "the ledger works over TLS"
    );
    // The pool's connection and the writer's are TLS sessions.
    assert!(
        tls_sessions(&url).await >= 2,
        "the server sees the ledger's sessions as TLS"
    );
    ledger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_does_not_verify_is_refused_not_reached_in_the_clear() {
    let cluster = TestCluster::start_tls().unwrap();
    let url = cluster.database().await.unwrap();
    // Without the CA, the platform's roots do not trust the throwaway CA:
    // with `prefer` (the default) as with `require`, the connection fails
    // rather than fall back to plain text.
    for mode in ["prefer", "require"] {
        let refused = PgDatabase::connect(&format!("{url} sslmode={mode}")).await;
        match refused {
            Err(PgError::Unreachable { detail, .. }) => {
                assert!(
                    detail.to_lowercase().contains("certificate"),
                    "{mode}: the error names the certificate: {detail}"
                );
            }
            other => panic!("{mode}: expected a refusal, got {other:?}"),
        }
    }
    // A CA file that is not one is an error naming it.
    let junk = std::env::temp_dir().join(format!("not-a-ca-{}.pem", std::process::id()));
    std::fs::write(&junk, "not a certificate").unwrap();
    let refused = PgDatabase::connect_with(PgOptions::new(url).ca_file(&junk)).await;
    std::fs::remove_file(&junk).unwrap();
    match refused {
        Err(PgError::Tls { detail }) => {
            assert!(detail.contains(&junk.display().to_string()), "{detail}");
        }
        other => panic!("expected a TLS setup error, got {other:?}"),
    }
}
