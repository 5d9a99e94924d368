#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
use tinyagents_postgres::testing::TestCluster;

#[tokio::test]
async fn smoke() {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let row = client.query_one("SELECT 1 + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    cluster.restart().unwrap();
    assert!(client.query_one("SELECT 1", &[]).await.is_err());
}
