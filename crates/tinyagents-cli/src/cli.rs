//! The command line's arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Run agents files, watch their calls, approve, resume and recover runs.
#[derive(Debug, Parser)]
#[command(name = "tinyagents", version, about, long_about = None)]
pub(crate) struct Cli {
    /// The store directory (ledger, sessions, run records). For `run`,
    /// the agents file's `[store] dir` when not given; otherwise
    /// `.tinyagents` in the current directory.
    #[arg(long, global = true, env = "TINYAGENTS_STORE", value_name = "DIR")]
    pub(crate) store: Option<PathBuf>,
    /// One JSON object per line (events, rows, records) instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Runs the main agent of an agents file on an input.
    Run {
        /// The agents file (TOML).
        file: PathBuf,
        /// What to ask.
        input: String,
        /// Run in this session: the conversation goes on from the last run
        /// in it, and is kept for the next.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// How to show the run.
        #[arg(long, value_enum, default_value_t = Output::Auto)]
        output: Output,
        /// Never ask at the terminal: a run that waits for a person exits
        /// with code 3.
        #[arg(long)]
        no_input: bool,
    },
    /// Decides the waiting calls of a run (all of them, or those named).
    Approve {
        /// The run.
        run: String,
        /// Only this call (repeatable).
        #[arg(long = "call", value_name = "ID")]
        calls: Vec<String>,
        /// Deny instead of approving.
        #[arg(long)]
        deny: bool,
        /// Why (what the model reads for a denied call).
        #[arg(long, requires = "deny")]
        reason: Option<String>,
    },
    /// Resumes a run whose waiting calls are all decided.
    Resume {
        /// The run.
        run: String,
        /// How to show the run.
        #[arg(long, value_enum, default_value_t = Output::Auto)]
        output: Output,
        /// Never ask at the terminal.
        #[arg(long)]
        no_input: bool,
    },
    /// Lists the runs: the command line's records and the ledger's
    /// unfinished runs.
    Runs,
    /// Prints a run's call tree from its ledger rows.
    Show {
        /// The run.
        run: String,
    },
    /// Recovers a run whose process died: settled calls answer from the
    /// ledger, calls in doubt go to their tools, and the run goes on.
    Recover {
        /// The run.
        run: String,
        /// The agents file to build the agents from (the one the run was
        /// started with, by default).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// How to show the run.
        #[arg(long, value_enum, default_value_t = Output::Auto)]
        output: Output,
        /// Never ask at the terminal.
        #[arg(long)]
        no_input: bool,
    },
    /// Lists sessions, or prints one's transcript (and its child sessions').
    Sessions {
        /// The session to print.
        id: Option<String>,
    },
    /// Checks an agents file: reads it, starts its MCP servers and builds
    /// its agents, then says what each has.
    Check {
        /// The agents file.
        file: PathBuf,
    },
    /// The runs queue of a PostgreSQL database, whose workers run the
    /// runs: queue one, list them, show one, decide a waiting one's calls.
    Queue {
        /// The database: a PostgreSQL connection string
        /// (`postgres://user:pass@host/db` or `host=… dbname=…`).
        #[arg(
            long,
            global = true,
            env = "TINYAGENTS_DATABASE_URL",
            hide_env_values = true,
            value_name = "URL"
        )]
        db: Option<String>,
        /// What to do.
        #[command(subcommand)]
        command: QueueCommand,
    },
}

/// The commands of `queue`.
#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// Queues a run of INPUT for the workers and prints its id.
    Enqueue {
        /// What to ask.
        input: String,
        /// The run's id (a new one by default).
        #[arg(long, value_name = "RUN")]
        id: Option<String>,
    },
    /// Lists the runs, oldest first, and how many are in each status.
    List {
        /// At most this many runs.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u32,
    },
    /// Prints a run and the calls it waits on.
    Show {
        /// The run.
        run: String,
    },
    /// Decides every waiting call of a run awaiting approval and queues it
    /// again: a worker resumes it.
    Approve {
        /// The run.
        run: String,
        /// This call (repeatable): the queue takes every waiting call's
        /// decision at once, so name them all; without it, all of them.
        #[arg(long = "call", value_name = "ID")]
        calls: Vec<String>,
        /// Deny instead of approving.
        #[arg(long)]
        deny: bool,
        /// Why (what the model reads for a denied call).
        #[arg(long, requires = "deny")]
        reason: Option<String>,
    },
}

/// How a run is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// The live tree on a terminal, JSON lines otherwise.
    Auto,
    /// The live tree.
    Live,
    /// The tree, printed once at the end.
    Tree,
    /// One JSON event per line.
    Json,
}
