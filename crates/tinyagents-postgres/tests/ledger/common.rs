//! What the tests share: a fresh database of a new cluster, a plain
//! connection to look at and tamper with the tables, rows to start.

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay};
use tinyagents_ledger::{StartedRow, args_hash};
use tinyagents_postgres::testing::TestCluster;
use tinyagents_postgres::{PgDatabase, PgOptions};
use tokio_postgres::{Client, NoTls};

/// A new cluster (kept alive by holding this) and a fresh database on it.
pub(crate) struct Fresh {
    pub(crate) cluster: TestCluster,
    pub(crate) url: String,
}

impl Fresh {
    pub(crate) async fn start() -> Self {
        let cluster = TestCluster::start().unwrap();
        let url = cluster.database().await.unwrap();
        Self { cluster, url }
    }

    /// The database with default options.
    pub(crate) async fn database(&self) -> PgDatabase {
        PgDatabase::connect(&self.url).await.unwrap()
    }

    /// The database with the options `tune` makes of the defaults.
    pub(crate) async fn database_with(
        &self,
        tune: impl FnOnce(PgOptions) -> PgOptions,
    ) -> PgDatabase {
        PgDatabase::connect_with(tune(PgOptions::new(&self.url)))
            .await
            .unwrap()
    }

    /// A plain connection to the database.
    pub(crate) async fn raw(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }
}

/// The started row of `call` in `run`, its arguments named after the call.
pub(crate) fn started(run: &RunId, call: &str, replay: ToolReplay) -> StartedRow {
    StartedRow::new(
        run.clone(),
        CallId::new(call),
        "pay",
        args_hash(&json!({"call": call})),
        replay,
    )
}

/// Puts `run` in the run store, running at `epoch` (what a claim leaves;
/// the fence reads only the epoch, so the record is a bare one).
pub(crate) async fn claimed_run(client: &Client, run: &RunId, epoch: i64) {
    client
        .execute(
            "INSERT INTO tinyagents_runs \
                 (id, agent, request, seal, status, epoch, created_at, updated_at) \
             VALUES ($1, 'ledger-test', '{}', '', 'running', $2, 0, 0)",
            &[&run.as_str(), &epoch],
        )
        .await
        .unwrap();
}

/// Moves `run` to `epoch` (another worker's claim).
pub(crate) async fn set_epoch(client: &Client, run: &RunId, epoch: i64) {
    // As a claim does: the row locked `FOR UPDATE` first, which waits for
    // the ledger's open transaction that checked the fence to commit.
    let updated = client
        .execute(
            "UPDATE tinyagents_runs r SET epoch = $2 \
             FROM (SELECT id FROM tinyagents_runs WHERE id = $1 FOR UPDATE) n \
             WHERE r.id = n.id",
            &[&run.as_str(), &epoch],
        )
        .await
        .unwrap();
    assert_eq!(updated, 1, "the run's row exists");
}

/// How many call rows the database holds for `run`.
pub(crate) async fn stored_rows(client: &Client, run: &RunId) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM tinyagents_calls WHERE run_id = $1",
            &[&run.as_str()],
        )
        .await
        .unwrap()
        .get(0)
}
