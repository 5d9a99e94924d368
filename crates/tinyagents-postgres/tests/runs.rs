//! `PostgresRunStore`: the run store's conformance suite (one store, two
//! stores on one database, every edit of a sealed part made in SQL), the
//! host's key, a database of the earlier runs queue migrated, a newer
//! schema refused, a global limit on claims, and the ledger's fence
//! reading the store's epochs. Each test starts its own cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents_core::{CallId, ToolReplay};
use tinyagents_ledger::{EffectLedger, LedgerError, StartedRow, args_hash};
use tinyagents_postgres::testing::TestCluster;
use tinyagents_postgres::{
    PgDatabase, PostgresLedger, PostgresRunStore, PostgresRunStoreOptions, RUN_STORE_SCHEMA_VERSION,
};
use tinyagents_runs::conformance::{self, Edit, LONG, hold, new_run};
use tinyagents_runs::{
    ClaimFilter, Ending, RecordStatus, RunStore, RunStoreError, SealKey, SharedRunStore,
};
use tokio_postgres::{Client, NoTls};

/// A fresh database of a new cluster, the cluster kept alive by the caller.
async fn fresh() -> (TestCluster, String) {
    let cluster = TestCluster::start().unwrap();
    let url = cluster.database().await.unwrap();
    (cluster, url)
}

async fn open(url: &str) -> PostgresRunStore {
    let db = PgDatabase::connect(url).await.unwrap();
    PostgresRunStore::open(&db).await.unwrap()
}

/// A plain connection, to look at and edit the tables.
async fn raw(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_run_store_conforms() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    conformance::run_all(&store).await;
    // Opening again migrates nothing, keeps the runs and the key.
    let again = open(&url).await;
    conformance::run_all(&again).await;
    let shared: SharedRunStore = Arc::new(again);
    conformance::journal::a_holder_that_lost_its_run_adds_nothing_to_the_journal(shared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_run_store_conforms_with_two_stores_on_one_database() {
    // Two processes' stores on one database, opened at once: one migration,
    // one key; one's writes, the other's reads.
    let (_cluster, url) = fresh().await;
    let (first, second) = tokio::join!(open(&url), open(&url));
    conformance::approvals::racing_deciders_decide_a_call_once(&first).await;
    conformance::records::a_claim_takes_a_run_once_by_the_epoch_it_saw(&second).await;
    let run = new_run("shared", "go");
    let id = run.run_id.clone();
    first.create(run, None).await.unwrap();
    assert!(
        second.get(&id).await.unwrap().is_some(),
        "one key, one store"
    );
    // Two workers on two stores: each run taken once.
    let agent = conformance::fresh_run("shared-agent").to_string();
    let mut ids = Vec::new();
    for i in 0..6 {
        let run = new_run(&agent, &format!("job {i}"));
        ids.push(run.run_id.clone());
        first.create(run, None).await.unwrap();
    }
    let filter = ClaimFilter {
        agents: vec![agent],
        file_sha256: None,
    };
    let (hold_a, hold_b) = (hold("a", LONG), hold("b", LONG));
    let (a, b) = tokio::join!(
        first.claim_next(&hold_a, 4, &filter),
        second.claim_next(&hold_b, 4, &filter),
    );
    let mut taken: Vec<_> = a
        .unwrap()
        .into_iter()
        .chain(b.unwrap())
        .map(|c| c.record.run_id)
        .collect();
    taken.sort();
    ids.sort();
    assert_eq!(taken, ids, "each run taken once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_run_store_refuses_every_edit_of_a_sealed_part() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    let client = raw(&url).await;
    let client = &client;
    let edit = |edit: Edit| async move {
        let n = match edit {
            Edit::FilePath(run, to) => {
                client
                    .execute(
                        "UPDATE tinyagents_runs SET file_path = $2 WHERE id = $1",
                        &[&run.as_str(), &to],
                    )
                    .await
            }
            Edit::FileHash(run, to) => {
                client
                    .execute(
                        "UPDATE tinyagents_runs SET file_sha256 = $2 WHERE id = $1",
                        &[&run.as_str(), &to],
                    )
                    .await
            }
            Edit::Request(run, to) => {
                client
                    .execute(
                        "UPDATE tinyagents_runs SET request = $2 WHERE id = $1",
                        &[&run.as_str(), &to],
                    )
                    .await
            }
            Edit::Arguments(run, args, hash) => {
                client
                    .execute(
                        "UPDATE tinyagents_waiting_calls SET arguments = $2, args_hash = $3 \
                         WHERE run_id = $1",
                        &[&run.as_str(), &args, &hash],
                    )
                    .await
            }
            Edit::Verdict(run, call) => {
                client
                    .execute(
                        "UPDATE tinyagents_waiting_calls SET approved = true \
                         WHERE run_id = $1 AND call_id = $2",
                        &[&run.as_str(), &call],
                    )
                    .await
            }
            Edit::Journal(run, text) => {
                client
                    .execute(
                        "UPDATE tinyagents_run_journal SET event = $2 WHERE seq = \
                         (SELECT min(seq) FROM tinyagents_run_journal WHERE run_id = $1)",
                        &[&run.as_str(), &text],
                    )
                    .await
            }
            Edit::State(run) => {
                // The payload is JSON inside the sealed state's JSON: its
                // quotes are escaped there. Only a row the text is in counts.
                let (from, to) = (r#"\"amount\":120"#, r#"\"amount\":920"#);
                client
                    .execute(
                        "UPDATE tinyagents_runs SET suspended = replace(suspended, $2, $3) \
                         WHERE id = $1 AND strpos(suspended, $2) > 0",
                        &[&run.as_str(), &from, &to],
                    )
                    .await
            }
        }
        .unwrap();
        assert_eq!(n, 1, "the edit changed one row");
    };
    conformance::tamper::every_sealed_part_refuses_an_edit(&store, &edit).await;
    conformance::tamper::a_workers_claim_fails_an_edited_run_and_takes_the_others(&store, &edit)
        .await;
    conformance::journal::an_unreadable_journal_entry_reads_back_as_such(&store, &edit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_key_is_used_and_another_key_is_refused() {
    let (_cluster, url) = fresh().await;
    let db = PgDatabase::connect(&url).await.unwrap();
    let key = SealKey::from_bytes(&[9; 32]).unwrap();
    let options = PostgresRunStoreOptions {
        seal_key: Some(key.clone()),
    };
    let store = PostgresRunStore::open_with(&db, options.clone())
        .await
        .unwrap();
    let run = new_run("keyed", "go");
    let id = run.run_id.clone();
    store.create(run, None).await.unwrap();
    // The store's own key is not the host's: its seals do not check out.
    let own = PostgresRunStore::open(&db).await.unwrap();
    assert!(matches!(
        own.get(&id).await.unwrap_err(),
        RunStoreError::Tampered { .. }
    ));
    let again = PostgresRunStore::open_with(&db, options).await.unwrap();
    assert!(again.get(&id).await.unwrap().is_some());
    // The store's own key is made once and kept: another handle reads what
    // one sealed with it.
    let mine = new_run("own", "go");
    let mine_id = mine.run_id.clone();
    own.create(mine, None).await.unwrap();
    let reopened = PostgresRunStore::open(&db).await.unwrap();
    assert!(reopened.get(&mine_id).await.unwrap().is_some());
    let keys: i64 = raw(&url)
        .await
        .query_one("SELECT count(*) FROM tinyagents_run_store_key", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 1);
    // The debug form names the database, never the key.
    let shown = format!("{again:?}");
    assert!(
        shown.contains(db.target()) && !shown.contains("9, 9"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_earlier_queue_is_migrated_and_its_runs_kept_aside() {
    let (_cluster, url) = fresh().await;
    let client = raw(&url).await;
    // What the earlier build's runs queue made (component `runs`, version
    // 1), with a run queued in it.
    client
        .batch_execute(
            "CREATE TABLE tinyagents_schema (
                component TEXT PRIMARY KEY,
                version BIGINT NOT NULL,
                migrated_at TIMESTAMPTZ NOT NULL DEFAULT now()
            );
            CREATE TABLE tinyagents_runs (
                id TEXT PRIMARY KEY,
                status TEXT NOT NULL CHECK (status IN
                    ('queued', 'running', 'awaiting_approval', 'completed', 'failed')),
                request JSONB NOT NULL,
                owner TEXT,
                lease_until TIMESTAMPTZ,
                epoch BIGINT NOT NULL DEFAULT 0,
                attempts INTEGER NOT NULL DEFAULT 0,
                queued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                started_at TIMESTAMPTZ,
                finished_at TIMESTAMPTZ,
                suspended JSONB,
                decisions JSONB,
                outcome JSONB,
                error TEXT
            );
            CREATE INDEX tinyagents_runs_queued ON tinyagents_runs (queued_at, id)
                WHERE status = 'queued';
            CREATE INDEX tinyagents_runs_leased ON tinyagents_runs (lease_until)
                WHERE status = 'running';
            INSERT INTO tinyagents_schema (component, version) VALUES ('runs', 1);
            INSERT INTO tinyagents_runs (id, status, request)
                VALUES ('old', 'queued', '{\"input\": \"from before\"}');",
        )
        .await
        .unwrap();
    let store = open(&url).await;
    assert!(store.list(&Default::default()).await.unwrap().is_empty());
    assert!(store.counts().await.unwrap().is_empty());
    let kept: i64 = client
        .query_one("SELECT count(*) FROM tinyagents_runs_v1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the earlier runs are kept, unread");
    let version: i64 = client
        .query_one(
            "SELECT version FROM tinyagents_schema WHERE component = 'runs'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, RUN_STORE_SCHEMA_VERSION);
    assert_eq!(RUN_STORE_SCHEMA_VERSION, 3);
    // The store works over it, and so does a ledger (whose opening brings
    // the same component up to date).
    let run = new_run("after", "go");
    let id = run.run_id.clone();
    store.create(run, Some(&hold("w", LONG))).await.unwrap();
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        RecordStatus::Running
    );
    let db = PgDatabase::connect(&url).await.unwrap();
    PostgresLedger::open(&db)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_at_open() {
    let (_cluster, url) = fresh().await;
    let db = PgDatabase::connect(&url).await.unwrap();
    PostgresRunStore::open(&db).await.unwrap();
    raw(&url)
        .await
        .execute(
            "UPDATE tinyagents_schema SET version = 99 WHERE component = 'runs'",
            &[],
        )
        .await
        .unwrap();
    match PostgresRunStore::open(&db).await {
        Err(RunStoreError::TooNew {
            path,
            found,
            supported,
        }) => {
            assert_eq!((found, supported), (99, RUN_STORE_SCHEMA_VERSION));
            assert!(
                path.contains(db.target()) && path.contains("runs"),
                "{path}"
            );
        }
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_caps_running_runs_and_ended_runs_are_named() {
    let (_cluster, url) = fresh().await;
    let store = open(&url).await;
    let agent = conformance::fresh_run("limited").to_string();
    let filter = ClaimFilter {
        agents: vec![agent.clone()],
        file_sha256: None,
    };
    let mut ids = Vec::new();
    for i in 0..5 {
        let run = new_run(&agent, &format!("job {i}"));
        ids.push(run.run_id.clone());
        store.create(run, None).await.unwrap();
    }
    // One run held elsewhere with a live lease counts against the limit.
    let other = new_run("elsewhere", "go");
    store.create(other, Some(&hold("cli", LONG))).await.unwrap();
    let (hold_a, hold_b) = (hold("a", LONG), hold("b", LONG));
    let (a, b) = tokio::join!(
        store.claim_next_limited(&hold_a, 10, &filter, Some(3)),
        store.claim_next_limited(&hold_b, 10, &filter, Some(3)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len() + b.len(), 2, "3 at once, 1 running already");
    let full = store
        .claim_next_limited(&hold("c", LONG), 10, &filter, Some(3))
        .await
        .unwrap();
    assert!(full.is_empty(), "no place left");
    // A run whose lease ran out is no longer counted, and is taken over.
    let first = &a.first().or(b.first()).unwrap();
    let short = Duration::from_millis(50);
    assert_eq!(
        store
            .renew(
                first.record.holder.as_ref().unwrap().owner.as_str(),
                short,
                &[(first.record.run_id.clone(), first.epoch)]
            )
            .await
            .unwrap()
            .len(),
        1
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retaken = store
        .claim_next_limited(&hold("c", LONG), 10, &filter, Some(3))
        .await
        .unwrap();
    assert_eq!(retaken.len(), 1);
    assert_eq!(retaken[0].record.run_id, first.record.run_id);
    assert!(retaken[0].takeover);
    // Unlimited, the rest are taken.
    let rest = store
        .claim_next_limited(&hold("d", LONG), 10, &filter, None)
        .await
        .unwrap();
    assert_eq!(rest.len(), 3);

    let done = &rest[0];
    let ended = Ending::Ended {
        status: RecordStatus::Completed,
        final_text: "done".into(),
        usage: Default::default(),
    };
    assert!(
        store
            .end(&done.record.run_id, done.epoch, &ended)
            .await
            .unwrap()
    );
    let failed = &rest[1];
    let failing = Ending::Failed { error: "no".into() };
    assert!(
        store
            .end(&failed.record.run_id, failed.epoch, &failing)
            .await
            .unwrap()
    );
    let asked = [
        rest[2].record.run_id.clone(),
        failed.record.run_id.clone(),
        conformance::fresh_run("missing"),
        done.record.run_id.clone(),
    ];
    assert_eq!(
        store.ended_among(&asked).await.unwrap(),
        [failed.record.run_id.clone(), done.record.run_id.clone()],
        "the ended ones, in the order asked"
    );
    assert!(store.ended_among(&[]).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledgers_fence_reads_the_run_stores_epochs() {
    let (_cluster, url) = fresh().await;
    let db = PgDatabase::connect(&url).await.unwrap();
    let store = PostgresRunStore::open(&db).await.unwrap();
    let ledger = PostgresLedger::open(&db).await.unwrap();
    let run = new_run("fenced", "go");
    let id = run.run_id.clone();
    let first = store.create(run, Some(&hold("w1", LONG))).await.unwrap();
    let row = |call: &str| {
        StartedRow::new(
            id.clone(),
            CallId::new(call),
            "pay",
            args_hash(&json!({"call": call})),
            ToolReplay::Never,
        )
    };
    let held = ledger.fenced(id.clone(), first.epoch);
    held.record_started(row("p1")).await.unwrap();
    // Another holder takes the run over: the first one's writes are refused.
    let second = store
        .claim(&id, first.epoch, &hold("w2", LONG))
        .await
        .unwrap();
    let refused = held.record_started(row("p2")).await.unwrap_err();
    assert!(
        matches!(
            refused,
            LedgerError::Fenced {
                held: 1,
                current: 2,
                ..
            }
        ),
        "{refused:?}"
    );
    ledger
        .fenced(id.clone(), second.epoch)
        .record_started(row("p3"))
        .await
        .unwrap();
    ledger.shutdown().await.unwrap();
}
