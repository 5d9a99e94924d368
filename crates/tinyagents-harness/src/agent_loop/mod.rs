//! The agent loop: model, admission, execution, fold, repeat.
//!
//! Every model-issued call goes through one path: [`admit`] (lookup,
//! arguments, budget, `before_tool`, gate), [`execute`] (the `wrap_tool`
//! onion under the call's timeout, concurrency-safe calls together, others
//! alone) and [`fold`] (results in call order, `after_tool`, transcript).

mod admit;
mod execute;
mod fold;
mod ledger;
mod nested;
mod resume;
mod serve;

use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

use serde_json::Value;
use tinyagents_core::{
    AgentEvent, CallId, ChatRequest, ChatResponse, LimitBehavior, Message, ModelDelta, RunContext,
    RunId, RunStatus, State, TinyAgentsError,
};
use tinyagents_middleware::OutputVerdict;
use tracing::Instrument;

use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{AgentRun, RunRequest};
use crate::tool::RunShared;

pub(crate) use admit::{Admission, Slot};
pub(crate) use nested::DisabledRunner;
pub use resume::ResumeOptions;

/// What a run accumulates besides its state.
#[derive(Debug, Default)]
pub(crate) struct RunAcc {
    pub(crate) metadata: HashMap<CallId, Value>,
    pub(crate) limit_reported: bool,
}

/// How a turn ends the loop, if it does.
pub(crate) enum TurnEnd {
    Continue,
    Finish(RunStatus, String),
    Limit(TinyAgentsError),
    Fail(TinyAgentsError),
    Suspend(Vec<crate::run::TurnEntry>),
}

enum ModelOutcome {
    Response(ChatResponse),
    Cancelled,
    Limit(TinyAgentsError),
}

/// Maps a hook's error to a fail-closed denial that names the hook.
pub(crate) fn denied_by(name: &str, error: &TinyAgentsError) -> TinyAgentsError {
    match error {
        TinyAgentsError::Denied { .. } => error.clone(),
        other => TinyAgentsError::Denied {
            by: name.to_owned(),
            reason: other.to_string(),
        },
    }
}

pub(crate) fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl AgentHarness {
    /// Runs the agent on `input` to its end.
    pub async fn run(&self, input: impl Into<String>) -> Result<AgentRun, TinyAgentsError> {
        self.run_with(RunRequest::new(input), &EventSink::none())
            .await
    }

    /// Runs the agent, sending its events to `events`.
    pub async fn run_with(
        &self,
        request: RunRequest,
        events: &EventSink,
    ) -> Result<AgentRun, TinyAgentsError> {
        let (mut ctx, mut state) = self.prepare(request);
        // Issue 10 item 8: the run's events give way to its cancellation and wall clock.
        let events = &events.bounded_by(&ctx);
        if ctx.depth > ctx.limits.max_depth {
            let refused = Err(TinyAgentsError::LimitExceeded {
                kind: tinyagents_core::LimitKind::Depth,
                limit: u64::from(ctx.limits.max_depth),
                used: u64::from(ctx.depth),
            });
            return report_failure(events, refused).await;
        }
        self.share_with_tools(&mut ctx, events);
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format_args!("invoke_agent {}", self.agent_name()),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %self.agent_name(),
            gen_ai.conversation.id = %ctx.run_id,
        );
        async {
            events
                .emit(|| AgentEvent::RunStarted {
                    run_id: ctx.run_id.clone(),
                    agent_id: ctx.agent_id.clone(),
                })
                .await;
            let mut acc = RunAcc::default();
            let result = self.drive(&mut ctx, &mut state, events, &mut acc).await;
            report_failure(events, result).await
        }
        .instrument(span)
        .await
    }

    fn agent_name(&self) -> &str {
        self.agent_id.as_ref().map_or("agent", |id| id.as_str())
    }

    /// Attaches what tools may know of the run (see `ToolExecutionContext`).
    pub(crate) fn share_with_tools(&self, ctx: &mut RunContext, events: &EventSink) {
        let shared = RunShared {
            run_id: ctx.run_id.clone(),
            agent_id: ctx.agent_id.clone(),
            depth: ctx.depth,
            properties: Arc::clone(&ctx.properties),
            tracker: Arc::clone(ctx.tracker_arc()),
            events: events.clone(),
        };
        ctx.extensions.insert(Arc::new(shared));
    }

    fn prepare(&self, request: RunRequest) -> (RunContext, State) {
        let run_id = request.run_id.unwrap_or_else(RunId::generate);
        let limits = self.limits.clone();
        let mut ctx = match request.tracker {
            Some(tracker) => RunContext::with_tracker(run_id, limits, tracker),
            None => RunContext::new(run_id, limits),
        };
        if let Some(token) = request.cancel {
            ctx = ctx.with_cancellation(token);
        }
        ctx.agent_id = self.agent_id.clone();
        ctx.depth = request.depth;
        ctx.capture = self.capture;
        ctx.properties = Arc::new(request.properties);
        ctx.extensions = request.extensions;
        ctx.extensions.insert(Arc::clone(&self.tools));
        let mut messages = Vec::with_capacity(request.history.len() + 2);
        if let Some(prompt) = &self.system_prompt {
            messages.push(Message::system(prompt.clone()));
        }
        // Calls of an earlier conversation keep their ids; this run's
        // calls number on from them, so no id repeats in the transcript.
        let earlier_calls = request
            .history
            .iter()
            .map(|m| match m {
                Message::Assistant { tool_calls, .. } => tool_calls.len() as u64,
                _ => 0,
            })
            .sum();
        messages.extend(request.history);
        messages.push(Message::user(request.input));
        let mut state = State::new(messages);
        state.calls_issued = earlier_calls;
        (ctx, state)
    }

    /// The loop proper, from a state whose last message awaits the model.
    pub(crate) async fn drive(
        &self,
        ctx: &mut RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
    ) -> Result<AgentRun, TinyAgentsError> {
        loop {
            if ctx.is_cancelled() {
                let text = state.last_assistant_text().unwrap_or_default().to_owned();
                return Ok(self
                    .finish(ctx, state, events, acc, RunStatus::Cancelled, text)
                    .await);
            }
            if let Err(limit) = ctx.check_wall_clock() {
                return self.limit_reached(ctx, state, events, acc, limit).await;
            }
            for middleware in &self.middlewares {
                middleware
                    .before_model(ctx, state)
                    .await
                    .map_err(|e| denied_by(middleware.name(), &e))?;
            }
            if let Err(limit) = ctx.tracker().try_reserve_model_call() {
                return self.limit_reached(ctx, state, events, acc, limit).await;
            }
            let mut response = match self.call_model(ctx, state, events).await? {
                ModelOutcome::Response(response) => response,
                ModelOutcome::Cancelled => {
                    let text = state.last_assistant_text().unwrap_or_default().to_owned();
                    return Ok(self
                        .finish(ctx, state, events, acc, RunStatus::Cancelled, text)
                        .await);
                }
                ModelOutcome::Limit(limit) => {
                    return self.limit_reached(ctx, state, events, acc, limit).await;
                }
            };
            for middleware in self.middlewares.iter().rev() {
                middleware
                    .after_model(ctx, state, &mut response)
                    .await
                    .map_err(|e| denied_by(middleware.name(), &e))?;
            }
            let token_limit = ctx.tracker().record_tokens(response.usage.total()).err();
            state.usage += response.usage;
            if response.tool_calls.is_empty() {
                let text = self.screen_output(ctx, &response.content).await?;
                state.messages.push(Message::Assistant {
                    content: text.clone(),
                    tool_calls: Vec::new(),
                    reasoning: response.reasoning,
                });
                if let Some(limit) = token_limit {
                    return self.limit_reached(ctx, state, events, acc, limit).await;
                }
                return Ok(self
                    .finish(ctx, state, events, acc, RunStatus::Completed, text)
                    .await);
            }
            let end = self
                .tool_turn(ctx, state, events, acc, response, token_limit)
                .await?;
            if let Some(run) = self.end_turn(ctx, state, events, acc, end).await {
                return run;
            }
        }
    }

    /// What the loop does after a tool turn: `None` to ask the model again,
    /// or how the run ends. A final answer a tool produced (terminate,
    /// return-direct) is screened like the model's.
    pub(crate) async fn end_turn(
        &self,
        ctx: &RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        end: TurnEnd,
    ) -> Option<Result<AgentRun, TinyAgentsError>> {
        Some(match end {
            TurnEnd::Continue => return None,
            TurnEnd::Finish(status, text) => match self.screen_output(ctx, &text).await {
                Ok(text) => Ok(self.finish(ctx, state, events, acc, status, text).await),
                Err(blocked) => Err(blocked),
            },
            TurnEnd::Limit(limit) => self.limit_reached(ctx, state, events, acc, limit).await,
            TurnEnd::Fail(error) => Err(error),
            TurnEnd::Suspend(entries) => Ok(self.suspend(ctx, state, events, acc, entries).await),
        })
    }

    async fn call_model(
        &self,
        ctx: &RunContext,
        state: &mut State,
        events: &EventSink,
    ) -> Result<ModelOutcome, TinyAgentsError> {
        state.turn += 1;
        let turn = state.turn;
        events.emit(|| AgentEvent::ModelStarted { turn }).await;
        let started = Instant::now();
        let forward = |delta: ModelDelta| events.try_emit(AgentEvent::ModelDelta { turn, delta });
        let request = ChatRequest {
            messages: &state.messages,
            tools: &self.model_tools,
            options: &self.options,
            deltas: if events.is_active() {
                Some(&forward)
            } else {
                None
            },
        };
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {}", self.model.name()),
            gen_ai.operation.name = "chat",
            gen_ai.request.model = %self.model.name(),
        );
        let call = self.model.chat(request).instrument(span);
        let answer = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => return Ok(ModelOutcome::Cancelled),
            answer = with_deadline(ctx.remaining(), call) => answer,
        };
        let response = match answer {
            None => {
                return Ok(ModelOutcome::Limit(
                    ctx.check_wall_clock()
                        .err()
                        .unwrap_or(TinyAgentsError::LimitExceeded {
                            kind: tinyagents_core::LimitKind::WallClock,
                            limit: ctx
                                .limits
                                .wall_clock
                                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                            used: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
                        }),
                ));
            }
            Some(result) => result?,
        };
        let capture = ctx.capture.model_io;
        events
            .emit(|| AgentEvent::ModelCompleted {
                turn,
                usage: response.usage,
                duration_ms: millis(started),
                tool_calls: u32::try_from(response.tool_calls.len()).unwrap_or(u32::MAX),
                content: capture.then(|| response.content.clone()),
            })
            .await;
        Ok(ModelOutcome::Response(response))
    }

    async fn screen_output(&self, ctx: &RunContext, text: &str) -> Result<String, TinyAgentsError> {
        let Some(gate) = &self.gate else {
            return Ok(text.to_owned());
        };
        match gate.screen_output(ctx, text).await {
            Ok(OutputVerdict::Allow) => Ok(text.to_owned()),
            Ok(OutputVerdict::Rewrite(replacement)) => Ok(replacement),
            Ok(OutputVerdict::Block { reason }) => Err(TinyAgentsError::Denied {
                by: "security gate (output screening)".to_owned(),
                reason,
            }),
            Err(error) => Err(TinyAgentsError::Denied {
                by: "security gate (output screening)".to_owned(),
                reason: format!("screening failed, output blocked: {error}"),
            }),
        }
    }

    pub(crate) async fn limit_reached(
        &self,
        ctx: &RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        limit: TinyAgentsError,
    ) -> Result<AgentRun, TinyAgentsError> {
        let TinyAgentsError::LimitExceeded { kind, .. } = &limit else {
            return Err(limit);
        };
        report_limit(events, acc, &limit).await;
        match ctx.limits.behavior {
            LimitBehavior::Error => {
                self.finish_in_ledger(&ctx.run_id, events).await;
                Err(limit)
            }
            LimitBehavior::Stop => {
                let text = state.last_assistant_text().unwrap_or_default().to_owned();
                Ok(self
                    .finish(
                        ctx,
                        state,
                        events,
                        acc,
                        RunStatus::LimitReached(*kind),
                        text,
                    )
                    .await)
            }
        }
    }

    pub(crate) async fn finish(
        &self,
        ctx: &RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        status: RunStatus,
        final_text: String,
    ) -> AgentRun {
        if status != RunStatus::AwaitingApproval {
            self.finish_in_ledger(&ctx.run_id, events).await;
        }
        events
            .emit(|| AgentEvent::RunCompleted {
                status,
                usage: state.usage,
            })
            .await;
        AgentRun {
            run_id: ctx.run_id.clone(),
            status,
            final_text,
            messages: std::mem::take(&mut state.messages),
            usage: state.usage,
            budget: ctx.tracker().counts(),
            tool_metadata: std::mem::take(&mut acc.metadata),
            suspended: None,
        }
    }
}

/// Emits `RunFailed` when a run ends with an error, so every run's stream
/// ends with a terminal event.
pub(crate) async fn report_failure(
    events: &EventSink,
    result: Result<AgentRun, TinyAgentsError>,
) -> Result<AgentRun, TinyAgentsError> {
    if let Err(error) = &result {
        events
            .emit(|| AgentEvent::RunFailed {
                error: error.to_string(),
            })
            .await;
    }
    result
}

/// Emits `LimitReached` for `limit`, once per run.
pub(crate) async fn report_limit(events: &EventSink, acc: &mut RunAcc, limit: &TinyAgentsError) {
    if let TinyAgentsError::LimitExceeded { kind, limit, used } = limit
        && !acc.limit_reported
    {
        acc.limit_reported = true;
        events
            .emit(|| AgentEvent::LimitReached {
                kind: *kind,
                limit: *limit,
                used: *used,
            })
            .await;
    }
}

/// Runs `future` within `deadline`; `None` when the deadline passed first.
pub(crate) async fn with_deadline<F: std::future::Future>(
    deadline: Option<std::time::Duration>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(limit) => tokio::time::timeout(limit, future).await.ok(),
        None => Some(future.await),
    }
}
