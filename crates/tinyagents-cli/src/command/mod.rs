//! The commands, each a plain async function returning its exit code.

mod approve;
mod check;
mod inspect;
mod prompt;
mod queue;
mod run;
mod segment;

use std::io::IsTerminal as _;
use std::path::Path;

use crate::cli::{Cli, Command, Output};
use crate::exit;
use crate::file::FileError;
use crate::store::{RunRecord, RunStore, StorePaths};
use crate::view::Mode;

/// Runs the command `cli` names.
pub(crate) async fn dispatch(cli: Cli) -> u8 {
    let store = cli.store.as_deref();
    let result = match cli.command {
        Command::Run {
            file,
            input,
            session,
            output,
            no_input,
        } => {
            let how = How::new(output, cli.json, no_input);
            run::run(&file, &input, session.as_deref(), store, how).await
        }
        Command::Resume {
            run,
            output,
            no_input,
        } => run::resume(&run, store, How::new(output, cli.json, no_input)).await,
        Command::Recover {
            run,
            file,
            output,
            no_input,
        } => {
            let how = How::new(output, cli.json, no_input);
            run::recover(&run, file.as_deref(), store, how).await
        }
        Command::Approve {
            run,
            calls,
            deny,
            reason,
        } => approve::approve(&run, &calls, deny, reason.as_deref(), store, cli.json),
        Command::Runs => inspect::runs(store, cli.json).await,
        Command::Show { run } => inspect::show(&run, store, cli.json).await,
        Command::Sessions { id } => inspect::sessions(id.as_deref(), store, cli.json).await,
        Command::Check { file } => check::check(&file, store).await,
        Command::Queue { db, command } => queue::queue(db.as_deref(), command, cli.json).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            if let Some(file) = error.downcast_ref::<FileError>() {
                eprintln!("error: {file}");
                return exit::USAGE;
            }
            if error.downcast_ref::<queue::BadInput>().is_some() {
                eprintln!("error: {error:#}");
                return exit::USAGE;
            }
            eprintln!("error: {error:#}");
            exit::FAILED
        }
    }
}

/// How a command that runs an agent shows it and whether it may ask.
#[derive(Debug, Clone, Copy)]
pub(crate) struct How {
    /// The view.
    pub(crate) mode: Mode,
    /// Whether a person at the terminal may be asked.
    pub(crate) interactive: bool,
}

impl How {
    fn new(output: Output, json: bool, no_input: bool) -> Self {
        let terminal = std::io::stdout().is_terminal();
        let mode = match (output, json) {
            (_, true) | (Output::Json, _) => Mode::Json,
            (Output::Live, _) => Mode::Live,
            (Output::Tree, _) => Mode::Plain,
            (Output::Auto, false) if terminal => Mode::Live,
            (Output::Auto, false) => Mode::Json,
        };
        let interactive =
            !no_input && mode == Mode::Live && terminal && std::io::stdin().is_terminal();
        Self { mode, interactive }
    }
}

/// The store of the commands that take no agents file.
fn store_paths(store: Option<&Path>) -> StorePaths {
    StorePaths::in_dir(store.unwrap_or_else(|| Path::new(crate::store::DEFAULT_STORE_DIR)))
}

/// The run records of `paths`, which must exist.
fn open_records(paths: &StorePaths) -> anyhow::Result<RunStore> {
    if !paths.runs.exists() {
        anyhow::bail!(
            "no run records at {} (run `tinyagents run FILE INPUT` first, or pass --store DIR)",
            paths.runs.display()
        );
    }
    RunStore::open(&paths.runs)
}

/// The record of `run_id`, or an error saying there is none.
fn record(records: &RunStore, paths: &StorePaths, run_id: &str) -> anyhow::Result<RunRecord> {
    records.get(run_id)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no run '{run_id}' in {} (`tinyagents runs` lists them)",
            paths.runs.display()
        )
    })
}
