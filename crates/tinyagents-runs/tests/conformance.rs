//! The run store's conformance suite on SQLite, and what is SQLite's own:
//! the file's marks, the command line's earlier `runs.db`, a reopened file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use tinyagents_runs::conformance::{self, Edit};
use tinyagents_runs::{RunStore, RunStoreError, SealKey, SqliteRunStore, SqliteRunStoreOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_run_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRunStore::open(dir.path().join("runs.db"))
        .await
        .unwrap();
    conformance::run_all(&store).await;
    let shared: tinyagents_runs::SharedRunStore = std::sync::Arc::new(store);
    conformance::journal::a_holder_that_lost_its_run_adds_nothing_to_the_journal(shared).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_run_store_conforms_across_two_handles_on_one_file() {
    // Two processes' stores on one file: one's writes, the other's reads.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let first = SqliteRunStore::open(&path).await.unwrap();
    let second = SqliteRunStore::open(&path).await.unwrap();
    conformance::approvals::racing_deciders_decide_a_call_once(&first).await;
    conformance::records::a_claim_takes_a_run_once_by_the_epoch_it_saw(&second).await;
    let run = conformance::new_run("shared", "go");
    let id = run.run_id.clone();
    first.create(run, None).await.unwrap();
    assert!(
        second.get(&id).await.unwrap().is_some(),
        "one key, one store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_run_store_refuses_every_edit_of_a_sealed_part() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = SqliteRunStore::open(&path).await.unwrap();
    let edit = |edit: Edit| {
        let path = path.clone();
        async move {
            let conn = rusqlite::Connection::open(&path).unwrap();
            let n = match edit {
                Edit::FilePath(run, to) => conn.execute(
                    "UPDATE runs SET file_path = ?2 WHERE run_id = ?1",
                    (run.as_str(), to),
                ),
                Edit::FileHash(run, to) => conn.execute(
                    "UPDATE runs SET file_sha256 = ?2 WHERE run_id = ?1",
                    (run.as_str(), to),
                ),
                Edit::Request(run, to) => conn.execute(
                    "UPDATE runs SET request = ?2 WHERE run_id = ?1",
                    (run.as_str(), to),
                ),
                Edit::Arguments(run, args, hash) => conn.execute(
                    "UPDATE waiting_calls SET arguments = ?2, args_hash = ?3 WHERE run_id = ?1",
                    (run.as_str(), args, hash),
                ),
                Edit::Verdict(run, call) => conn.execute(
                    "UPDATE waiting_calls SET approved = 1 WHERE run_id = ?1 AND call_id = ?2",
                    (run.as_str(), call),
                ),
                Edit::Journal(run, text) => conn.execute(
                    "UPDATE run_journal SET event = ?2 WHERE seq = \
                     (SELECT min(seq) FROM run_journal WHERE run_id = ?1)",
                    (run.as_str(), text),
                ),
                Edit::State(run) => conn.execute(
                    "UPDATE runs SET suspended = replace(suspended, '\\\"amount\\\":120', '\\\"amount\\\":920') WHERE run_id = ?1",
                    [run.as_str()],
                ),
            }
            .unwrap();
            assert_eq!(n, 1, "the edit changed one row");
        }
    };
    conformance::tamper::every_sealed_part_refuses_an_edit(&store, &edit).await;
    conformance::tamper::a_workers_claim_fails_an_edited_run_and_takes_the_others(&store, &edit)
        .await;
    conformance::journal::an_unreadable_journal_entry_reads_back_as_such(&store, &edit).await;
}

#[tokio::test]
async fn a_store_sealed_with_another_key_is_refused_and_the_host_key_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let key = SealKey::from_bytes(&[9; 32]).unwrap();
    let options = SqliteRunStoreOptions {
        seal_key: Some(key.clone()),
        ..SqliteRunStoreOptions::default()
    };
    let store = SqliteRunStore::open_with(&path, options.clone())
        .await
        .unwrap();
    let run = conformance::new_run("keyed", "go");
    let id = run.run_id.clone();
    store.create(run, None).await.unwrap();
    // The store's own key is not the host's: its seals do not check out.
    let own = SqliteRunStore::open(&path).await.unwrap();
    assert!(matches!(
        own.get(&id).await.unwrap_err(),
        RunStoreError::Tampered { .. }
    ));
    let again = SqliteRunStore::open_with(&path, options).await.unwrap();
    assert!(again.get(&id).await.unwrap().is_some());
}

#[tokio::test]
async fn the_command_lines_earlier_runs_db_is_kept_aside_and_other_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let earlier = dir.path().join("runs.db");
    {
        let conn = rusqlite::Connection::open(&earlier).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, file TEXT NOT NULL,
                session TEXT, status TEXT NOT NULL, started_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL, pid INTEGER NOT NULL, input_tokens INTEGER NOT NULL,
                output_tokens INTEGER NOT NULL, suspended TEXT, decisions TEXT NOT NULL,
                error TEXT) STRICT;
             INSERT INTO runs VALUES ('old', 'a', '/f', NULL, 'completed', 1, 1, 1, 0, 0, NULL, '[]', NULL);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteRunStore::open(&earlier).await.unwrap();
    assert!(store.list(&Default::default()).await.unwrap().is_empty());
    drop(store);
    let conn = rusqlite::Connection::open(&earlier).unwrap();
    let kept: i64 = conn
        .query_row("SELECT count(*) FROM runs_v1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, 1, "the earlier records are kept, unread");

    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("PRAGMA application_id = 7; CREATE TABLE t (x);")
        .unwrap();
    let refused = SqliteRunStore::open(&other).await.unwrap_err();
    assert!(
        matches!(refused, RunStoreError::NotARunStore { found: 7, .. }),
        "{refused:?}"
    );
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    let refused = SqliteRunStore::open(&junk).await.unwrap_err();
    assert!(
        matches!(refused, RunStoreError::Corrupt { .. }),
        "{refused:?}"
    );
    let newer = dir.path().join("newer.db");
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch(&format!(
            "PRAGMA application_id = {}; PRAGMA user_version = 99;",
            tinyagents_runs::RUN_STORE_APPLICATION_ID
        ))
        .unwrap();
    let refused = SqliteRunStore::open(&newer).await.unwrap_err();
    assert!(
        matches!(refused, RunStoreError::TooNew { found: 99, .. }),
        "{refused:?}"
    );
}
