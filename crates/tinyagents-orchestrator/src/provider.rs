//! `AgentAsToolProvider` and `AgentAsTool`: built agents exposed to another
//! agent as functions.
//!
//! A call of an agent tool starts a separate run of the called agent:
//!
//! - input `query` (required) and `conversation` (optional); the output is
//!   the child's final text;
//! - the calling call's cancellation token reaches the child run (a child
//!   token: cancelling the parent cancels the child, not the reverse);
//! - a child failure is the tool's `Err`, never success text;
//! - the calling run's properties are copied into the child run;
//! - the child runs at the caller's depth + 1, so `RunLimits::max_depth`
//!   caps chains of agents calling agents;
//! - its events reach the caller's stream as `AgentEvent::Delegated`;
//! - its run id is [`child_run_id`]`(caller run, calling call)`, which links
//!   every ledger row and event of the child to the call that started it;
//! - with a parent session, the child keeps a child session per
//!   (agent, conversation name), saved only after a successful call.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tinyagents_core::{
    AgentId, CallId, CancellationToken, RunId, RunStatus, SessionId, Spend, SpendCaps,
    TinyAgentsError, ToolReplay, ToolResult,
};
use tinyagents_harness::{EventSink, OUTPUT_SCHEMA_PROPERTY, RunRequest, ToolExecutionContext};
use tinytools::{Reconciled, Tool, ToolCallOptions, ToolRunContext, ToolSpec};

use crate::agent::BuiltAgent;
use crate::error::AgentToolError;
use crate::session::{SESSION_PROPERTY, SessionManager, SessionRecord, SessionScope, Transcript};
use crate::session_run::SESSION_TURN_PROPERTY;

/// The separator between a parent run id and a call id in a child run id.
pub const CHILD_RUN_SEPARATOR: &str = "::";

/// The run id of the child run started by the call `call` of run `parent`:
/// `<parent>::<call>` (a grandchild's is `<parent>::<call>::<call>`).
pub fn child_run_id(parent: &RunId, call: &CallId) -> RunId {
    RunId::from(format!("{parent}{CHILD_RUN_SEPARATOR}{call}"))
}

/// The run and call that started a child run, read back from its id.
pub fn parent_of_child_run(child: &RunId) -> Option<(RunId, CallId)> {
    let (run, call) = child.as_str().rsplit_once(CHILD_RUN_SEPARATOR)?;
    Some((RunId::new(run), CallId::new(call)))
}

/// How agent tools behave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentToolOptions {
    /// Let calls of agent tools run concurrently (the tools declare
    /// themselves concurrency-safe). Calls on the same child session still
    /// wait for each other. Off by default: the provider's functions run
    /// one at a time.
    pub parallel: bool,
    /// Let a child run spend from the calling run's budget (tool calls,
    /// model calls and tokens, tree-wide). Off by default: each child run
    /// has its own loop limits.
    pub shared_budget: bool,
}

/// Exposes built agents as functions. It captures the agents it is given
/// (a snapshot: it never looks an agent up per request), keeps their order
/// and does not remove duplicates: deduplicate the input when you build one
/// yourself.
#[derive(Clone)]
pub struct AgentAsToolProvider {
    agents: Vec<Arc<BuiltAgent>>,
    sessions: Arc<SessionManager>,
    options: AgentToolOptions,
}

impl std::fmt::Debug for AgentAsToolProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentAsToolProvider")
            .field(
                "agents",
                &self.agents.iter().map(|a| a.id()).collect::<Vec<_>>(),
            )
            .field("options", &self.options)
            .finish()
    }
}

impl AgentAsToolProvider {
    /// A provider of `agents`, keeping child sessions in `sessions`.
    pub fn new(agents: Vec<Arc<BuiltAgent>>, sessions: Arc<SessionManager>) -> Self {
        Self {
            agents,
            sessions,
            options: AgentToolOptions::default(),
        }
    }

    /// Sets the options of its tools.
    #[must_use]
    pub fn with_options(mut self, options: AgentToolOptions) -> Self {
        self.options = options;
        self
    }

    /// The captured agents, in the given order.
    pub fn agents(&self) -> &[Arc<BuiltAgent>] {
        &self.agents
    }

    /// One tool per captured agent, in order, for a caller whose posture is
    /// `air_gapped` (the children run at least as tight).
    pub fn tools(&self, air_gapped: bool) -> Vec<Arc<AgentAsTool>> {
        self.agents
            .iter()
            .map(|agent| {
                Arc::new(AgentAsTool::new(
                    Arc::clone(agent),
                    Arc::clone(&self.sessions),
                    self.options,
                    air_gapped,
                ))
            })
            .collect()
    }
}

/// One agent as a function.
pub struct AgentAsTool {
    agent: Arc<BuiltAgent>,
    sessions: Arc<SessionManager>,
    options: AgentToolOptions,
    caller_air_gapped: bool,
    spec: ToolSpec,
}

impl std::fmt::Debug for AgentAsTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentAsTool")
            .field("name", &self.spec.name)
            .field("agent", self.agent.id())
            .field("caller_air_gapped", &self.caller_air_gapped)
            .finish_non_exhaustive()
    }
}

/// The arguments' schema: `query` required, `conversation` optional.
fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What to ask the agent."
            },
            "conversation": {
                "type": "string",
                "description": "A name for a line of work with this agent; the same name continues it. Omit for the default conversation."
            }
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

/// The spec of an agent tool named `name`: the query/conversation schema,
/// `ToolReplay::Never`, concurrency-safe only when `options.parallel`.
pub(crate) fn agent_tool_spec(
    name: &str,
    description: &str,
    options: AgentToolOptions,
) -> ToolSpec {
    ToolSpec::new(name, description, parameters())
        .replay(ToolReplay::Never)
        .concurrency_safe(options.parallel)
}

impl AgentAsTool {
    /// The tool for `agent`: named after its display name (normalised),
    /// described by its description; `ToolReplay::Never`; concurrency-safe
    /// only when `options.parallel`.
    pub fn new(
        agent: Arc<BuiltAgent>,
        sessions: Arc<SessionManager>,
        options: AgentToolOptions,
        caller_air_gapped: bool,
    ) -> Self {
        let definition = agent.definition();
        let spec = agent_tool_spec(
            &definition.function_name(),
            &definition.description,
            options,
        );
        Self {
            agent,
            sessions,
            options,
            caller_air_gapped,
            spec,
        }
    }

    /// The agent it calls.
    pub fn agent(&self) -> &Arc<BuiltAgent> {
        &self.agent
    }

    /// The id of the agent it calls.
    pub fn agent_id(&self) -> &AgentId {
        self.agent.id()
    }

    /// Asks the agent `query` in `conversation`, from the tool call
    /// `context` describes (or from outside any run when `None`).
    pub async fn call(
        &self,
        query: &str,
        conversation: Option<&str>,
        context: Option<&ToolRunContext>,
    ) -> Result<String, AgentToolError> {
        let agent_id = self.agent.id().clone();
        let session_error = |source| AgentToolError::Session {
            agent: agent_id.clone(),
            source,
        };
        let exec = context.map(ToolExecutionContext::from_run_context);
        let mut properties = exec
            .as_ref()
            .and_then(ToolExecutionContext::properties)
            .map(|p| (**p).clone())
            .unwrap_or_default();
        let parent = SessionScope::from_properties(&properties);
        let child = parent
            .as_ref()
            .map(|parent| parent.child(&agent_id, conversation));
        let _held = match &child {
            Some((scope, _)) => Some(self.sessions.lock(&scope.id).await),
            None => None,
        };
        let (mut record, stored, kept) = match &child {
            Some((scope, _)) => self
                .sessions
                .check_out(scope)
                .await
                .map_err(session_error)?,
            None => (
                SessionRecord::new(SessionId::new("")),
                Transcript::default(),
                false,
            ),
        };
        // What the caller's own run asked for is not the child's business.
        properties.remove(SESSION_TURN_PROPERTY);
        properties.remove(OUTPUT_SCHEMA_PROPERTY);
        match &child {
            Some((scope, _)) => scope.write_to(&mut properties),
            None => {
                properties.remove(SESSION_PROPERTY);
            }
        }
        // A kept conversation comes as the transcript of the run that wrote
        // it, standing instruction first: the harness continues it in place
        // when that instruction is still its own.
        let (history, rewritten) = self.agent.run_history(stored, kept);
        let history_len = history.conversation().len();
        let mut request = RunRequest::new(query);
        request.leading_instruction = history.start > 0;
        request.history = history.messages;
        request.run_id =
            Some(context.map_or_else(RunId::generate, |c| child_run_id(c.run_id(), c.call_id())));
        request.cancel =
            Some(context.map_or_else(CancellationToken::new, |c| c.cancellation().child_token()));
        request.properties = properties;
        request.depth = exec
            .as_ref()
            .map_or(0, ToolExecutionContext::depth)
            .saturating_add(1);
        request.tracker = exec
            .as_ref()
            .filter(|_| self.options.shared_budget)
            .and_then(|e| e.tracker().cloned());
        // Tokens and money are the tree's whatever the call budget: the
        // child's run spends under its caller's node.
        request.spend = exec.as_ref().and_then(|e| e.spend().cloned());
        let events = exec
            .as_ref()
            .map_or_else(EventSink::none, |e| e.delegate_events(agent_id.clone()));
        let run = self
            .agent
            .run(request, self.caller_air_gapped, &events)
            .await
            .map_err(|source| AgentToolError::ChildFailed {
                agent: agent_id.clone(),
                source,
            })?;
        if !matches!(run.status, RunStatus::Completed | RunStatus::Terminated) {
            return Err(AgentToolError::ChildStopped {
                agent: agent_id,
                status: run.status,
            });
        }
        if let (Some((scope, name)), Some(parent)) = (&child, &parent) {
            // Stored as this call would write it whole: appending keeps
            // the stored record's other fields, so it appends only when
            // they are already these.
            let same_record = record.revision > 0
                && record.parent.as_ref() == Some(&parent.id)
                && record.agent_id.as_ref() == Some(&agent_id)
                && record.conversation == *name;
            let appended = self
                .agent
                .appended_from(&run.messages, history_len, history_len, query)
                .filter(|_| same_record && !rewritten);
            record.parent = Some(parent.id.clone());
            record.agent_id = Some(agent_id.clone());
            record.conversation.clone_from(name);
            // The transcript is kept whole: the conversation starts after
            // the run's standing instruction (`start` counts it), so
            // nothing is removed from its front.
            let (transcript, new_from) = match appended {
                Some(start) => (
                    Transcript {
                        messages: run.messages,
                        start: start - history_len,
                    },
                    Some(start),
                ),
                None => (
                    Transcript::conversation_only(self.agent.kept_history(run.messages)),
                    None,
                ),
            };
            self.sessions
                .write_back(scope, record, transcript, new_from)
                .await
                .map_err(session_error)?;
        }
        Ok(run.final_text)
    }
}

/// Whether the calling model may read `error` verbatim whatever the
/// detailed-errors setting: the child's refusals, limits and stops are the
/// harness's own words; its provider, configuration and store failures are
/// detail.
fn shown_verbatim(error: &AgentToolError) -> bool {
    match error {
        AgentToolError::ChildStopped { .. } => true,
        // By kind, so configuration and state errors that carry a source
        // (`ToolRegistration`, `Ledger`, …) count as what they are.
        AgentToolError::ChildFailed { source, .. } => {
            !matches!(source, TinyAgentsError::Model(_))
                && !matches!(source.error_type(), "config" | "state")
        }
        _ => false,
    }
}

#[async_trait]
impl Tool for AgentAsTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let query = args.get("query").and_then(Value::as_str).unwrap_or("");
        let conversation = args.get("conversation").and_then(Value::as_str);
        match self.call(query, conversation, context).await {
            Ok(text) => Ok(ToolResult::text(text)),
            // The harness never withholds a `TinyAgentsError` a tool
            // forwards: the model reads these as they are.
            Err(error) if shown_verbatim(&error) => {
                Err(TinyAgentsError::tool_failed(self.spec.name.clone(), error.to_string()).into())
            }
            // Detail: the calling model reads it only with detailed errors on.
            Err(error) => Err(anyhow::Error::new(error)),
        }
    }

    /// A delegated call in doubt after a crash: the child run it started
    /// will never be continued (its answer would reach nobody), so it is
    /// ended and its own calls in doubt are put to the child's tools. Whether
    /// the delegation as a whole did what was asked stays unknown.
    /// What the child had spent, as its last checkpoint holds it, is
    /// recorded in its caller's tree (lent as the context's host
    /// extension): a recovered tree forgets nothing its abandoned children
    /// spent up to their last turn.
    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        let child = child_run_id(context.run_id(), context.call_id());
        let harness = self.agent.harness(self.caller_air_gapped);
        let spent = harness.checkpointed_spend(&child).await?;
        harness.abandon(&child).await?;
        let caller = context
            .host_extension()
            .and_then(|extension| extension.downcast_ref::<Spend>());
        if let (Some(caller), Some(spent)) = (caller, spent) {
            caller
                .child(child, Some(self.agent.id().clone()), SpendCaps::default())
                .record(&spent);
        }
        Ok(Reconciled::Unknown)
    }
}
