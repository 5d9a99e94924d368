//! `worker FILE`: a worker process over the PostgreSQL store. It builds
//! the agents file's agents once per run it claims (over the run's fenced
//! ledger), with the file's MCP servers connected once for all runs, and
//! takes only runs of the file's main agent started from the same content:
//! a run started from another version of the file is left for a worker
//! that has it. Ctrl-C stops it: it claims nothing more, lets its runs go
//! on for a grace period, and gives back the rest for another worker to
//! recover.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::core::CancellationToken;
use tinyagents::orchestrator::SessionStore;
use tinyagents::postgres::{
    BuiltAgent, FactoryError, LeasedRun, PgDatabase, PostgresRunStore, PostgresRunStoreOptions,
    PostgresSessionStore, Worker,
};
use tinyagents::runs::{ClaimFilter, RecordStatus, RunStore as _};

use super::BadInput;
use crate::build::Toolbox;
use crate::cli::{Cli, Command};
use crate::exit;
use crate::file;
use crate::signal::Interrupt;
use crate::store::Place;
use crate::view::out;

/// `tinyagents worker FILE [--concurrency N] [--lease-secs S] [--name NAME] [--exit-when-idle S]`.
pub(crate) async fn worker(cli: &Cli) -> anyhow::Result<u8> {
    let Command::Worker {
        file,
        concurrency,
        lease_secs,
        name,
        exit_when_idle,
    } = &cli.command
    else {
        return Ok(exit::USAGE);
    };
    let loaded = Arc::new(file::load(file)?);
    let place = Place::choose(cli.db.as_deref(), None, Some(&loaded));
    let Place::Database(url) = &place else {
        return Err(BadInput::error(
            "a worker takes its runs from a PostgreSQL store: pass --db URL, set \
             TINYAGENTS_DATABASE_URL, or give the agents file `[store] url`",
        ));
    };
    let db = PgDatabase::connect(url).await?;
    let store = PostgresRunStore::open_with(
        &db,
        PostgresRunStoreOptions {
            seal_key: crate::store::seal_key()?,
        },
    )
    .await?;
    let sessions: Arc<dyn SessionStore> = Arc::new(PostgresSessionStore::open(&db).await?);
    let logs = std::path::PathBuf::from(crate::store::DEFAULT_STORE_DIR);
    std::fs::create_dir_all(&logs)?;
    let toolbox = Arc::new(Toolbox::connect(&loaded, &logs).await?);
    let factory = {
        let (loaded, toolbox) = (Arc::clone(&loaded), Arc::clone(&toolbox));
        move |run: &LeasedRun| -> Result<BuiltAgent, FactoryError> {
            let agent = toolbox
                .agent(&loaded, Arc::clone(&run.ledger), Arc::clone(&sessions))
                .map_err(|error| -> FactoryError {
                    tinyagents::core::error_chain(error.as_ref()).into()
                })?;
            Ok(BuiltAgent::new(agent))
        }
    };
    let filter = ClaimFilter {
        agents: vec![loaded.main.clone()],
        file_sha256: Some(loaded.identity.sha256.clone()),
    };
    let mut worker = Worker::new(&db, factory)
        .run_store(store.clone())
        .claim_filter(filter)
        .concurrency(*concurrency)
        .lease(Duration::from_secs((*lease_secs).max(1)));
    if let Some(name) = name {
        worker = worker.id(name.clone());
    }
    let stop = CancellationToken::new();
    let interrupt = Interrupt::install();
    let watcher = {
        let (stop, interrupt, store) = (stop.clone(), interrupt.clone(), store.clone());
        let idle = exit_when_idle.map(Duration::from_secs);
        tokio::spawn(async move { watch(stop, interrupt, store, idle).await })
    };
    if !cli.json {
        eprintln!(
            "worker: taking runs of agent '{}' from {} ({} at once); Ctrl-C stops it",
            loaded.main,
            place.shown(),
            concurrency
        );
    }
    let report = worker.run(stop).await;
    watcher.abort();
    match Arc::try_unwrap(toolbox) {
        Ok(toolbox) => toolbox.close().await,
        Err(_) => {
            eprintln!("warning: the MCP servers are still in use; they stop with the process")
        }
    }
    let report = report?;
    if cli.json {
        out(&json!({"type": "worker", "report": report}).to_string());
    } else {
        out(&format!(
            "worker stopped: claimed {} (recovered or resumed {}), completed {}, failed {}, \
             awaiting approval {}, given back {}, lost to another worker {}",
            report.claimed,
            report.recovered,
            report.completed,
            report.failed,
            report.awaiting_approval,
            report.released,
            report.lost
        ));
    }
    Ok(exit::OK)
}

/// Stops the worker on Ctrl-C, or once nothing is queued or running for
/// `idle` (checked every 100 ms).
async fn watch(
    stop: CancellationToken,
    interrupt: Interrupt,
    store: PostgresRunStore,
    idle: Option<Duration>,
) {
    let Some(idle) = idle else {
        interrupt.wait().await;
        stop.cancel();
        return;
    };
    let mut quiet = Duration::ZERO;
    let step = Duration::from_millis(100);
    while quiet < idle {
        tokio::select! {
            () = interrupt.wait() => break,
            () = tokio::time::sleep(step) => {}
        }
        let busy = match store.counts().await {
            Ok(counts) => counts.iter().any(|(status, n)| {
                *n > 0 && matches!(status, RecordStatus::Queued | RecordStatus::Running)
            }),
            Err(_) => true,
        };
        quiet = if busy { Duration::ZERO } else { quiet + step };
    }
    stop.cancel();
}
