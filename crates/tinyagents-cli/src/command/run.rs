//! `run`, `resume` and `recover`: the commands that run an agent. Each
//! takes the run in the run store (a new record held by this process, or a
//! claim naming the epoch it read), builds the agents from the agents file
//! the run was started with (refusing one whose content changed, unless
//! told to accept it), and runs the run's segments to their end.

use std::path::Path;

use anyhow::Context as _;
use tinyagents::core::RunId;
use tinyagents::ledger::{RunState, Timestamp};
use tinyagents::orchestrator::SessionScope;
use tinyagents::prelude::RunRequest;
use tinyagents::runs::{NewRun, NextSegment, RecordStatus, RunRecord, StoredRequest};

use super::segment::Runner;
use super::{How, hold, refusal, said};
use crate::build::Toolbox;
use crate::cli::Cli;
use crate::exit;
use crate::file::{self, Loaded};
use crate::signal::Interrupt;
use crate::store::{Place, Stores, person};
use crate::telemetry;
use crate::view::Watch;

/// `tinyagents run FILE INPUT`.
pub(crate) async fn run(
    path: &Path,
    input: &str,
    session: Option<&str>,
    cli: &Cli,
    how: How,
) -> anyhow::Result<u8> {
    let loaded = file::load(path)?;
    let place = Place::choose(cli.db.as_deref(), cli.store.as_deref(), Some(&loaded));
    let from_file = cli.db.is_none() && cli.store.is_none() && loaded.file.store.dir.is_some();
    let stores = Stores::open(place, true).await?;
    let telemetry = telemetry::install(&loaded)?;
    let toolbox = Toolbox::connect(&loaded, &stores.logs).await?;
    let run_id = RunId::generate();
    let request = RunRequest::new(input).with_run_id(run_id.clone());
    let mut new = NewRun::new(&loaded.main, &request).with_file(loaded.identity.clone());
    if let Some(session) = session {
        new = new.with_session(session);
    }
    let hold = hold::this_process();
    let claim = match stores.runs.create(new, Some(&hold)).await {
        Ok(claim) => claim,
        Err(error) => {
            toolbox.close().await;
            return Err(refusal(error));
        }
    };
    let interrupt = Interrupt::install();
    let mut watch = Watch::new(how.mode).priced(currency(&loaded));
    if from_file {
        watch.note(&format!(
            "store: {} (pass --store {0} to approve, resume or show this run)",
            stores.place.shown()
        ));
    }
    let scope = session.map(SessionScope::new);
    let code = Runner {
        stores: &stores,
        loaded: &loaded,
        toolbox: &toolbox,
        watch: &mut watch,
        interrupt: &interrupt,
        interactive: how.interactive,
        hold,
    }
    .finish(claim, Some(NextSegment::Start(request)), scope.as_ref())
    .await;
    Ok(close(toolbox, &stores, telemetry, code).await)
}

/// `tinyagents resume RUN`.
pub(crate) async fn resume(
    run_id: &str,
    place: Place,
    how: How,
    accept_changed_file: bool,
) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let record = super::record(&stores, run_id).await?;
    match record.status {
        RecordStatus::Queued if record.is_decided() => {}
        RecordStatus::AwaitingApproval => {
            let undecided: Vec<String> = stores
                .runs
                .approvals(&record.run_id)
                .await?
                .into_iter()
                .filter(|c| c.suspension == record.suspension && c.decision.is_none())
                .map(|c| format!("{} ({})", c.call_id, c.tool))
                .collect();
            anyhow::bail!(
                "run '{run_id}' has calls without a decision: {}; decide with \
                 `tinyagents approve {run_id}` (or `--call ID`, `--deny-call ID`)",
                undecided.join(", ")
            );
        }
        RecordStatus::Running if !record.holder_gone(Timestamp::now()) => {
            anyhow::bail!("run '{run_id}' is running {}", holder(&record));
        }
        RecordStatus::Running | RecordStatus::Failed => anyhow::bail!(
            "run '{run_id}' does not wait for a decision (it is {}): `tinyagents recover \
             {run_id}` goes on from its ledger",
            shown_status(&record)
        ),
        other => anyhow::bail!(
            "run '{run_id}' does not wait for a decision (it is {})",
            said(other)
        ),
    }
    let loaded = load_for(&stores, &record, None, accept_changed_file).await?;
    continue_run(stores, &loaded, &record, how).await
}

/// What `recover` may be told.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecoverOptions<'a> {
    /// The agents file to build from instead of the run's.
    pub(crate) file: Option<&'a Path>,
    /// Build from a changed agents file.
    pub(crate) accept_changed_file: bool,
}

/// `tinyagents recover RUN`.
pub(crate) async fn recover(
    run_id: &str,
    place: Place,
    how: How,
    options: RecoverOptions<'_>,
) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let id = RunId::new(run_id);
    let record = match stores.runs.get(&id).await.map_err(refusal)? {
        Some(record) => record,
        None => adopt(&stores, &id, options.file).await?,
    };
    match record.status {
        RecordStatus::Running if !record.holder_gone(Timestamp::now()) => {
            anyhow::bail!(
                "run '{run_id}' is running {}: recover it once that process is gone",
                holder(&record)
            );
        }
        RecordStatus::AwaitingApproval => anyhow::bail!(
            "run '{run_id}' waits for a decision, it did not crash: `tinyagents approve \
             {run_id}`, then `tinyagents resume {run_id}`"
        ),
        RecordStatus::Completed | RecordStatus::Terminated | RecordStatus::LimitReached => {
            return reconcile(stores, &record, options.file).await;
        }
        RecordStatus::Cancelled if stores.ledger.run_state(&id).await? == RunState::Finished => {
            return reconcile(stores, &record, options.file).await;
        }
        _ => {}
    }
    let loaded = load_for(&stores, &record, options.file, options.accept_changed_file).await?;
    continue_run(stores, &loaded, &record, how).await
}

/// A run the ledger has and the run store does not (another program
/// started it on the same ledger): recorded, queued, from `file`.
async fn adopt(stores: &Stores, run: &RunId, file: Option<&Path>) -> anyhow::Result<RunRecord> {
    let Some(file) = file else {
        anyhow::bail!(
            "run '{run}' was not started by the command line: pass the agents file that runs \
             it with --file FILE"
        );
    };
    if stores.ledger.run_state(run).await? == RunState::Unknown {
        anyhow::bail!(
            "the ledger in {} holds nothing of run '{run}'",
            stores.place.shown()
        );
    }
    let loaded = file::load(file)?;
    let new = NewRun {
        run_id: run.clone(),
        agent: loaded.main.clone(),
        file: Some(loaded.identity.clone()),
        session: None,
        request: StoredRequest::default(),
    };
    stores.runs.create(new, None).await.map_err(refusal)?;
    super::record(stores, run.as_str()).await
}

/// The agents file `record` was started from (or `file`), refused when its
/// content changed since unless `accept`, which the run's history keeps.
async fn load_for(
    stores: &Stores,
    record: &RunRecord,
    file: Option<&Path>,
    accept: bool,
) -> anyhow::Result<Loaded> {
    let run = &record.run_id;
    let path = match (file, &record.file) {
        (Some(path), _) => path.to_owned(),
        (None, Some(started)) => std::path::PathBuf::from(&started.path),
        (None, None) => anyhow::bail!(
            "run '{run}' was not started from an agents file: pass the one that runs it with --file FILE"
        ),
    };
    let loaded = file::load(&path)?;
    if let Some(started) = &record.file
        && started.sha256 != loaded.identity.sha256
    {
        if !accept {
            anyhow::bail!(
                "the agents file {} changed since run '{run}' started (sha256 {} then, {} now): \
                 going on would build other agents than the run started with. Check the change, \
                 then pass --accept-changed-file to build from the file as it is now (the run's \
                 history records it)",
                path.display(),
                short(&started.sha256),
                short(&loaded.identity.sha256)
            );
        }
        stores
            .runs
            .accept_file(run, &loaded.identity, &person(None))
            .await
            .map_err(refusal)?;
    }
    Ok(loaded)
}

/// Takes the run as the epoch read in `record` and runs it to its end.
async fn continue_run(
    stores: Stores,
    loaded: &Loaded,
    record: &RunRecord,
    how: How,
) -> anyhow::Result<u8> {
    let telemetry = telemetry::install(loaded)?;
    let toolbox = Toolbox::connect(loaded, &stores.logs).await?;
    let hold = hold::this_process();
    let claim = match stores.runs.claim(&record.run_id, record.epoch, &hold).await {
        Ok(claim) => claim,
        Err(error) => {
            toolbox.close().await;
            return Err(refusal(error));
        }
    };
    let interrupt = Interrupt::install();
    let mut watch = Watch::new(how.mode).priced(currency(loaded));
    let rows = super::inspect::tree_rows(stores.ledger.as_ref(), &record.run_id).await?;
    watch.seed(record.run_id.as_str(), &record.agent, &rows);
    let code = Runner {
        stores: &stores,
        loaded,
        toolbox: &toolbox,
        watch: &mut watch,
        interrupt: &interrupt,
        interactive: how.interactive,
        hold,
    }
    .finish(claim, None, None)
    .await;
    Ok(close(toolbox, &stores, telemetry, code).await)
}

/// A finished run with calls in doubt: asks their tools again.
async fn reconcile(stores: Stores, record: &RunRecord, file: Option<&Path>) -> anyhow::Result<u8> {
    let run = &record.run_id;
    let in_doubt = stores.ledger.unresolved(run).await?;
    if in_doubt.is_empty() {
        anyhow::bail!(
            "run '{run}' has finished (it is {}): there is nothing to recover",
            said(record.status)
        );
    }
    let loaded = load_for(&stores, record, file, false).await?;
    let toolbox = Toolbox::connect(&loaded, &stores.logs).await?;
    let found = match toolbox.agent(
        &loaded,
        std::sync::Arc::clone(&stores.ledger),
        std::sync::Arc::clone(&stores.sessions),
    ) {
        Ok(agent) => agent
            .harness()
            .reconcile(run)
            .await
            .with_context(|| format!("reconciling run '{run}'")),
        Err(error) => Err(error),
    };
    toolbox.close().await;
    let found = found?;
    crate::view::out(&format!(
        "run {run} had finished; {} call(s) in doubt were put to their tools:",
        found.len()
    ));
    for call in &found {
        crate::view::out(&format!(
            "  {} {}: {} ({})",
            call.call_id, call.tool_name, call.effect, call.note
        ));
    }
    stores.close().await?;
    Ok(exit::OK)
}

/// Stops the MCP servers, makes the ledger durable and flushes the spans;
/// `code`, or [`exit::FAILED`] when the ledger could not be made durable.
async fn close(
    toolbox: Toolbox,
    stores: &Stores,
    telemetry: Option<telemetry::Telemetry>,
    code: u8,
) -> u8 {
    toolbox.close().await;
    let code = match stores.close().await {
        Ok(()) => code,
        Err(error) => {
            eprintln!("error: {}", tinyagents::core::error_chain(error.as_ref()));
            exit::FAILED
        }
    };
    telemetry::finish(telemetry).await;
    code
}

/// The currency the file's prices are in, when it has prices.
pub(crate) fn currency(loaded: &Loaded) -> Option<&str> {
    loaded
        .prices
        .as_deref()
        .map(|table| table.currency.as_str())
}

/// Who holds a running run, as a person reads it.
fn holder(record: &RunRecord) -> String {
    record.holder.as_ref().map_or_else(
        || "held by nobody".to_owned(),
        |h| {
            if h.host == tinyagents::runs::host_name() {
                format!("in process {}", h.pid)
            } else {
                format!("held by {}", h.owner)
            }
        },
    )
}

/// A record's status as the listings show it: a running run whose holder
/// is gone is interrupted.
pub(crate) fn shown_status(record: &RunRecord) -> String {
    if record.status == RecordStatus::Running && record.holder_gone(Timestamp::now()) {
        return "interrupted".to_owned();
    }
    if record.is_decided() {
        return "decided".to_owned();
    }
    record.status.as_str().to_owned()
}

/// The first 12 hex digits of a hash.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
