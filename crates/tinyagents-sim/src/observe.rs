//! What a history leaves behind, read back at the end (or after a
//! crash): every ledger row of the run's tree, what is in doubt, what the
//! ledger and the session store persisted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tinyagents::{
    core::CallId, core::RunId, ledger::EffectLedger, ledger::SqliteLedger,
    orchestrator::SessionScope, orchestrator::SessionStore,
};

use crate::drive::{Observation, RUN, World};
use crate::ledger::{SimLedger, blocking};
use crate::plan::{History, LedgerKind};

/// The session of a history run in one.
pub(crate) fn session_scope() -> SessionScope {
    SessionScope::new("sim-session")
}

/// Every stored session: the root's and its children, as persisted.
pub(crate) async fn read_sessions(world: &World, seen: &mut Observation) {
    let mut ids = vec![session_scope().id];
    while let Some(id) = ids.pop() {
        if let Ok(Some(record)) = world.sessions.load(&id).await {
            seen.persisted.push((
                format!("session {}", record.id),
                serde_json::to_string(&record).unwrap_or_default(),
            ));
        }
        for child in world.sessions.children(&id).await.unwrap_or_default() {
            ids.push(child.id);
        }
    }
}

/// Reads the ledger back at the end: every run of the tree (the root, and
/// each delegated run its rows name), what is in doubt, what persisted.
pub(crate) async fn read_ledger(history: &History, world: &World, seen: &mut Observation) {
    let (inner, sqlite): (Arc<dyn EffectLedger>, _) = match history.ledger {
        LedgerKind::None => return,
        LedgerKind::Memory => (Arc::clone(&world.memory) as Arc<dyn EffectLedger>, None),
        LedgerKind::Sqlite => match blocking(SqliteLedger::open(world.ledger_path())).await {
            Ok(ledger) => {
                let ledger = Arc::new(ledger);
                (Arc::clone(&ledger) as Arc<dyn EffectLedger>, Some(ledger))
            }
            Err(error) => {
                seen.setup_error = Some(format!("the ledger does not open again: {error}"));
                return;
            }
        },
    };
    let ledger = SimLedger::new(Arc::clone(&inner), true, None, Vec::new());
    let helpers: Vec<String> = (0..history.helpers.len())
        .map(History::helper_name)
        .collect();
    let mut runs = vec![RunId::new(RUN)];
    let mut i = 0;
    while let Some(run) = runs.get(i).cloned() {
        i += 1;
        let rows = ledger.rows(&run).await.unwrap_or_default();
        for row in rows {
            if helpers.contains(&row.tool_name) {
                let child = RunId::new(format!("{}::{}", row.run_id, row.call_id));
                if !runs.contains(&child) {
                    runs.push(child);
                }
            }
            seen.persisted
                .push(("ledger row".to_owned(), format!("{row:?}")));
            seen.rows.push(row);
        }
        if let Ok(Some(checkpoint)) = ledger.load_checkpoint(&run).await {
            let mut text = String::from_utf8_lossy(&checkpoint.data).into_owned();
            for entry in &checkpoint.appended {
                text.push_str(&String::from_utf8_lossy(entry));
            }
            seen.persisted.push((format!("checkpoint of {run}"), text));
        }
    }
    seen.in_doubt = ledger
        .in_doubt()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|d| (d.row.run_id, d.row.call_id))
        .collect();
    // The memory ledger lists them in its map's order: sorted, the account
    // of a seed is the same on every run.
    seen.in_doubt.sort();
    seen.unfinished = ledger.unfinished_runs().await.unwrap_or_default();
    if let Some(sqlite) = sqlite {
        drop(ledger);
        drop(inner);
        let _ = blocking(sqlite.shutdown()).await;
        for file in ledger_files(&world.ledger_path()) {
            if let Ok(bytes) = std::fs::read(&file) {
                let name = file.display().to_string();
                seen.persisted
                    .push((name, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
}

/// The root run's rows that are started, read from the storage a dead
/// process left.
pub(crate) async fn started_rows(history: &History, world: &World) -> Vec<CallId> {
    let inner: Arc<dyn EffectLedger> = match history.ledger {
        LedgerKind::None => return Vec::new(),
        LedgerKind::Memory => Arc::clone(&world.memory) as Arc<dyn EffectLedger>,
        LedgerKind::Sqlite => match blocking(SqliteLedger::open(world.ledger_path())).await {
            Ok(ledger) => Arc::new(ledger),
            Err(_) => return Vec::new(),
        },
    };
    let rows = blocking(inner.rows(&RunId::new(RUN)))
        .await
        .unwrap_or_default();
    rows.into_iter()
        .filter(|row| row.status == tinyagents::ledger::CallStatus::Started)
        .map(|row| row.call_id)
        .collect()
}

fn ledger_files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}
