//! `BuiltAgent`: one agent built from its definition, and `ActiveAgent`, the
//! requested agent bound to the posture and sessions of a request.

use std::path::PathBuf;
use std::sync::Arc;

use tinyagents_core::{AgentId, Message};
use tinyagents_harness::{AgentHarness, AgentRun, EventSink, RunRequest};
use tinyagents_middleware::{Middleware, ToolMiddleware};

use crate::compaction::HistoryReducer;
use crate::definition::AgentDefinition;
use crate::error::RunError;
use crate::governance::OmittedTool;
use crate::session::{ChatTurn, SessionManager, SessionScope};

/// How an agent was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgentRole {
    /// The agent a user asked for: its context providers attach, and its
    /// approval-required tools wait for a person.
    Active,
    /// An exposed agent built for other agents to call: the restricted
    /// shape, without active-only context and without tools that need
    /// approval.
    Delegated,
}

/// One posture of a built agent: its harness and the tools it offers.
pub(crate) struct PostureBuild {
    pub(crate) harness: AgentHarness,
    pub(crate) tools: Vec<String>,
    pub(crate) omitted: Vec<OmittedTool>,
}

/// An agent built from its definition. It holds one harness per posture it
/// can run under (open and air-gapped; only air-gapped for a local-only
/// definition), so the same instance serves callers of either posture.
pub struct BuiltAgent {
    pub(crate) definition: Arc<AgentDefinition>,
    pub(crate) role: AgentRole,
    pub(crate) open: Option<PostureBuild>,
    pub(crate) air_gapped: PostureBuild,
    pub(crate) children: Vec<Arc<BuiltAgent>>,
    pub(crate) reducer: Option<Arc<dyn HistoryReducer>>,
    pub(crate) workspaces: Arc<[PathBuf]>,
    pub(crate) context_providers: Vec<String>,
    pub(crate) host_middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) host_tool_middleware: Vec<Arc<dyn ToolMiddleware>>,
}

impl std::fmt::Debug for BuiltAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltAgent")
            .field("id", &self.definition.id)
            .field("role", &self.role)
            .field(
                "agent_tools",
                &self.children.iter().map(|c| c.id()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl BuiltAgent {
    /// The definition it was built from.
    pub fn definition(&self) -> &Arc<AgentDefinition> {
        &self.definition
    }

    /// Its id.
    pub fn id(&self) -> &AgentId {
        &self.definition.id
    }

    /// How it was built.
    pub fn role(&self) -> AgentRole {
        self.role
    }

    /// The posture it runs under for a caller whose posture is
    /// `air_gapped`: air-gapped when the caller is or the definition is
    /// local-only; never looser than the caller.
    pub fn runs_air_gapped(&self, air_gapped: bool) -> bool {
        air_gapped || self.definition.is_local_only || self.open.is_none()
    }

    fn posture(&self, air_gapped: bool) -> &PostureBuild {
        match (&self.open, self.runs_air_gapped(air_gapped)) {
            (Some(open), false) => open,
            _ => &self.air_gapped,
        }
    }

    /// The harness that runs it for a caller of posture `air_gapped`.
    pub fn harness(&self, air_gapped: bool) -> &AgentHarness {
        &self.posture(air_gapped).harness
    }

    /// The ordinary tools (and context-provider tools) it offers under that
    /// posture, in the definition's order.
    pub fn tools(&self, air_gapped: bool) -> &[String] {
        &self.posture(air_gapped).tools
    }

    /// The tools its definition names that are not offered under that
    /// posture, and why.
    pub fn omitted_tools(&self, air_gapped: bool) -> &[OmittedTool] {
        &self.posture(air_gapped).omitted
    }

    /// The agents it can call, as captured when it was built (a snapshot:
    /// later builds never change them).
    pub fn agent_tools(&self) -> &[Arc<BuiltAgent>] {
        &self.children
    }

    /// The directories its tools receive.
    pub fn workspaces(&self) -> &[PathBuf] {
        &self.workspaces
    }

    /// The names of the context providers attached to it.
    pub fn context_providers(&self) -> &[String] {
        &self.context_providers
    }

    /// Its compaction, if any.
    pub fn reducer(&self) -> Option<&Arc<dyn HistoryReducer>> {
        self.reducer.as_ref()
    }

    /// `messages` as this agent keeps them: without standing instructions,
    /// and compacted.
    pub fn kept_history(&self, messages: Vec<Message>) -> Vec<Message> {
        let messages: Vec<Message> = messages
            .into_iter()
            .filter(|m| !matches!(m, Message::System { .. }))
            .collect();
        match &self.reducer {
            Some(reducer) => reducer.reduce(messages),
            None => messages,
        }
    }

    /// Runs it once for a caller of posture `air_gapped`, statelessly.
    pub async fn run(
        &self,
        request: RunRequest,
        air_gapped: bool,
        events: &EventSink,
    ) -> Result<AgentRun, tinyagents_core::TinyAgentsError> {
        self.harness(air_gapped).run_with(request, events).await
    }

    /// Whether a cached build can serve a request with these host
    /// middlewares and these resolved children.
    pub(crate) fn matches(
        &self,
        definition: &AgentDefinition,
        middleware: &[Arc<dyn Middleware>],
        tool_middleware: &[Arc<dyn ToolMiddleware>],
        children: &[Arc<BuiltAgent>],
    ) -> bool {
        *self.definition == *definition
            && same_arcs(&self.host_middleware, middleware)
            && same_arcs(&self.host_tool_middleware, tool_middleware)
            && same_arcs(&self.children, children)
    }
}

fn same_arcs<T: ?Sized>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// The requested agent of one build request, bound to that request's
/// air-gap posture and to the orchestrator's sessions.
#[derive(Clone)]
pub struct ActiveAgent {
    pub(crate) agent: Arc<BuiltAgent>,
    pub(crate) air_gapped: bool,
    pub(crate) sessions: Arc<SessionManager>,
}

impl std::fmt::Debug for ActiveAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveAgent")
            .field("agent", &self.agent)
            .field("air_gapped", &self.air_gapped)
            .finish()
    }
}

impl ActiveAgent {
    /// The built agent (shared with the orchestrator's cache when cached).
    pub fn agent(&self) -> &Arc<BuiltAgent> {
        &self.agent
    }

    /// Whether its runs are air-gapped (the request's posture, tightened by
    /// a local-only definition).
    pub fn air_gapped(&self) -> bool {
        self.agent.runs_air_gapped(self.air_gapped)
    }

    /// The harness its runs use.
    pub fn harness(&self) -> &AgentHarness {
        self.agent.harness(self.air_gapped)
    }

    /// Runs it without a session: every agent it calls is stateless too.
    pub async fn run(&self, request: RunRequest, events: &EventSink) -> Result<AgentRun, RunError> {
        self.agent
            .run(request, self.air_gapped, events)
            .await
            .map_err(|source| RunError::Run { source })
    }

    /// What a person may read of the session `scope`.
    pub async fn transcript(&self, scope: &SessionScope) -> Result<Vec<ChatTurn>, RunError> {
        self.sessions
            .transcript(scope)
            .await
            .map_err(|source| RunError::Session { source })
    }

    /// What a person may read of the child session of `agent` for
    /// `conversation` inside `scope`: user and assistant text only.
    pub async fn child_transcript(
        &self,
        scope: &SessionScope,
        agent: &AgentId,
        conversation: Option<&str>,
    ) -> Result<Vec<ChatTurn>, RunError> {
        let (child, _) = scope.child(agent, conversation);
        self.transcript(&child).await
    }
}
