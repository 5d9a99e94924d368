//! The tests' throwaway cluster (feature `testing`): it serves fresh
//! databases, restarts with its connections dropped and its data kept, and
//! is gone when dropped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tinyagents_postgres::testing::TestCluster;

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

#[tokio::test]
async fn a_throwaway_cluster_serves_restarts_keeping_data_and_is_gone_when_dropped() {
    if std::env::var_os("TINYAGENTS_PG_URL").is_some() {
        // A server of someone else's: not ours to restart or remove.
        return;
    }
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let other = cluster.database().await.unwrap();
    assert_ne!(url, other, "each database is fresh");
    let client = connect(&url).await.unwrap();
    client
        .batch_execute("CREATE TABLE kept (v INT); INSERT INTO kept VALUES (42)")
        .await
        .unwrap();

    cluster.restart().unwrap();
    assert!(
        client.query_one("SELECT 1", &[]).await.is_err(),
        "a restart drops every connection"
    );
    let again = connect(&url).await.unwrap();
    let kept: i32 = again
        .query_one("SELECT v FROM kept", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 42, "committed data survives the restart");

    drop(again);
    drop(cluster);
    assert!(connect(&url).await.is_err(), "a dropped cluster is stopped");
}
