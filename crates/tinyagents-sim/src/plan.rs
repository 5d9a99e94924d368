//! What one history is: a configuration, the models' scripts and the
//! faults, all plain data so a failing history can be printed, replayed and
//! shrunk. [`draw`](crate::draw) makes one from a seed.

use serde::{Deserialize, Serialize};

/// One simulated history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The host's tools (`t0`, `t1`, …).
    pub tools: Vec<ToolDef>,
    /// The policies installed on every agent.
    pub policies: Policies,
    /// The run limits of every agent.
    pub limits: Limits,
    /// Payload capture of tool inputs and outputs in events.
    pub capture: bool,
    /// Where calls are recorded.
    pub ledger: LedgerKind,
    /// A secret planted in arguments, results and errors; a redactor for
    /// it is installed whenever it is planted.
    pub secret: Option<String>,
    /// Agents the root may call as tools (`Helper0`, `Helper1`, …).
    pub helpers: Vec<HelperDef>,
    /// The root model's turns.
    pub turns: Vec<TurnPlan>,
    /// What goes wrong.
    pub faults: Faults,
    /// How the host reads the run's events.
    pub reader: Reader,
    /// The run is in a session (`run_in_session`), and the root's calls of
    /// helpers name a conversation (child sessions).
    #[serde(default)]
    pub session: bool,
}

/// A host tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// Read-only (and so concurrency-safe).
    pub read_only: bool,
    /// Concurrency-safe without being read-only.
    pub concurrency_safe: bool,
    /// `ToolReplay::Never` (else `Safe`).
    pub never: bool,
    /// `approval_required` in its spec.
    pub approval_required: bool,
    /// `external` in its spec.
    pub external: bool,
    /// Its side-effect classes (`SideEffects` bits).
    pub effects: u16,
    /// Must run in a sandbox.
    pub sandboxed: bool,
    /// Its own timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Answers reconciliation from its effect log (else `Unknown`).
    pub reconciles: bool,
}

/// A delegated agent, exposed as a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperDef {
    /// Host tools it has.
    pub tools: Vec<String>,
    /// Other helpers it may call (by index), cycles included.
    pub calls: Vec<usize>,
}

/// What a gate or a hook does for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateMode {
    /// Allows.
    Allow,
    /// Denies.
    Deny,
    /// Asks a person.
    Ask,
    /// Fails.
    Error,
    /// Panics.
    Panic,
}

/// What the approval middleware's callback answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Callback {
    /// No callback: every flagged call waits for a person.
    None,
    /// Approves.
    Approve,
    /// Declines (the call waits for a person).
    Decline,
    /// Panics.
    Panic,
}

/// The policies of every agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policies {
    /// The allow-list, when there is one (agent tools are always on it).
    pub allow: Option<Vec<String>>,
    /// The tool policy's deny mask (`SideEffects` bits); `None` when no
    /// tool policy is installed.
    pub deny_mask: Option<u16>,
    /// Whether the tool policy has a sandbox.
    pub sandbox: bool,
    /// Tools the tool policy requires approval for.
    pub policy_approval: Vec<String>,
    /// Plan mode on.
    pub plan_mode: bool,
    /// Tools the human-approval middleware flags, when it is installed.
    pub human: Option<Vec<String>>,
    /// Its callback.
    pub callback: Callback,
    /// The security gate's answer per tool; a tool not named is allowed.
    /// `None`: no gate.
    pub gate: Option<Vec<(String, GateMode)>>,
    /// A middleware whose admission hooks fail (`Error`) or panic
    /// (`Panic`) for the named tools.
    pub faulty_hook: Vec<(String, GateMode)>,
    /// `InvalidArgsPolicy::Fail` (else `ReturnToModel`).
    pub invalid_args_fail: bool,
}

/// The run limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// `max_tool_calls`.
    pub tool_calls: u32,
    /// `max_nested_depth`.
    pub nested_depth: u32,
    /// `max_model_calls`.
    pub model_calls: u32,
    /// `max_parallel_calls`.
    pub parallel: u32,
    /// The wall clock, in milliseconds.
    pub wall_ms: Option<u64>,
    /// `max_tool_result_bytes`.
    pub result_bytes: usize,
    /// The default tool timeout, in milliseconds.
    pub tool_timeout_ms: Option<u64>,
    /// `max_depth` (delegation).
    pub depth: u32,
}

/// Where calls are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerKind {
    /// No ledger.
    None,
    /// `MemoryLedger`.
    Memory,
    /// `SqliteLedger` on a temporary file.
    Sqlite,
}

/// One turn of a model's script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TurnPlan {
    /// Tool calls, issued together.
    Calls(Vec<CallPlan>),
    /// A model error.
    Fails,
}

/// One call, as a model or a tool issues it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallPlan {
    /// The tool named (a host tool, a helper's function name, or unknown).
    pub tool: String,
    /// The provider's id, possibly repeated within a turn.
    pub provider_id: Option<String>,
    /// What the arguments are.
    pub args: ArgsPlan,
}

/// A call's arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ArgsPlan {
    /// Valid arguments telling the tool what to do.
    Act(Act),
    /// JSON the schema refuses.
    Mistyped,
    /// Text that is not JSON.
    NotJson,
    /// A helper's query: its model's script.
    Query(Vec<TurnPlan>),
}

/// What a simulated tool does on one call: the call's arguments carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Act {
    /// A tag unique in the history.
    pub tag: String,
    /// How it ends.
    pub end: End,
    /// Milliseconds it takes before ending.
    pub ms: u64,
    /// The planted secret in its arguments.
    pub secret_in_args: bool,
    /// The planted secret in its result or error.
    pub secret_in_result: bool,
    /// Calls it makes through the harness before ending.
    pub nest: Vec<CallPlan>,
    /// Whether those calls are made concurrently.
    pub nest_parallel: bool,
    /// Bytes of filler in its result.
    pub filler: usize,
}

/// How a simulated call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// With a result.
    Ok,
    /// With an error.
    Err,
    /// With a panic.
    Panic,
    /// Never, until cancelled or timed out.
    Hang,
    /// With a result saying it failed (`is_error`).
    ErrorResult,
}

/// What goes wrong in a history, besides what the calls themselves do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Faults {
    /// The ledger write (counted from 1) at which the process dies.
    pub crash_at: Option<u32>,
    /// Whether that write lands before the death.
    pub crash_after_write: bool,
    /// Ledger writes (counted from 1) that fail.
    pub failing_writes: Vec<u32>,
    /// Milliseconds after the start at which the host cancels the run.
    pub cancel_at_ms: Option<u64>,
    /// Decisions on pending calls, in the order they are asked for
    /// (`true` approves); past the end, approve.
    pub decisions: Vec<bool>,
    /// Whether the suspended state is resumed a second time.
    pub resume_twice: bool,
    /// Whether the process dies between the suspension and the resume.
    pub crash_before_resume: bool,
}

/// How the host reads events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reader {
    /// Reads every event at once.
    Eager,
    /// Sleeps this many milliseconds per event.
    Slow(u64),
    /// Stops reading after this many events, keeping the receiver.
    Stalls(u32),
    /// Drops the receiver at once.
    Gone,
}

impl Reader {
    /// Whether every event is read (so the event invariants apply).
    pub fn reads_all(self) -> bool {
        matches!(self, Self::Eager | Self::Slow(_))
    }
}

impl History {
    /// The definition of the host tool `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The function name of helper `i`.
    pub fn helper_name(i: usize) -> String {
        format!("Helper{i}")
    }

    /// Whether any call of the history may hang.
    pub fn may_hang(&self) -> bool {
        fn turns_hang(turns: &[TurnPlan]) -> bool {
            turns.iter().any(|t| match t {
                TurnPlan::Calls(calls) => calls.iter().any(call_hangs),
                TurnPlan::Fails => false,
            })
        }
        fn call_hangs(call: &CallPlan) -> bool {
            match &call.args {
                ArgsPlan::Act(act) => act.end == End::Hang || act.nest.iter().any(call_hangs),
                ArgsPlan::Query(turns) => turns_hang(turns),
                ArgsPlan::Mistyped | ArgsPlan::NotJson => false,
            }
        }
        turns_hang(&self.turns)
    }
}
