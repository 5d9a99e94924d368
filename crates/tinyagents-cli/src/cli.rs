//! The command line's arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run agents files, watch their calls, approve, resume and recover runs.
#[derive(Debug, Parser)]
#[command(name = "tinyagents", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Where the runs are kept: a directory (ledger, sessions and run
    /// records as SQLite files). For `run`, the agents file's `[store]`
    /// when not given; otherwise `.tinyagents` in the current directory.
    #[arg(long, global = true, env = "TINYAGENTS_STORE", value_name = "DIR")]
    pub(crate) store: Option<PathBuf>,
    /// Keep the runs in PostgreSQL instead (ledger, sessions and run
    /// records): `postgres://user:pass@host/db` or `host=… dbname=…`.
    /// Takes precedence over `--store` and the file's `[store]`.
    #[arg(
        long,
        global = true,
        env = "TINYAGENTS_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) db: Option<String>,
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
        #[command(flatten)]
        show: Showing,
    },
    /// Decides the waiting calls of a run: all of them, or those named,
    /// some approved and others denied in one step.
    Approve(Deciding),
    /// Resumes a run whose waiting calls are all decided.
    Resume {
        /// The run.
        run: String,
        /// How to show the run.
        #[command(flatten)]
        show: Showing,
        /// Build the agents from the agents file as it is now even if it
        /// changed since the run started (recorded in the run's history).
        #[arg(long)]
        accept_changed_file: bool,
    },
    /// Lists the runs and how many calls of each are in doubt.
    Runs {
        /// Only runs in this status (repeatable): queued, running,
        /// awaiting_approval, completed, terminated, limit_reached,
        /// cancelled, failed.
        #[arg(long, value_name = "STATUS")]
        status: Vec<String>,
        /// At most this many runs, oldest first.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        limit: u32,
        /// List the calls in doubt across every run instead: run, call,
        /// tool, idempotency key, age (what a person looks at to find out
        /// whether an effect happened).
        #[arg(long, conflicts_with = "status")]
        in_doubt: bool,
    },
    /// Prints a run's whole call tree (every segment) from its ledger rows,
    /// its waiting calls, their decisions and its history.
    Show {
        /// The run.
        run: String,
        /// Keep printing the tree as it changes until the run ends or
        /// waits for a person.
        #[arg(long)]
        follow: bool,
    },
    /// Recovers a run whose process died (or that failed part way):
    /// settled calls answer from the ledger, calls in doubt go to their
    /// tools, decisions already made are used, and the run goes on.
    Recover {
        /// The run.
        run: String,
        /// The agents file to build the agents from (the one the run was
        /// started with, by default).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// How to show the run.
        #[command(flatten)]
        show: Showing,
        /// Build the agents from the agents file as it is now even if it
        /// changed since the run started (recorded in the run's history).
        #[arg(long)]
        accept_changed_file: bool,
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
        /// Pin what its MCP servers list now in `mcp.lock` beside it
        /// (after reviewing them): later connects fail on any change.
        #[arg(long)]
        write_lock: bool,
    },
    /// Serves the web console over the store: runs, each run's live call
    /// tree, the approval inbox, the calls in doubt and the sessions. It
    /// prints the address to open (with its token) and serves until Ctrl-C.
    Console {
        /// Where to listen. A loopback address by default: anything else
        /// lets other machines reach the console (the token is then all
        /// that stands in the way, over plain HTTP).
        #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8740")]
        listen: String,
        /// Who decides and resolves from this console (recorded with each
        /// decision and finding): `$USER` by default.
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// Leave decided runs for the workers instead of resuming them
        /// from this console (`tinyagents resume`, in a process of its own).
        #[arg(long)]
        leave_to_workers: bool,
    },
    /// Runs the queued runs of an agents file as a worker: claims them
    /// from the PostgreSQL store (`--db`), holds each under a lease,
    /// recovers runs whose worker died, resumes decided ones; until Ctrl-C.
    Worker {
        /// The agents file whose runs it takes (runs started from the same
        /// content only).
        file: PathBuf,
        /// Runs at once in this worker.
        #[arg(long, value_name = "N", default_value_t = 4)]
        concurrency: usize,
        /// How long a claim holds a run without a renewal, in seconds.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        lease_secs: u64,
        /// Its name in the runs' records (default: pid and host).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Stop once nothing is queued or running for this many seconds
        /// (default: run until Ctrl-C).
        #[arg(long, value_name = "SECS")]
        exit_when_idle: Option<u64>,
    },
    /// The runs a worker takes: queue one, list them, show one, decide a
    /// waiting one's calls (the store of `--db`, or `--store`).
    Queue {
        /// What to do.
        #[command(subcommand)]
        command: QueueCommand,
    },
}

/// How a command that runs an agent shows it.
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct Showing {
    /// How to show the run.
    #[arg(long, value_enum, default_value_t = Output::Auto)]
    pub(crate) output: Output,
    /// Never ask at the terminal: a run that waits for a person exits
    /// with code 3.
    #[arg(long)]
    pub(crate) no_input: bool,
}

/// What `approve` decides.
#[derive(Debug, Clone, Args)]
pub(crate) struct Deciding {
    /// The run.
    pub(crate) run: String,
    /// Approve this call (repeatable). Without `--call` and `--deny-call`,
    /// every waiting call is decided.
    #[arg(long = "call", value_name = "ID")]
    pub(crate) calls: Vec<String>,
    /// Deny this call (repeatable), in the same step.
    #[arg(long = "deny-call", value_name = "ID")]
    pub(crate) deny_calls: Vec<String>,
    /// Deny the calls named with `--call` (or, with none named, every
    /// waiting call) instead of approving them.
    #[arg(long)]
    pub(crate) deny: bool,
    /// Why (what the model reads for a denied call; kept with every
    /// decision of this step).
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Who decides (recorded with each decision; `$USER` by default).
    #[arg(long, value_name = "NAME")]
    pub(crate) by: Option<String>,
}

/// The commands of `queue`.
#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// Queues a run of the agents file's main agent on INPUT for the
    /// workers, and prints its id.
    Enqueue {
        /// The agents file (workers of the same content take the run).
        file: PathBuf,
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
    /// Prints a run, the calls it waits on, its decisions and history.
    Show {
        /// The run.
        run: String,
    },
    /// Decides waiting calls of a run (as `approve` does): once every one
    /// is decided, a worker resumes it.
    Approve(Deciding),
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
