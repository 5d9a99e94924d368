//! The commands, each a plain async function returning its exit code.

mod approve;
mod check;
mod console;
mod hold;
mod inspect;
mod prompt;
mod queue;
mod run;
mod segment;
mod spending;
mod worker;

use std::io::IsTerminal as _;

use tinyagents::core::{ErrorSource, RunId};
use tinyagents::runs::{RunRecord, RunStoreError};

use crate::cli::{Cli, Command, Showing};
use crate::exit;
use crate::file::FileError;
use crate::store::{Place, Stores};
use crate::view::Mode;

/// A refusal that is the invocation's fault (exit 2): a bad connection
/// string, a run or call that is not there, an id taken.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct BadInput {
    /// What is refused, and why.
    message: String,
    /// The error that refused it (a run store's, the connection string
    /// parser's), when one did; `message` already says it.
    #[source]
    source: Option<ErrorSource>,
}

impl BadInput {
    /// The refusal `message`, as an error.
    pub(crate) fn error(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Self {
            message: message.into(),
            source: None,
        })
    }

    /// The refusal `message` that `source` caused, as an error.
    pub(crate) fn caused(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> anyhow::Error {
        anyhow::Error::new(Self {
            message: message.into(),
            source: Some(ErrorSource::new(source)),
        })
    }
}

/// Runs the command `cli` names.
pub(crate) async fn dispatch(cli: Cli) -> u8 {
    let place = |loaded| Place::choose(cli.db.as_deref(), cli.store.as_deref(), loaded);
    let result = match &cli.command {
        Command::Run {
            file,
            input,
            session,
            show,
        } => {
            let how = How::new(*show, cli.json);
            run::run(file, input, session.as_deref(), &cli, how).await
        }
        Command::Resume {
            run,
            show,
            accept_changed_file,
        } => {
            let how = How::new(*show, cli.json);
            run::resume(run, place(None), how, *accept_changed_file).await
        }
        Command::Recover {
            run,
            file,
            show,
            accept_changed_file,
        } => {
            let how = How::new(*show, cli.json);
            let options = run::RecoverOptions {
                file: file.as_deref(),
                accept_changed_file: *accept_changed_file,
            };
            run::recover(run, place(None), how, options).await
        }
        Command::Approve(deciding) => approve::approve(place(None), deciding, cli.json).await,
        Command::Runs { in_doubt: true, .. } => inspect::in_doubt(place(None), cli.json).await,
        Command::Runs { status, limit, .. } => {
            inspect::runs(place(None), status, *limit, cli.json).await
        }
        Command::Show { run, follow } => inspect::show(place(None), run, *follow, cli.json).await,
        Command::Sessions { id } => inspect::sessions(place(None), id.as_deref(), cli.json).await,
        Command::Check { file, write_lock } => check::check(file, *write_lock, &cli).await,
        Command::Worker { .. } => worker::worker(&cli).await,
        Command::Console { .. } => console::console(&cli, place(None)).await,
        Command::Queue { command } => queue::queue(place(None), command, cli.json).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            if let Some(file) = error.downcast_ref::<FileError>() {
                eprintln!("error: {file}");
                return exit::USAGE;
            }
            eprintln!("error: {}", tinyagents::core::error_chain(error.as_ref()));
            if error.downcast_ref::<BadInput>().is_some() {
                return exit::USAGE;
            }
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
    fn new(show: Showing, json: bool) -> Self {
        use crate::cli::Output;
        let terminal = std::io::stdout().is_terminal();
        let mode = match (show.output, json) {
            (_, true) | (Output::Json, _) => Mode::Json,
            (Output::Live, _) => Mode::Live,
            (Output::Tree, _) => Mode::Plain,
            (Output::Auto, false) if terminal => Mode::Live,
            (Output::Auto, false) => Mode::Json,
        };
        let interactive =
            !show.no_input && mode == Mode::Live && terminal && std::io::stdin().is_terminal();
        Self { mode, interactive }
    }
}

/// The record of `run_id`, or an error saying there is none (bad input).
pub(crate) async fn record(stores: &Stores, run_id: &str) -> anyhow::Result<RunRecord> {
    match stores.runs.get(&RunId::new(run_id)).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(BadInput::error(format!(
            "no run '{run_id}' in {} (`tinyagents runs` lists them)",
            stores.place.shown()
        ))),
        Err(error) => Err(refusal(error)),
    }
}

/// A run store's refusal as the command line reports it: a run or call
/// that is not there, an id taken or a decision made already is bad input;
/// the rest (an edited record among them) is a failure.
pub(crate) fn refusal(error: RunStoreError) -> anyhow::Error {
    match error {
        RunStoreError::NotFound { .. }
        | RunStoreError::Exists { .. }
        | RunStoreError::NotWaiting { .. }
        | RunStoreError::AlreadyDecided { .. } => BadInput::caused(error.to_string(), error),
        other => anyhow::Error::new(other),
    }
}

/// A status as people read it: `awaiting approval`.
pub(crate) fn said(status: tinyagents::runs::RecordStatus) -> String {
    status.as_str().replace('_', " ")
}
