//! Agents defined in code: [`Agent::builder`] over the same build as the
//! orchestrator's definitions, [`Agent::as_tool`] to hand one agent to
//! another, and runs that return a result ([`Agent::run`]) or a handle
//! that streams the run's events ([`Agent::stream`]).

mod builder;
mod recipe;
mod tool;
mod typed;

use std::sync::Arc;

use tinyagents_core::{AgentId, CancellationToken, RunId};
use tinyagents_harness::{
    AgentHarness, AgentRun, ApprovalDecision, EventSink, ResumeOptions, RunHandle, RunRequest,
    SuspendedRun,
};

pub use builder::AgentBuilder;
pub use tool::AgentTool;
pub use typed::{OUTPUT_RETRIES, Typed, output_schema};

use crate::agent::ActiveAgent;
use crate::error::RunError;
use crate::session::{ChatTurn, SessionScope};
use recipe::Recipe;

/// An agent: a model, its instruction, its tools (other agents among them)
/// and the policies, limits and ledger around them, with the governance of
/// every orchestrated agent.
///
/// ```
/// use tinyagents_core::ChatResponse;
/// use tinyagents_models::ScriptedModel;
/// use tinyagents_orchestrator::Agent;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("greeter")
///     .model(ScriptedModel::new([ChatResponse::text("Hello!")]))
///     .instructions("Greet the user.")
///     .build()?;
/// assert_eq!(agent.run("Hi").await?.final_text, "Hello!");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Agent {
    pub(crate) recipe: Arc<Recipe>,
    pub(crate) active: ActiveAgent,
}

impl AsRef<AgentHarness> for Agent {
    fn as_ref(&self) -> &AgentHarness {
        self.harness()
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", self.id())
            .field("tools", &self.recipe.definition.tools)
            .field(
                "agent_tools",
                &self
                    .recipe
                    .agent_tools
                    .iter()
                    .map(|t| &t.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts defining the agent `id` (its sessions and ledger rows are
    /// keyed by it).
    pub fn builder(id: impl Into<AgentId>) -> AgentBuilder {
        AgentBuilder::new(id.into())
    }

    /// Its id.
    pub fn id(&self) -> &AgentId {
        self.active.agent().id()
    }

    /// The harness its runs use.
    pub fn harness(&self) -> &AgentHarness {
        self.active.harness()
    }

    /// The same agent as the orchestrator hands out: its build, posture and
    /// sessions.
    pub fn active(&self) -> &ActiveAgent {
        &self.active
    }

    /// Runs it once on `input`, without a session.
    pub async fn run(&self, input: impl Into<String>) -> Result<AgentRun, RunError> {
        self.active
            .run(RunRequest::new(input), &EventSink::none())
            .await
    }

    /// Runs it on `request`, sending its events to `events`.
    pub async fn run_with(
        &self,
        request: RunRequest,
        events: &EventSink,
    ) -> Result<AgentRun, RunError> {
        self.active.run(request, events).await
    }

    /// Runs it on `input` and returns the run's handle: a stream of its
    /// events that, awaited (or [`wait`](RunHandle::wait)ed), gives the
    /// result. Reading and awaiting in any order cannot deadlock.
    pub fn stream(&self, input: impl Into<String>) -> RunHandle<'_, RunError> {
        self.start(RunRequest::new(input))
    }

    /// [`stream`](Self::stream) for a whole request.
    pub fn start(&self, mut request: RunRequest) -> RunHandle<'_, RunError> {
        let cancel = cancellation(&mut request.cancel);
        RunHandle::driven(
            self.harness().event_buffer(),
            cancel,
            move |sink| async move { self.active.run(request, &sink).await },
        )
    }

    /// Runs it on `input` in the session `scope`: the conversation so far
    /// comes first, and what the run adds is stored when it completes (or,
    /// when it waits for approval, when the [`resume`](Self::resume) that
    /// completes it does). Agents it calls keep child sessions inside it.
    pub async fn run_in_session(
        &self,
        scope: &SessionScope,
        input: impl Into<String>,
    ) -> Result<AgentRun, RunError> {
        self.active
            .run_in_session(scope, RunRequest::new(input), &EventSink::none())
            .await
    }

    /// [`run_in_session`](Self::run_in_session) for a whole request, as a
    /// handle.
    pub fn start_in_session<'a>(
        &'a self,
        scope: &'a SessionScope,
        mut request: RunRequest,
    ) -> RunHandle<'a, RunError> {
        let cancel = cancellation(&mut request.cancel);
        RunHandle::driven(
            self.harness().event_buffer(),
            cancel,
            move |sink| async move { self.active.run_in_session(scope, request, &sink).await },
        )
    }

    /// Resumes a run suspended for approval with a decision for each
    /// waiting call (`PendingCall::approve` / `deny`). The suspended state
    /// may have been stored (it is serde) and read back in another
    /// process. A session run goes on in its session.
    pub async fn resume(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
    ) -> Result<AgentRun, RunError> {
        self.active
            .resume(suspended, decisions, &EventSink::none())
            .await
    }

    /// [`resume`](Self::resume) with options (its cancellation token), as
    /// [`start_resume`](Self::start_resume) takes them.
    pub async fn resume_with(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
    ) -> Result<AgentRun, RunError> {
        self.active
            .resume_with(suspended, decisions, options, &EventSink::none())
            .await
    }

    /// [`resume`](Self::resume) as a handle.
    pub fn start_resume<'a>(
        &'a self,
        suspended: SuspendedRun,
        decisions: &'a [ApprovalDecision],
        mut options: ResumeOptions,
    ) -> RunHandle<'a, RunError> {
        let cancel = cancellation(&mut options.cancel);
        RunHandle::driven(
            self.harness().event_buffer(),
            cancel,
            move |sink| async move {
                self.active
                    .resume_with(suspended, decisions, options, &sink)
                    .await
            },
        )
    }

    /// Recovers a run whose process died, from its ledger: settled calls
    /// answer from their rows, calls in doubt are put to their tools or
    /// listed, and the run goes on.
    pub async fn recover(&self, run_id: &RunId) -> Result<AgentRun, RunError> {
        self.active
            .recover(run_id, ResumeOptions::default(), &EventSink::none())
            .await
    }

    /// [`recover`](Self::recover) with options (its cancellation token, and
    /// the decisions of a resume that was cut short), as
    /// [`start_recover`](Self::start_recover) takes them.
    pub async fn recover_with(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
    ) -> Result<AgentRun, RunError> {
        self.active
            .recover(run_id, options, &EventSink::none())
            .await
    }

    /// [`recover`](Self::recover) as a handle, streaming the recovered
    /// run's events (`options.cancel` cancels it).
    pub fn start_recover<'a>(
        &'a self,
        run_id: &'a RunId,
        mut options: ResumeOptions,
    ) -> RunHandle<'a, RunError> {
        let cancel = cancellation(&mut options.cancel);
        RunHandle::driven(
            self.harness().event_buffer(),
            cancel,
            move |sink| async move { self.active.recover(run_id, options, &sink).await },
        )
    }

    /// What a person may read of the session `scope`.
    pub async fn transcript(&self, scope: &SessionScope) -> Result<Vec<ChatTurn>, RunError> {
        self.active.transcript(scope).await
    }
}

fn cancellation(slot: &mut Option<CancellationToken>) -> CancellationToken {
    slot.get_or_insert_with(CancellationToken::new).clone()
}
