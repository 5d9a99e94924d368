//! Where a file's ledger and session store live, and the command line's
//! own record of the runs it started: which agents file and agent, the
//! session, the status, the tokens, and for a run waiting for a person its
//! suspended state and the decisions made so far. The ledger stays the
//! record of what each call did; this is what another process needs to
//! build the same agents and go on.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rusqlite::{Connection, OptionalExtension, params};
use tinyagents::harness::{ApprovalDecision, SuspendedRun};
use tinyagents::ledger::Timestamp;
use tinyagents::prelude::Usage;

use crate::file::Loaded;

/// The directory of the stores when neither `--store` nor the file names
/// one: in the current directory.
pub(crate) const DEFAULT_STORE_DIR: &str = ".tinyagents";

/// The files of one store.
#[derive(Debug, Clone)]
pub(crate) struct StorePaths {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// The ledger (SQLite).
    pub(crate) ledger: PathBuf,
    /// The session store (SQLite).
    pub(crate) sessions: PathBuf,
    /// The command line's run records (SQLite).
    pub(crate) runs: PathBuf,
}

impl StorePaths {
    /// The store in `dir`, with the default file names.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            ledger: dir.join("ledger.db"),
            sessions: dir.join("sessions.db"),
            runs: dir.join("runs.db"),
        }
    }

    /// The store of `loaded`, unless `dir` (from `--store`) overrides its
    /// directory. Relative paths in the file start from the file's
    /// directory; the default directory is in the current directory.
    pub(crate) fn of_file(loaded: &Loaded, dir: Option<&Path>) -> Self {
        let store = &loaded.file.store;
        let dir = match (dir, &store.dir) {
            (Some(dir), _) => dir.to_owned(),
            (None, Some(named)) => loaded.dir.join(named.get_ref()),
            (None, None) => PathBuf::from(DEFAULT_STORE_DIR),
        };
        let mut paths = Self::in_dir(&dir);
        if let Some(ledger) = &store.ledger {
            paths.ledger = dir.join(ledger.get_ref());
        }
        if let Some(sessions) = &store.sessions {
            paths.sessions = dir.join(sessions.get_ref());
        }
        paths
    }

    /// Makes the directory.
    pub(crate) fn create(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating the store directory {}", self.dir.display()))
    }
}

/// How a run recorded by the command line stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordStatus {
    /// A process is running it (or died running it: see the ledger).
    Running,
    /// It waits for decisions (`approve`, then `resume`).
    AwaitingApproval,
    /// The model gave its answer.
    Completed,
    /// A tool ended it.
    Terminated,
    /// A limit stopped it.
    LimitReached,
    /// It was cancelled (Ctrl-C).
    Cancelled,
    /// It failed.
    Failed,
}

impl RecordStatus {
    /// The stored spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Completed => "completed",
            Self::Terminated => "terminated",
            Self::LimitReached => "limit_reached",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            Self::Running,
            Self::AwaitingApproval,
            Self::Completed,
            Self::Terminated,
            Self::LimitReached,
            Self::Cancelled,
            Self::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// One run the command line started.
#[derive(Debug, Clone)]
pub(crate) struct RunRecord {
    /// The run.
    pub(crate) run_id: String,
    /// The agent it runs.
    pub(crate) agent: String,
    /// The agents file (absolute).
    pub(crate) file: PathBuf,
    /// The session, for a run in one.
    pub(crate) session: Option<String>,
    /// How it stands.
    pub(crate) status: RecordStatus,
    /// When it was started (ms since the epoch).
    pub(crate) started_at_ms: u64,
    /// When the record last changed.
    pub(crate) updated_at_ms: u64,
    /// The process that last ran it.
    pub(crate) pid: u32,
    /// Tokens used.
    pub(crate) usage: Usage,
    /// The state of a run waiting for a person.
    pub(crate) suspended: Option<SuspendedRun>,
    /// The decisions made for its waiting calls.
    pub(crate) decisions: Vec<ApprovalDecision>,
    /// Why it failed.
    pub(crate) error: Option<String>,
}

/// The command line's run records, one SQLite file.
pub(crate) struct RunStore {
    connection: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    file TEXT NOT NULL,
    session TEXT,
    status TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    suspended TEXT,
    decisions TEXT NOT NULL,
    error TEXT
) STRICT;
";

/// The schema version this build writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

impl RunStore {
    /// Opens (or creates) the records at `path`. A file of a newer schema,
    /// or one that is not a database, is refused.
    pub(crate) fn open(path: &Path) -> anyhow::Result<Self> {
        let connection = Connection::open(path)
            .with_context(|| format!("opening the run records {}", path.display()))?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        let version: i64 = connection
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .with_context(|| format!("{} is not a run records database", path.display()))?;
        if version > SCHEMA_VERSION {
            anyhow::bail!(
                "{} holds run records of a newer schema ({version}; this build reads {SCHEMA_VERSION})",
                path.display()
            );
        }
        connection
            .execute_batch(SCHEMA)
            .with_context(|| format!("{} is not a run records database", path.display()))?;
        connection.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        Ok(Self { connection })
    }

    /// Records a run that starts now in this process.
    pub(crate) fn insert(
        &self,
        run_id: &str,
        agent: &str,
        file: &Path,
        session: Option<&str>,
    ) -> anyhow::Result<()> {
        let now = now_ms();
        self.connection.execute(
            "INSERT INTO runs (run_id, agent, file, session, status, started_at, updated_at, pid,
                               input_tokens, output_tokens, suspended, decisions, error)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5, ?6, 0, 0, NULL, '[]', NULL)",
            params![
                run_id,
                agent,
                file.to_string_lossy(),
                session,
                to_i64(now),
                std::process::id()
            ],
        )?;
        Ok(())
    }

    /// Marks a run as being run again by this process (resume, recover).
    pub(crate) fn mark_running(&self, run_id: &str) -> anyhow::Result<()> {
        self.connection.execute(
            "UPDATE runs SET status = 'running', pid = ?2, updated_at = ?3, error = NULL WHERE run_id = ?1",
            params![run_id, std::process::id(), to_i64(now_ms())],
        )?;
        Ok(())
    }

    /// Records how a run segment ended.
    pub(crate) fn finish(
        &self,
        run_id: &str,
        status: RecordStatus,
        usage: Usage,
        suspended: Option<&SuspendedRun>,
        error: Option<&str>,
    ) -> anyhow::Result<()> {
        let suspended = suspended.map(serde_json::to_string).transpose()?;
        self.connection.execute(
            "UPDATE runs SET status = ?2, input_tokens = ?3, output_tokens = ?4, suspended = ?5,
                             decisions = '[]', error = ?6, updated_at = ?7
             WHERE run_id = ?1",
            params![
                run_id,
                status.as_str(),
                to_i64(usage.input_tokens),
                to_i64(usage.output_tokens),
                suspended,
                error,
                to_i64(now_ms())
            ],
        )?;
        Ok(())
    }

    /// Adds `decisions`, replacing an earlier decision for the same call.
    pub(crate) fn decide(
        &mut self,
        run_id: &str,
        decisions: &[ApprovalDecision],
    ) -> anyhow::Result<()> {
        let tx = self.connection.transaction()?;
        let stored: String = tx
            .query_row(
                "SELECT decisions FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?
            .with_context(|| format!("no run '{run_id}' in the run records"))?;
        let mut all: Vec<ApprovalDecision> = serde_json::from_str(&stored)
            .with_context(|| format!("the decisions stored for run '{run_id}' are unreadable"))?;
        for decision in decisions {
            all.retain(|d| d.call_id != decision.call_id);
            all.push(decision.clone());
        }
        tx.execute(
            "UPDATE runs SET decisions = ?2, updated_at = ?3 WHERE run_id = ?1",
            params![run_id, serde_json::to_string(&all)?, to_i64(now_ms())],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The record of `run_id`.
    pub(crate) fn get(&self, run_id: &str) -> anyhow::Result<Option<RunRecord>> {
        let mut statement = self
            .connection
            .prepare(&format!("{SELECT} WHERE run_id = ?1"))?;
        let mut rows = statement.query_map([run_id], read_row)?;
        rows.next().transpose()?.map(decode).transpose()
    }

    /// Every record, oldest first.
    pub(crate) fn list(&self) -> anyhow::Result<Vec<RunRecord>> {
        let mut statement = self
            .connection
            .prepare(&format!("{SELECT} ORDER BY started_at, run_id"))?;
        let rows = statement.query_map([], read_row)?;
        rows.map(|row| decode(row?)).collect()
    }
}

const SELECT: &str = "SELECT run_id, agent, file, session, status, started_at, updated_at, pid,
    input_tokens, output_tokens, suspended, decisions, error FROM runs";

type RawRow = (
    String,
    String,
    String,
    Option<String>,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    String,
    Option<String>,
);

fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
        row.get(12)?,
    ))
}

fn decode(raw: RawRow) -> anyhow::Result<RunRecord> {
    let (
        run_id,
        agent,
        file,
        session,
        status,
        started,
        updated,
        pid,
        input,
        output,
        suspended,
        decisions,
        error,
    ) = raw;
    let status = RecordStatus::parse(&status)
        .with_context(|| format!("run '{run_id}' has an unknown status '{status}'"))?;
    let suspended = suspended
        .map(|text| serde_json::from_str::<SuspendedRun>(&text))
        .transpose()
        .with_context(|| format!("the suspended state of run '{run_id}' is unreadable"))?;
    let decisions = serde_json::from_str(&decisions)
        .with_context(|| format!("the decisions of run '{run_id}' are unreadable"))?;
    Ok(RunRecord {
        run_id,
        agent,
        file: PathBuf::from(file),
        session,
        status,
        started_at_ms: to_u64(started),
        updated_at_ms: to_u64(updated),
        pid: u32::try_from(pid).unwrap_or(0),
        usage: Usage {
            input_tokens: to_u64(input),
            output_tokens: to_u64(output),
        },
        suspended,
        decisions,
        error,
    })
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Whether process `pid` is alive (Linux: its `/proc` entry).
pub(crate) fn process_alive(pid: u32) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Milliseconds since the epoch, by the clock the ledger stamps its rows
/// with.
fn now_ms() -> u64 {
    Timestamp::now().as_millis()
}
