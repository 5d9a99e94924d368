//! Issue 32: an error that another error caused keeps it as its
//! `source()`, so a host can tell what failed underneath (downcasting it
//! to its type) while the message stays the one it always was.

use std::sync::Arc;

use tinyagents::core::{RunId, TinyAgentsError};
use tinyagents::harness::ResumeOptions;
use tinyagents::ledger::{EffectLedger, LedgerError};
use tinyagents::prelude::*;
use tinyagents::runs::{RunStoreError, SqliteRunStore};

/// The source of `error`, which must be a `T`.
fn source_of<'e, T: std::error::Error + 'static>(
    error: &'e (dyn std::error::Error + 'static),
) -> &'e T {
    let source = error
        .source()
        .unwrap_or_else(|| panic!("no source: {error:?}"));
    source.downcast_ref::<T>().unwrap_or_else(|| {
        panic!(
            "the source is not a {}: {source:?}",
            std::any::type_name::<T>()
        )
    })
}

fn harness(ledger: Arc<dyn EffectLedger>) -> AgentHarness {
    AgentHarness::builder(Arc::new(ScriptedModel::new(vec![
        ChatResponse::text("done"),
        ChatResponse::text("done"),
    ])))
    .ledger(ledger)
    .build()
    .unwrap()
}

/// A run id the ledger knows already: the harness's error says so as
/// before, and its source is the ledger's own `RunExists`.
#[tokio::test]
async fn a_run_that_exists_is_the_ledgers_error_underneath() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let harness = harness(Arc::clone(&ledger));
    let request = || RunRequest::new("go").with_run_id(RunId::from("twice"));
    harness
        .run_with(request(), &EventSink::none())
        .await
        .unwrap();
    let error = harness
        .run_with(request(), &EventSink::none())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "state error: run twice already exists in the effect ledger: a new run needs a new id; \
         resume or recover it instead"
    );
    assert!(matches!(error, TinyAgentsError::Ledger { .. }), "{error:?}");
    assert_eq!(error.error_type(), "state");
    let exists: &LedgerError = source_of(&error);
    assert!(
        matches!(exists, LedgerError::RunExists { run } if run.as_str() == "twice"),
        "{exists:?}"
    );
}

/// A checkpoint that is not JSON: recovery refuses it, naming the run, and
/// the decoder's error is underneath.
#[tokio::test]
async fn an_unreadable_checkpoint_is_the_decoders_error_underneath() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let run = RunId::from("garbled");
    ledger.begin_run(&run).await.unwrap();
    ledger
        .save_checkpoint(&run, 1, b"not json".to_vec())
        .await
        .unwrap();
    let error = harness(Arc::clone(&ledger))
        .recover(&run, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("state error: checkpoint of run garbled cannot be read: expected"),
        "{error}"
    );
    assert!(
        matches!(&error, TinyAgentsError::CheckpointUnreadable { run, entry: None, .. } if run.as_str() == "garbled"),
        "{error:?}"
    );
    let _: &serde_json::Error = source_of(&error);
}

/// A file of noise where an effect ledger or a run store should be: the
/// store says the file is corrupt, and SQLite's own error is underneath.
#[tokio::test]
async fn a_corrupt_sqlite_file_is_sqlites_error_underneath() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();

    let error = SqliteLedger::open(&junk).await.unwrap_err();
    assert!(matches!(error, LedgerError::Corrupt { .. }), "{error:?}");
    assert!(error.to_string().contains("the file is corrupt"), "{error}");
    let sqlite: &rusqlite::Error = source_of(&error);
    assert_eq!(
        sqlite.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );

    let error = SqliteRunStore::open(&junk).await.unwrap_err();
    assert!(matches!(error, RunStoreError::Corrupt { .. }), "{error:?}");
    let sqlite: &rusqlite::Error = source_of(&error);
    assert_eq!(
        sqlite.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );
}

/// A tool that cannot be registered: a configuration error as before, the
/// registry's error underneath.
#[tokio::test]
async fn a_tool_that_cannot_register_is_the_registrys_error_underneath() {
    let tool = || -> Arc<dyn Tool> {
        Arc::new(FnTool::new(
            "twin",
            "Twice.",
            |_: serde_json::Value| async { anyhow::Ok("x") },
        ))
    };
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(vec![])));
    builder.register(tool()).unwrap();
    let error = builder.register(tool()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "configuration error: a tool named 'twin' is already registered"
    );
    assert_eq!(error.error_type(), "config");
    let _: &tinyagents::tools::RegistryError = source_of(&error);
}
