//! `run`, `resume` and `recover`: the commands that run an agent.

use std::path::Path;

use anyhow::Context as _;
use tinyagents::ledger::{EffectLedger as _, RunState};
use tinyagents::orchestrator::SessionScope;
use tinyagents::prelude::{ResumeOptions, RunId, RunRequest};

use super::segment::Runner;
use super::{How, open_records, record, store_paths};
use crate::build::{Team, build};
use crate::exit;
use crate::file::{self, Loaded};
use crate::signal::Interrupt;
use crate::store::{RecordStatus, RunStore, StorePaths, process_alive};
use crate::telemetry;
use crate::view::Watch;

/// `tinyagents run FILE INPUT`.
pub(crate) async fn run(
    path: &Path,
    input: &str,
    session: Option<&str>,
    store: Option<&Path>,
    how: How,
) -> anyhow::Result<u8> {
    let loaded = file::load(path)?;
    let paths = StorePaths::of_file(&loaded, store);
    paths.create()?;
    let telemetry = telemetry::install(&loaded)?;
    let team = build(&loaded, &paths).await?;
    let mut records = RunStore::open(&paths.runs)?;
    let run_id = RunId::generate();
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    records.insert(run_id.as_str(), &loaded.main, &absolute, session)?;
    let interrupt = Interrupt::install();
    let mut watch = Watch::new(how.mode);
    if store.is_none() && loaded.file.store.dir.is_some() {
        watch.note(&format!(
            "store: {} (pass --store {0} to approve, resume or show this run)",
            paths.dir.display()
        ));
    }
    let request = RunRequest::new(input)
        .with_run_id(run_id.clone())
        .with_cancellation(interrupt.token());
    let scope = session.map(SessionScope::new);
    let code = {
        let handle = match &scope {
            Some(scope) => team.main.start_in_session(scope, request),
            None => team.main.start(request),
        };
        let mut runner = runner(&team, &loaded, &mut records, &mut watch, &interrupt, how);
        runner.finish(run_id.as_str(), handle).await
    };
    let code = team.close_with(code).await;
    telemetry::finish(telemetry).await;
    Ok(code)
}

/// `tinyagents resume RUN`.
pub(crate) async fn resume(run_id: &str, store: Option<&Path>, how: How) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    let mut records = open_records(&paths)?;
    let record = record(&records, &paths, run_id)?;
    let Some(suspended) = record.suspended.clone() else {
        anyhow::bail!(
            "run '{run_id}' does not wait for a decision (it is {})",
            record.status.as_str().replace('_', " ")
        );
    };
    let undecided: Vec<String> = suspended
        .pending()
        .filter(|p| !record.decisions.iter().any(|d| d.call_id == p.call.id))
        .map(|p| format!("{} ({})", p.call.id, p.call.name))
        .collect();
    if !undecided.is_empty() {
        anyhow::bail!(
            "run '{run_id}' has calls without a decision: {}; decide with \
             `tinyagents approve {run_id} --call ID` (or `--deny`)",
            undecided.join(", ")
        );
    }
    let loaded = file::load(&record.file)?;
    let paths = StorePaths::of_file(&loaded, Some(&paths.dir));
    let telemetry = telemetry::install(&loaded)?;
    let team = build(&loaded, &paths).await?;
    records.mark_running(run_id)?;
    let interrupt = Interrupt::install();
    let mut watch = Watch::new(how.mode);
    let options = ResumeOptions {
        cancel: Some(interrupt.token()),
        ..ResumeOptions::default()
    };
    let code = {
        let handle = team
            .main
            .start_resume(suspended, &record.decisions, options);
        let mut runner = runner(&team, &loaded, &mut records, &mut watch, &interrupt, how);
        runner.finish(run_id, handle).await
    };
    let code = team.close_with(code).await;
    telemetry::finish(telemetry).await;
    Ok(code)
}

/// `tinyagents recover RUN`.
pub(crate) async fn recover(
    run_id: &str,
    file_path: Option<&Path>,
    store: Option<&Path>,
    how: How,
) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    let mut records = open_records(&paths)?;
    let record = records.get(run_id)?;
    if let Some(record) = &record
        && record.status == RecordStatus::Running
        && record.pid != std::process::id()
        && process_alive(record.pid)
    {
        anyhow::bail!(
            "run '{run_id}' is running in process {} (recover it once that process is gone)",
            record.pid
        );
    }
    if let Some(record) = &record
        && record.status == RecordStatus::AwaitingApproval
    {
        anyhow::bail!(
            "run '{run_id}' waits for a decision, it did not crash: `tinyagents approve {run_id}`, \
             then `tinyagents resume {run_id}`"
        );
    }
    let file_path = match (file_path, &record) {
        (Some(path), _) => path.to_owned(),
        (None, Some(record)) => record.file.clone(),
        (None, None) => anyhow::bail!(
            "run '{run_id}' was not started by the command line: pass the agents file that runs \
             it with --file FILE"
        ),
    };
    let loaded = file::load(&file_path)?;
    let paths = StorePaths::of_file(&loaded, Some(&paths.dir));
    let telemetry = telemetry::install(&loaded)?;
    let team = build(&loaded, &paths).await?;
    let id = RunId::new(run_id);
    let state = team
        .ledger
        .run_state(&id)
        .await
        .context("reading the run's state in the ledger")?;
    let code = match state {
        RunState::Unknown => {
            let _ = team.close().await;
            anyhow::bail!(
                "the ledger {} holds nothing of run '{run_id}'",
                paths.ledger.display()
            );
        }
        RunState::Finished => match reconcile(&team, &id).await {
            Ok(code) => code,
            Err(error) => {
                eprintln!("error: {error:#}");
                exit::FAILED
            }
        },
        RunState::Open => {
            if record.is_none() {
                records.insert(run_id, &loaded.main, &file_path, None)?;
            }
            records.mark_running(run_id)?;
            let interrupt = Interrupt::install();
            let mut watch = Watch::new(how.mode);
            let options = ResumeOptions {
                cancel: Some(interrupt.token()),
                ..ResumeOptions::default()
            };
            let handle = team.main.start_recover(&id, options);
            let mut runner = runner(&team, &loaded, &mut records, &mut watch, &interrupt, how);
            runner.finish(run_id, handle).await
        }
    };
    let code = team.close_with(code).await;
    telemetry::finish(telemetry).await;
    Ok(code)
}

/// A finished run with calls in doubt: asks their tools again.
async fn reconcile(team: &Team, run_id: &RunId) -> anyhow::Result<u8> {
    let found = team
        .main
        .harness()
        .reconcile(run_id)
        .await
        .with_context(|| format!("reconciling run '{run_id}'"))?;
    crate::view::out(&format!(
        "run {run_id} had finished; {} call(s) in doubt were put to their tools:",
        found.len()
    ));
    for call in &found {
        crate::view::out(&format!(
            "  {} {}: {} ({})",
            call.call_id, call.tool_name, call.effect, call.note
        ));
    }
    Ok(exit::OK)
}

fn runner<'a>(
    team: &'a Team,
    loaded: &Loaded,
    records: &'a mut RunStore,
    watch: &'a mut Watch,
    interrupt: &'a Interrupt,
    how: How,
) -> Runner<'a> {
    Runner {
        agent: &team.main,
        records,
        watch,
        interrupt,
        interactive: how.interactive,
        show_arguments: loaded.file.capture.tool_io,
    }
}
