//! A run's record: what it runs (the agent, and the agents file's path and
//! content hash, or a code agent's name), what it was asked, where it
//! stands, who holds it, and the state it waits in.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tinyagents_core::{Message, RunId, RunStatus, Usage};
use tinyagents_harness::{AgentRun, RunRequest, SuspendedRun};
use tinyagents_ledger::Timestamp;

/// Where a run stands in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordStatus {
    /// Waiting for someone to take it: a new run for a worker, or a run
    /// whose waiting calls are all decided, ready to be resumed.
    Queued,
    /// Held by a process (a command, a worker) that runs it. A run whose
    /// holder is gone ([`RunRecord::holder_gone`]) is interrupted: it is
    /// recovered, not run again.
    Running,
    /// Waiting for a person's decision on some calls; nobody holds it.
    AwaitingApproval,
    /// The model gave its answer.
    Completed,
    /// A tool ended it.
    Terminated,
    /// A limit stopped it.
    LimitReached,
    /// It was cancelled.
    Cancelled,
    /// It failed (the error says why).
    Failed,
}

impl RecordStatus {
    /// Every status, in the order a run goes through them.
    pub const ALL: [Self; 8] = [
        Self::Queued,
        Self::Running,
        Self::AwaitingApproval,
        Self::Completed,
        Self::Terminated,
        Self::LimitReached,
        Self::Cancelled,
        Self::Failed,
    ];

    /// As stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Completed => "completed",
            Self::Terminated => "terminated",
            Self::LimitReached => "limit_reached",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }

    /// Parses [`as_str`](Self::as_str) text.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the run has ended (nothing holds it and nothing will run it
    /// unless someone recovers it).
    pub fn has_ended(self) -> bool {
        !matches!(self, Self::Queued | Self::Running | Self::AwaitingApproval)
    }

    /// The status a run segment's end gives the record.
    pub fn of(status: RunStatus) -> Self {
        match status {
            RunStatus::Completed => Self::Completed,
            RunStatus::Terminated => Self::Terminated,
            RunStatus::LimitReached(_) => Self::LimitReached,
            RunStatus::Cancelled => Self::Cancelled,
            RunStatus::AwaitingApproval => Self::AwaitingApproval,
        }
    }
}

impl std::fmt::Display for RecordStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The agents file a run was started from: its path and the SHA-256 of its
/// content, so a resume or a recovery builds the same agents or says that
/// the file changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentsFile {
    /// The file's path (absolute, as the starting process saw it).
    pub path: String,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

impl AgentsFile {
    /// The file at `path` with content `bytes`.
    pub fn new(path: impl Into<String>, bytes: &[u8]) -> Self {
        Self {
            path: path.into(),
            sha256: sha256_hex(bytes),
        }
    }
}

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    tinyagents_core::hex::encode(&Sha256::digest(bytes))
}

/// The part of a [`RunRequest`] a store keeps: what another process needs
/// to start the run. Its cancellation token, budget and extensions belong
/// to the process that made it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredRequest {
    /// The user's message.
    pub input: String,
    /// Earlier conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Whether `history` begins with a standing instruction.
    #[serde(default)]
    pub leading_instruction: bool,
    /// Host metadata of the run.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
}

impl StoredRequest {
    /// What the store keeps of `request`.
    pub fn of(request: &RunRequest) -> Self {
        Self {
            input: request.input.clone(),
            history: request.history.clone(),
            leading_instruction: request.leading_instruction,
            properties: request.properties.clone(),
        }
    }

    /// The request again, for run `run_id`.
    pub fn to_request(&self, run_id: RunId) -> RunRequest {
        let mut request = RunRequest::new(self.input.clone())
            .with_run_id(run_id)
            .with_properties(self.properties.clone());
        request.history = self.history.clone();
        request.leading_instruction = self.leading_instruction;
        request
    }
}

/// A run to record ([`RunStore::create`](crate::RunStore::create)).
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// Its id (also its id in the effect ledger).
    pub run_id: RunId,
    /// The agent that runs it (its id in the agents file, or a code
    /// agent's name).
    pub agent: String,
    /// The agents file it was started from, if any.
    pub file: Option<AgentsFile>,
    /// The session it runs in, if any.
    pub session: Option<String>,
    /// What it was asked.
    pub request: StoredRequest,
}

impl NewRun {
    /// A run of `agent` answering `request` (its run id, or a new one).
    pub fn new(agent: impl Into<String>, request: &RunRequest) -> Self {
        Self {
            run_id: request.run_id.clone().unwrap_or_else(RunId::generate),
            agent: agent.into(),
            file: None,
            session: None,
            request: StoredRequest::of(request),
        }
    }

    /// Started from `file`.
    #[must_use]
    pub fn with_file(mut self, file: AgentsFile) -> Self {
        self.file = Some(file);
        self
    }

    /// In session `session`.
    #[must_use]
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }
}

/// Who holds a run: a process, named for people and checked for liveness
/// on its own machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's name (a worker's id, or `pid N on HOST`).
    pub owner: String,
    /// The machine it runs on.
    pub host: String,
    /// Its process id there.
    pub pid: u32,
}

impl Holder {
    /// This process, named `name` (`pid N on HOST` when `None`).
    pub fn this_process(name: Option<&str>) -> Self {
        let host = host_name();
        let pid = std::process::id();
        Self {
            owner: name.map_or_else(|| format!("pid {pid} on {host}"), str::to_owned),
            host,
            pid,
        }
    }

    /// Whether this holder is known to be gone: a process of this machine
    /// that no longer exists. `None` when this machine cannot tell (another
    /// machine's process, or no `/proc`): only the lease can.
    pub fn known_gone(&self) -> Option<bool> {
        if self.host != host_name() || !std::path::Path::new("/proc/self").exists() {
            return None;
        }
        Some(self.pid == 0 || !std::path::Path::new(&format!("/proc/{}", self.pid)).exists())
    }
}

/// This machine's name (`/etc/hostname`, `HOSTNAME`, or `localhost`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// A holder and the lease it takes: a run held longer than the lease
/// without a renewal may be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Who holds the run.
    pub holder: Holder,
    /// How long a claim holds it without a renewal.
    pub lease: Duration,
}

impl Hold {
    /// This process, with a lease of `lease`.
    pub fn this_process(name: Option<&str>, lease: Duration) -> Self {
        Self {
            holder: Holder::this_process(name),
            lease,
        }
    }
}

/// One run as the store has it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run (also its id in the effect ledger).
    pub run_id: RunId,
    /// The agent that runs it.
    pub agent: String,
    /// The agents file it was started from, if any (its hash is the one
    /// accepted last: the start's, or a later accepted change's).
    pub file: Option<AgentsFile>,
    /// Its session, if any.
    pub session: Option<String>,
    /// What it was asked.
    pub request: StoredRequest,
    /// Where it stands.
    pub status: RecordStatus,
    /// Who holds it (running only).
    pub holder: Option<Holder>,
    /// Until when its holder's lease runs (running only).
    pub lease_until: Option<Timestamp>,
    /// Claims so far: each claim (a start, a resume, a recovery, a
    /// takeover) raises it, and a holder's later writes name it.
    pub epoch: u64,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// When a process first took it.
    pub started_at: Option<Timestamp>,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// Tokens used, across its segments.
    pub usage: Usage,
    /// Its final answer (an ended run), or the text it stopped at.
    pub final_text: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// How many times it has waited for a person; its waiting calls and
    /// their decisions belong to the last.
    pub suspension: u32,
    /// The state it waits in, while it waits for decisions or, every
    /// waiting call decided, to be resumed (queued): opened from its seal,
    /// so it is what was stored. The claim that takes it to resume clears
    /// it; a later claim recovers the run with the same decisions.
    pub suspended: Option<SuspendedRun>,
}

impl RunRecord {
    /// Whether a run that a process holds was left by it: its lease ran
    /// out by `now`, or its process on this machine is gone. Runs no
    /// process holds are not.
    pub fn holder_gone(&self, now: Timestamp) -> bool {
        if self.status != RecordStatus::Running {
            return false;
        }
        let expired = self.lease_until.is_none_or(|until| until < now);
        expired
            || self
                .holder
                .as_ref()
                .and_then(Holder::known_gone)
                .unwrap_or(false)
    }

    /// Whether it waits to be resumed: queued with every waiting call of
    /// its last suspension decided.
    pub fn is_decided(&self) -> bool {
        self.status == RecordStatus::Queued && self.suspended.is_some()
    }
}

/// How a run segment ended, for [`RunStore::end`](crate::RunStore::end).
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// It ended with a status ([`RecordStatus::has_ended`]): its answer
    /// (or the text it stopped at) and the run's tokens.
    Ended {
        /// Completed, terminated, limit reached or cancelled.
        status: RecordStatus,
        /// The final answer.
        final_text: String,
        /// The run's tokens, across its segments.
        usage: Usage,
    },
    /// It waits for a person: its state, sealed by the store, and the
    /// calls that wait become the run's next suspension.
    Suspended {
        /// The state to resume from.
        state: Box<SuspendedRun>,
        /// The run's tokens so far.
        usage: Usage,
    },
    /// It failed.
    Failed {
        /// Why.
        error: String,
    },
    /// Its holder gives it back unfinished (a worker stopping): queued
    /// again, and the next claim recovers it.
    Released,
}

impl Ending {
    /// The ending of a segment that returned `run`.
    pub fn of(run: &AgentRun) -> Self {
        match (&run.suspended, RecordStatus::of(run.status)) {
            (Some(state), RecordStatus::AwaitingApproval) => Self::Suspended {
                state: Box::new(state.clone()),
                usage: run.usage,
            },
            (None, RecordStatus::AwaitingApproval) => Self::Failed {
                error: "the run awaits approval without a suspended state".to_owned(),
            },
            (_, status) => Self::Ended {
                status,
                final_text: run.final_text.clone(),
                usage: run.usage,
            },
        }
    }

    /// The status the record takes.
    pub fn status(&self) -> RecordStatus {
        match self {
            Self::Ended { status, .. } => *status,
            Self::Suspended { .. } => RecordStatus::AwaitingApproval,
            Self::Failed { .. } => RecordStatus::Failed,
            Self::Released => RecordStatus::Queued,
        }
    }
}

/// Which runs to list ([`RunStore::list`](crate::RunStore::list)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in these statuses (every status when empty).
    pub statuses: Vec<RecordStatus>,
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// At most this many, oldest first.
    pub limit: u32,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            statuses: Vec::new(),
            agent: None,
            limit: 1_000,
        }
    }
}

impl RunQuery {
    /// Runs in `status`.
    #[must_use]
    pub fn status(mut self, status: RecordStatus) -> Self {
        self.statuses.push(status);
        self
    }

    /// Runs of `agent`.
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// At most `limit` runs.
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// Which runs a worker may take ([`RunStore::claim_next`](crate::RunStore::claim_next)):
/// those it can build the same agents for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimFilter {
    /// Only runs of these agents (any agent when empty).
    pub agents: Vec<String>,
    /// Only runs started from an agents file of this content hash (any
    /// run when `None`; with it, runs without a file are not taken).
    pub file_sha256: Option<String>,
}

/// A run just taken by a holder.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The run as it is now (running, held by the claimer).
    pub record: RunRecord,
    /// The claim's epoch: its later writes name it.
    pub epoch: u64,
    /// Whether the run had been taken before (it was running, failed, or
    /// given back): it is recovered, not started.
    pub takeover: bool,
    /// The state to resume, when this claim took a run whose waiting calls
    /// were all decided (the first claim after the last decision).
    pub resume: Option<SuspendedRun>,
    /// The decisions of the run's last suspension, checked against their
    /// seals, as the harness takes them (a resume's, or a recovery's when
    /// the resume that was to use them was cut short).
    pub decisions: Vec<tinyagents_harness::ApprovalDecision>,
}
