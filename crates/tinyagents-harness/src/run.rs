//! What a run takes and what it gives back.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{
    BudgetCounts, CallId, CancellationToken, Extensions, LimitTracker, Message, RunId, RunSpend,
    RunStatus, Spend, State, TinyAgentsError, ToolCall, Usage, args_hash,
};

/// The run property that asks the model for a final answer matching a JSON
/// schema (an [`OutputSchema`](tinyagents_core::OutputSchema), as JSON):
/// every model call of the run carries it in
/// `ModelOptions::output_schema`, and providers use their structured-output
/// mechanism. A property, so it survives suspension, resume and recovery
/// with the run; agent tools do not pass it on to their child runs. Set it
/// with [`RunRequest::with_output_schema`].
pub const OUTPUT_SCHEMA_PROPERTY: &str = "tinyagents.output_schema";

/// The run property that names the session a run belongs to (a string, the
/// session id). The orchestrator sets it (an agent tool replaces it with
/// the child session's in its child run); the harness reads it as the
/// spans' `gen_ai.conversation.id`, which a run outside a session does not
/// carry.
pub const SESSION_PROPERTY: &str = "tinyagents.session";

/// The version of [`SuspendedRun`]'s serialised form.
pub const SUSPENDED_RUN_FORMAT: u32 = 1;

/// How to start a run.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The user's message.
    pub input: String,
    /// Earlier conversation, placed after the system message and before the input.
    pub history: Vec<Message>,
    /// Whether `history` begins with a standing instruction rather than
    /// conversation: it is the transcript of an earlier run, handed back
    /// whole ([`with_transcript`](Self::with_transcript)). The harness does
    /// not take the caller's word for the instruction: a leading system
    /// message equal to its own system prompt is kept, and the history's
    /// `Vec` becomes the run's transcript without a copy; another leading
    /// system message is replaced by its system prompt (dropped by a
    /// harness without one); a history that does not begin with a system
    /// message is all conversation, as when this is `false`.
    pub leading_instruction: bool,
    /// The run's id; generated when absent.
    pub run_id: Option<RunId>,
    /// The run's cancellation token; a fresh one when absent.
    pub cancel: Option<CancellationToken>,
    /// Host metadata that travels with the run.
    pub properties: Map<String, Value>,
    /// Sub-agent depth (0 for a run a host started).
    pub depth: u32,
    /// A budget of tool and model calls shared with other runs (a
    /// tree-wide budget).
    pub tracker: Option<Arc<LimitTracker>>,
    /// The node of the run this one is delegated from: this run's tokens
    /// and money are a child of it, bound by its caps and every cap above
    /// (and by this harness's limits, its own share). `None` makes the run
    /// the root of a new tree. Agent tools set it to their caller's
    /// ([`ToolExecutionContext::spend`](crate::ToolExecutionContext::spend)).
    pub spend: Option<Spend>,
    /// Typed values for hooks.
    pub extensions: Extensions,
}

impl RunRequest {
    /// A run answering `input`.
    pub fn new(input: impl Into<String>) -> Self {
        Self {
            input: input.into(),
            ..Self::default()
        }
    }

    /// Sets the cancellation token.
    #[must_use]
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Sets the run id.
    #[must_use]
    pub fn with_run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Sets the earlier conversation (without a standing instruction).
    #[must_use]
    pub fn with_history(mut self, history: Vec<Message>) -> Self {
        self.history = history;
        self.leading_instruction = false;
        self
    }

    /// Continues `transcript`, the messages of an earlier run of this agent
    /// (`AgentRun::messages`, its standing instruction first), with the
    /// input: the run's transcript is `transcript` itself, grown in place,
    /// when its leading system message is the harness's system prompt (see
    /// [`leading_instruction`](Self::leading_instruction)). Tool calls in it
    /// keep their ids; this run's calls number on after them.
    #[must_use]
    pub fn with_transcript(mut self, transcript: Vec<Message>) -> Self {
        self.history = transcript;
        self.leading_instruction = true;
        self
    }

    /// Sets host metadata.
    #[must_use]
    pub fn with_properties(mut self, properties: Map<String, Value>) -> Self {
        self.properties = properties;
        self
    }

    /// Asks for a final answer matching `schema` (see
    /// [`OUTPUT_SCHEMA_PROPERTY`]). The harness passes it to the model; it
    /// does not check the answer (`Agent::run_typed` does).
    #[must_use]
    pub fn with_output_schema(mut self, schema: &tinyagents_core::OutputSchema) -> Self {
        if let Ok(value) = serde_json::to_value(schema) {
            self.properties
                .insert(OUTPUT_SCHEMA_PROPERTY.to_owned(), value);
        }
        self
    }
}

/// A call waiting for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The run it belongs to.
    pub run_id: RunId,
    /// The call, with its prepared arguments, redacted: when redaction
    /// changed them, the call is listed in
    /// [`SuspendedRun::replay_blocked`] and its real arguments stay in this
    /// process only (never serialised), so only a resume from this very
    /// value can run it.
    pub call: ToolCall,
    /// Why it waits.
    pub reason: String,
    /// The real arguments of a call whose redacted copy is stored.
    #[serde(skip)]
    pub(crate) held: HeldArguments,
}

/// Arguments kept in memory only, because they hold a secret: not part of
/// the stored state (not serialised, not compared, not printed).
#[derive(Clone, Default)]
pub(crate) struct HeldArguments(pub(crate) Option<(Value, Option<String>)>);

impl PartialEq for HeldArguments {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for HeldArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "held" } else { "none" })
    }
}

impl PendingCall {
    /// A call that waits, its arguments as admission prepared them.
    pub(crate) fn waiting(run_id: RunId, call: ToolCall, reason: String) -> Self {
        Self {
            run_id,
            call,
            reason,
            held: HeldArguments::default(),
        }
    }

    /// Approves this call as it is: the approval binds to its run, its id,
    /// its tool and the hash of its arguments, and is used once.
    pub fn approve(&self) -> ApprovalDecision {
        self.decide(true, None)
    }

    /// Denies this call; the model reads `reason`.
    pub fn deny(&self, reason: impl Into<String>) -> ApprovalDecision {
        self.decide(false, Some(reason.into()))
    }

    fn decide(&self, approved: bool, reason: Option<String>) -> ApprovalDecision {
        ApprovalDecision {
            run_id: self.run_id.clone(),
            call_id: self.call.id.clone(),
            tool_name: self.call.name.clone(),
            args_hash: args_hash(&self.call.arguments),
            approved,
            reason,
        }
    }
}

/// A person's decision on a pending call. It applies only to the call it
/// names: the same run, call id, tool and arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The run of the call decided on.
    pub run_id: RunId,
    /// The call decided on.
    pub call_id: CallId,
    /// The tool the call names.
    pub tool_name: String,
    /// The hash of the arguments that were approved.
    pub args_hash: String,
    /// Approved or denied.
    pub approved: bool,
    /// Why it was denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One call of the turn a run was suspended in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnEntry {
    /// It settled; this is its transcript message.
    Settled {
        /// The message.
        message: Message,
    },
    /// It waits for a decision.
    Pending {
        /// The call.
        pending: PendingCall,
    },
}

/// A run suspended for approval, as the host keeps it (serialises with
/// serde; carries a format version and is refused when it does not match).
/// It always reads back with plain serde: arguments deeper than
/// [`MAX_ARGUMENT_DEPTH`](tinyagents_core::MAX_ARGUMENT_DEPTH) never reach
/// it as a value. Kept outside the host's trust boundary, it should be
/// sealed ([`SuspendedRun::seal`], [`SealedRun`](crate::SealedRun)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspendedRun {
    /// [`SUSPENDED_RUN_FORMAT`] when written.
    pub format: u32,
    /// The run.
    pub run_id: RunId,
    /// The transcript up to the suspended turn's assistant message.
    pub state: State,
    /// The suspended turn's calls, in call order.
    pub turn: Vec<TurnEntry>,
    /// What the run had spent.
    pub budget: BudgetCounts,
    /// Active time spent before the suspension, in milliseconds.
    pub active_ms: u64,
    /// Host metadata of the run.
    #[serde(default)]
    pub properties: Map<String, Value>,
    /// Sub-agent depth.
    #[serde(default)]
    pub depth: u32,
    /// Calls that must not run from the stored state: their arguments held
    /// secrets that redaction kept out of it (calls of a checkpointed turn
    /// a recovery must not run again, and waiting calls whose arguments are
    /// stored redacted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay_blocked: Vec<CallId>,
}

impl SuspendedRun {
    /// The calls waiting for a decision.
    pub fn pending(&self) -> impl Iterator<Item = &PendingCall> {
        self.turn.iter().filter_map(|entry| match entry {
            TurnEntry::Pending { pending } => Some(pending),
            TurnEntry::Settled { .. } => None,
        })
    }

    /// Refuses a state of another format.
    pub fn check_format(&self) -> Result<(), TinyAgentsError> {
        if self.format == SUSPENDED_RUN_FORMAT {
            Ok(())
        } else {
            Err(TinyAgentsError::State(format!(
                "suspended run {} has format {}, this version reads format {}",
                self.run_id, self.format, SUSPENDED_RUN_FORMAT
            )))
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The run.
    pub run_id: RunId,
    /// How it ended.
    pub status: RunStatus,
    /// The final answer (or the partial text when stopped).
    pub final_text: String,
    /// The transcript: every call the model issued has exactly one result.
    pub messages: Vec<Message>,
    /// Tokens used.
    pub usage: Usage,
    /// What the run spent: its calls, and (`budget.spent`) the tokens and
    /// money of it and every run it delegated to.
    pub budget: BudgetCounts,
    /// The run's node of its tree's tokens and money
    /// ([`spend_report`](Self::spend_report) reads it).
    pub spend: Spend,
    pub(crate) tool_metadata: HashMap<CallId, Value>,
    /// The state to resume from, when the run waits for approval.
    pub suspended: Option<SuspendedRun>,
    /// The run's host metadata as it ended (after a resume or a recovery,
    /// as the stored state or the checkpoint held it).
    pub properties: Arc<Map<String, Value>>,
}

impl AgentRun {
    /// Per run of the tree under this one (this run first, then each run
    /// it delegated to, at any depth, in the order they started): what it
    /// spent itself and with the runs under it. Read from the tree when
    /// asked, so a run that ends allocates nothing for it.
    pub fn spend_report(&self) -> Vec<RunSpend> {
        self.spend.report()
    }

    /// The host-only metadata of a call's result.
    pub fn tool_metadata(&self, call_id: &CallId) -> Option<&Value> {
        self.tool_metadata.get(call_id)
    }

    /// The calls waiting for approval.
    pub fn pending(&self) -> Vec<&PendingCall> {
        self.suspended
            .iter()
            .flat_map(SuspendedRun::pending)
            .collect()
    }
}
