//! Runs of the requested agent in a session, and their resumption: the
//! stored conversation goes in, what the run added comes back, and a run
//! that waits for approval keeps its place in the session until it is
//! resumed.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{Message, RunId, RunStatus, args_hash};
use tinyagents_harness::{
    AgentRun, ApprovalDecision, EventSink, ResumeOptions, RunRequest, SuspendedRun,
};

use crate::agent::ActiveAgent;
use crate::error::RunError;
use crate::session::{SessionRecord, SessionScope, Transcript};

/// The run property that holds, while a session run waits for approval,
/// where its conversation stood when it started: the resume that completes
/// it stores what it added. Set by [`ActiveAgent::run_in_session`]; agent
/// tools do not pass it on to their child runs.
pub const SESSION_TURN_PROPERTY: &str = "tinyagents.session_turn";

/// Where a session run's history stood: enough to tell, from its
/// transcript, what the run added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionTurn {
    /// Messages of stored conversation the run was given.
    stored: usize,
    /// Messages of history the run was given (stored and the host's).
    given: usize,
    /// Whether compaction or cleaning changed the stored conversation (then
    /// the session is rewritten whole).
    rewritten: bool,
    /// The hash of the run's input (the input itself stays out of the
    /// stored state's properties: only the transcript, redacted, holds it).
    input_hash: String,
}

impl SessionTurn {
    /// The session a run's properties name, and where its turn started:
    /// a run [`ActiveAgent::run_in_session`] started. A turn that does not
    /// read back or does not hold together (a stored state someone edited)
    /// is not trusted to say where the stored part ends: the conversation
    /// is then saved whole, so the run's turn is not lost.
    fn of(properties: &Map<String, Value>) -> Option<(SessionScope, Self)> {
        let scope = SessionScope::from_properties(properties)?;
        let value = properties.get(SESSION_TURN_PROPERTY)?;
        let turn = serde_json::from_value::<Self>(value.clone())
            .ok()
            .filter(|turn| turn.stored <= turn.given)
            .unwrap_or_else(Self::unknown);
        Some((scope, turn))
    }

    /// A turn whose start is not known: its run's conversation is saved
    /// whole.
    fn unknown() -> Self {
        Self {
            stored: 0,
            given: 0,
            rewritten: true,
            input_hash: String::new(),
        }
    }

    fn write(&self, properties: &mut Map<String, Value>) {
        if let Ok(value) = serde_json::to_value(self) {
            properties.insert(SESSION_TURN_PROPERTY.to_owned(), value);
        }
    }
}

fn input_hash(input: &str) -> String {
    args_hash(&Value::String(input.to_owned()))
}

fn session_error(source: crate::session::SessionError) -> RunError {
    RunError::Session { source }
}

impl ActiveAgent {
    /// Runs it in the session `scope`: the stored conversation (compacted)
    /// comes before `request.history`, the session travels in the run's
    /// properties (so the agents it calls keep child sessions inside it),
    /// and what the run added is appended to the conversation when the run
    /// completes (the conversation is rewritten whole when compaction cuts
    /// it). A failed, cancelled or stopped run leaves the session as it was.
    /// A run that waits for approval leaves it as it was too, and carries
    /// where its conversation stood in its [`SuspendedRun`]: the
    /// [`resume`](Self::resume) that completes it stores what it added.
    pub async fn run_in_session(
        &self,
        scope: &SessionScope,
        mut request: RunRequest,
        events: &EventSink,
    ) -> Result<AgentRun, RunError> {
        let _held = self.sessions.lock(&scope.id).await;
        let mut record = self.sessions.load(scope).await.map_err(session_error)?;
        let stored = Transcript::conversation_only(std::mem::take(&mut record.messages));
        let (history, rewritten) = self.agent.run_history(stored, false);
        let mut history = history.into_conversation();
        let stored = history.len();
        history.append(&mut request.history);
        let turn = SessionTurn {
            stored,
            given: history.len(),
            rewritten,
            input_hash: input_hash(&request.input),
        };
        request.history = history;
        scope.write_to(&mut request.properties);
        turn.write(&mut request.properties);
        let run = self.run(request, events).await?;
        self.store_turn(scope, &turn, record, &run).await?;
        Ok(run)
    }

    /// Resumes a run of this agent suspended for approval (see
    /// `AgentHarness::resume`: every pending call needs a decision, an
    /// approval runs its call at most once). A run started in a session
    /// goes on in it: when it completes, what it added since it started is
    /// stored in the session, as [`run_in_session`](Self::run_in_session)
    /// would have stored it.
    pub async fn resume(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        events: &EventSink,
    ) -> Result<AgentRun, RunError> {
        self.resume_with(suspended, decisions, ResumeOptions::default(), events)
            .await
    }

    /// [`resume`](Self::resume) with options (a cancellation token).
    pub async fn resume_with(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, RunError> {
        let session = SessionTurn::of(&suspended.properties);
        let _held = match &session {
            Some((scope, _)) => Some(self.sessions.lock(&scope.id).await),
            None => None,
        };
        let run = self
            .harness()
            .resume(suspended, decisions, options, events)
            .await
            .map_err(|source| RunError::Run { source })?;
        if let Some((scope, turn)) = session {
            let record = self.sessions.load(&scope).await.map_err(session_error)?;
            self.store_turn(&scope, &turn, record, &run).await?;
        }
        Ok(run)
    }

    /// Recovers a run of this agent whose process died (see
    /// `AgentHarness::recover`; it needs a ledger). A run started in a
    /// session goes on in it, as after a [`resume`](Self::resume): when the
    /// recovered run completes, what it added is stored.
    pub async fn recover(
        &self,
        run_id: &RunId,
        options: ResumeOptions,
        events: &EventSink,
    ) -> Result<AgentRun, RunError> {
        let run = self
            .harness()
            .recover(run_id, options, events)
            .await
            .map_err(|source| RunError::Run { source })?;
        if let Some((scope, turn)) = SessionTurn::of(&run.properties) {
            let _held = self.sessions.lock(&scope.id).await;
            let record = self.sessions.load(&scope).await.map_err(session_error)?;
            self.store_turn(&scope, &turn, record, &run).await?;
        }
        Ok(run)
    }

    /// Stores what a completed session run added: appended after what the
    /// session holds, or, when the transcript no longer shows where the
    /// stored part ends, the whole conversation as this agent keeps it.
    async fn store_turn(
        &self,
        scope: &SessionScope,
        turn: &SessionTurn,
        record: SessionRecord,
        run: &AgentRun,
    ) -> Result<(), RunError> {
        if !matches!(run.status, RunStatus::Completed | RunStatus::Terminated) {
            return Ok(());
        }
        // Appending keeps the stored record's agent: only when it is this
        // one (a whole save would set it).
        let same_record = record.revision > 0 && record.agent_id.as_ref() == Some(self.agent.id());
        // The run's input is where the history it was given ends.
        let instruction = usize::from(matches!(run.messages.first(), Some(Message::System { .. })));
        let input = match run.messages.get(instruction + turn.given) {
            Some(Message::User { content }) if input_hash(content) == turn.input_hash => {
                Some(content.as_str())
            }
            _ => None,
        };
        let appended = input
            .and_then(|input| {
                self.agent
                    .appended_from(&run.messages, turn.stored, turn.given, input)
            })
            .filter(|_| same_record && !turn.rewritten);
        match appended {
            // `appended_from` only answers an index inside the messages.
            Some(start) => {
                self.sessions
                    .append(scope, record.revision, &run.messages[start..])
                    .await
                    .map_err(session_error)?;
            }
            None => {
                let saved = SessionRecord {
                    agent_id: Some(self.agent.id().clone()),
                    messages: self.agent.kept_history(run.messages.clone()),
                    ..record
                };
                self.sessions
                    .save(scope, &saved)
                    .await
                    .map_err(session_error)?;
            }
        }
        Ok(())
    }
}
