//! The agent loop: model, admission, execution, settlement, repeat.
//!
//! A [`Run`] is the loop's state as a value: the harness (configuration),
//! the run's context and transcript, its event emitter and what it
//! accumulates. Every call of a turn goes through the call path in
//! `crate::call` (one admission table, one execution, one settlement), and
//! a tool's nested calls reach the same path through the runner the loop
//! services while it polls the tool ([`nested`], [`serve`]).

mod approval;
mod batch;
pub(crate) mod checkpoint;
mod ledger;
mod lent;
mod opening;
mod replay;
pub(crate) mod spending;
pub(crate) mod turn;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use std::sync::Arc;
use tokio::time::Instant;

use serde_json::Value;
use tinyagents_core::{
    AgentEvent, CallId, ChatRequest, ChatResponse, LimitBehavior, LimitTracker, Message,
    ModelDelta, ModelOptions, RunContext, RunId, RunStatus, Spend, SpendCaps, Spent, State,
    TinyAgentsError,
};
use tinyagents_middleware::{Hook, OutputVerdict};
use tracing::Instrument;

use crate::call::RunShared;
use crate::call::{CallEnv, Redaction, ToolEvents, contain, millis, panic_text, panicked, until};
use crate::events::EventSink;
use crate::events::segment::SegmentGuard;
use crate::harness::AgentHarness;
use crate::mutation::{Mutation, planted};
use crate::run::{AgentRun, RunRequest};
use crate::trace::{self, Segment};

/// One run segment in progress: what the loop's functions share.
pub(crate) struct Run<'h> {
    pub(crate) harness: &'h AgentHarness,
    pub(crate) ctx: RunContext,
    pub(crate) state: State,
    /// Every event of the run goes out through this one emitter.
    pub(crate) events: ToolEvents,
    /// What tools may know of the run (their `ToolExecutionContext`).
    pub(crate) shared: Arc<RunShared>,
    /// The host-only metadata of settled calls' results.
    pub(crate) metadata: HashMap<CallId, Value>,
    /// Whether `LimitReached` was sent (once per run).
    pub(crate) limit_reported: bool,
    /// What this segment has persisted of its checkpoint; `None` until its
    /// first, and after a failed write (the next one writes a base).
    pub(crate) cursor: Option<checkpoint::CheckpointCursor>,
    /// In a recovery, the decisions already made on the calls its turn
    /// waited on (`ResumeOptions::decisions`); `None` in any other segment.
    pub(crate) decided: Option<Vec<crate::run::ApprovalDecision>>,
    /// The model options of this run when they are not the harness's: the
    /// run asked for an output schema.
    pub(crate) options: Option<ModelOptions>,
    /// The last turn's slots, emptied: the next turn's buffer.
    pub(crate) spare_slots: Vec<turn::Slot<'h>>,
    /// While a turn runs: the transcript's index of its assistant message
    /// and which of its calls lent their arguments to their slots
    /// (`lent.rs`).
    pub(crate) lent: Option<lent::Lent>,
    /// The execution context its calls share when no tool keeps it.
    pub(crate) contexts: crate::call::SpareContext,
    /// The default prompt estimate's count of the transcript.
    pub(crate) prompt: spending::PromptTally,
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

impl AgentHarness {
    /// Runs the agent on `input` to its end.
    pub async fn run(&self, input: impl Into<String>) -> Result<AgentRun, TinyAgentsError> {
        self.run_with(RunRequest::new(input), &EventSink::none())
            .await
    }

    /// Runs the agent, sending its events to `events`.
    ///
    /// The request is prepared, and the run made, when this is called, not
    /// when the future is first polled: the future holds the run once (not
    /// the request it was made from, nor a copy of its context and state
    /// beside it), which matters because a run's future is copied whole
    /// into a delegating call's, and parked runs hold it.
    pub fn run_with<'a>(
        &'a self,
        request: RunRequest,
        events: &'a EventSink,
    ) -> impl Future<Output = Result<AgentRun, TinyAgentsError>> + Send + 'a {
        let (ctx, state) = self.prepare(request);
        let (guard, events) = SegmentGuard::open(events, ctx.run_id.clone());
        let mut guard = guard.unarmed();
        let mut run = self.open(ctx, state, &events);
        // The run is used where it lies, never moved out: the future holds
        // it once. A future dropped before it is polled started nothing and
        // closes nothing.
        async move {
            guard.arm();
            let result = run.run_segment(&events).await;
            guard.disarm();
            result
        }
    }

    /// The agent's name in spans: its id, or `agent`.
    pub(crate) fn agent_name(&self) -> &str {
        self.calls
            .agent_id
            .as_ref()
            .map_or("agent", |id| id.as_str())
    }

    /// Opens a run segment over a prepared context and state.
    pub(crate) fn open<'h>(&'h self, ctx: RunContext, state: State, events: &EventSink) -> Run<'h> {
        // The run's events give way to its cancellation and wall clock.
        let events = &events.bounded_by(&ctx);
        let shared = Arc::new(RunShared {
            run_id: ctx.run_id.clone(),
            agent_id: ctx.agent_id.clone(),
            depth: ctx.depth,
            properties: Arc::clone(&ctx.properties),
            tracker: Arc::clone(ctx.tracker_arc()),
            spend: ctx.spend().clone(),
            events: events.downgrade(),
        });
        let redaction = Redaction::new(Arc::clone(&self.calls.middlewares));
        let options = ctx
            .properties
            .get(crate::run::OUTPUT_SCHEMA_PROPERTY)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .map(|schema| ModelOptions {
                output_schema: Some(schema),
                ..self.options.clone()
            });
        Run {
            harness: self,
            events: ToolEvents::new(events.clone(), ctx.capture.tool_io, redaction),
            ctx,
            state,
            shared,
            metadata: HashMap::new(),
            limit_reported: false,
            cursor: None,
            decided: None,
            options,
            spare_slots: Vec::new(),
            lent: None,
            contexts: crate::call::SpareContext::default(),
            prompt: spending::PromptTally::default(),
        }
    }

    fn prepare(&self, request: RunRequest) -> (RunContext, State) {
        let run_id = request.run_id.unwrap_or_else(RunId::generate);
        let limits = self.limits.clone();
        let caps = SpendCaps::of(&limits);
        let agent = self.calls.agent_id.clone();
        let spend = match &request.spend {
            Some(parent) => parent.child(run_id.clone(), agent, caps),
            None => Spend::root(
                run_id.clone(),
                agent,
                caps,
                Spent::default(),
                self.pricing.prices.clone(),
            ),
        };
        let tracker = request
            .tracker
            .unwrap_or_else(|| Arc::new(LimitTracker::new(&limits)));
        let mut ctx = RunContext::with_budget(run_id, limits, tracker, spend);
        if let Some(token) = request.cancel {
            ctx = ctx.with_cancellation(token);
        }
        ctx.agent_id = self.calls.agent_id.clone();
        ctx.depth = request.depth;
        ctx.capture = self.capture;
        ctx.properties = Arc::new(request.properties);
        ctx.extensions = request.extensions;
        ctx.extensions.insert(Arc::clone(&self.calls.tools));
        let (messages, earlier_calls) = opening::opening(
            self.system_prompt.as_deref(),
            request.history,
            request.leading_instruction,
            request.input,
        );
        let mut state = State::new(messages);
        state.calls_issued = earlier_calls;
        (ctx, state)
    }
}

impl Run<'_> {
    /// [`AgentHarness::run_with`]'s segment, on the segment's own sink
    /// (`events`), under its `invoke_agent` span: announced, refused when
    /// deeper than `max_depth` or when the run id is taken, else driven. Each await
    /// is instrumented on its own (not one async block around them all).
    async fn run_segment(&mut self, events: &EventSink) -> Result<AgentRun, TinyAgentsError> {
        let harness = self.harness;
        let ctx = &self.ctx;
        let span = trace::invoke_agent(
            harness,
            &ctx.run_id,
            &ctx.properties,
            ctx.depth,
            Segment::Run,
        );
        announce(&events.bounded_by(ctx), &ctx.run_id, harness)
            .instrument(span.clone())
            .await;
        let result = if self.ctx.depth > self.ctx.limits.max_depth {
            let refused = TinyAgentsError::LimitExceeded {
                kind: tinyagents_core::LimitKind::Depth,
                limit: u64::from(self.ctx.limits.max_depth),
                used: u64::from(self.ctx.depth),
            };
            report_failure(events, Err(refused)).await
        } else if let Err(refused) = harness.claim_run(&self.ctx.run_id).await {
            report_failure(events, Err(refused)).await
        } else {
            let result = self.drive().instrument(span.clone()).await;
            report_failure(self.sink(), result).await
        };
        trace::run_ended(&span, &result, harness);
        result
    }

    /// What every call of this run is made in.
    pub(crate) fn env(&self) -> CallEnv<'_> {
        CallEnv {
            path: &self.harness.calls,
            ctx: &self.ctx,
            state: &self.state,
            events: &self.events,
            shared: &self.shared,
            contexts: &self.contexts,
        }
    }

    /// The sink for events that are not tool events.
    pub(crate) fn sink(&self) -> &EventSink {
        self.events.sink()
    }

    /// The loop proper, from a state whose last message awaits the model.
    pub(crate) async fn drive(&mut self) -> Result<AgentRun, TinyAgentsError> {
        let harness = self.harness;
        loop {
            if self.ctx.is_cancelled() {
                return Ok(self.finish_with_last_text(RunStatus::Cancelled).await);
            }
            if let Err(limit) = self.ctx.check_wall_clock() {
                return self.limit_reached(limit).await;
            }
            for site in harness.calls.middlewares.with(Hook::BeforeModel) {
                let hook = site.build(|m| m.before_model(&mut self.ctx, &mut self.state));
                contain(site.name(), hook).await?;
            }
            if let Err(limit) = self.ctx.tracker().try_reserve_model_call() {
                return self.limit_reached(limit).await;
            }
            let held = match self.reserve_model_call() {
                Ok(held) => held,
                Err(limit @ TinyAgentsError::LimitExceeded { .. }) => {
                    return self.limit_reached(limit).await;
                }
                // As a model call that failed: the run fails, nothing was
                // spent.
                Err(error) => return Err(error),
            };
            let mut response = match self.call_model(held).await? {
                ModelOutcome::Response(response) => response,
                ModelOutcome::Cancelled => {
                    return Ok(self.finish_with_last_text(RunStatus::Cancelled).await);
                }
                ModelOutcome::Limit(limit) => return self.limit_reached(limit).await,
            };
            for site in harness.calls.middlewares.with(Hook::AfterModel).rev() {
                let hook = site.build(|m| m.after_model(&mut self.ctx, &self.state, &mut response));
                contain(site.name(), hook).await?;
            }
            // A call may spend past its reservation (its prompt was
            // under-estimated): a response that crossed a cap has its calls
            // refused.
            let token_limit = self.ctx.spend().passed_cap();
            self.state.usage += response.usage;
            if response.tool_calls.is_empty() {
                let text = self.screen_output(&response.content).await?;
                self.state.messages.push(Message::Assistant {
                    content: text.clone(),
                    tool_calls: Vec::new(),
                    reasoning: response.reasoning,
                });
                if let Some(limit) = token_limit {
                    return self.limit_reached(limit).await;
                }
                return Ok(self.finish(RunStatus::Completed, text).await);
            }
            let end = self.tool_turn(response, token_limit).await?;
            if let Some(run) = self.end_turn(end).await {
                return run;
            }
        }
    }

    /// What the loop does after a tool turn: `None` to ask the model again,
    /// or how the run ends. A final answer a tool produced (terminate,
    /// return-direct) is screened like the model's.
    pub(crate) async fn end_turn(
        &mut self,
        end: TurnEnd,
    ) -> Option<Result<AgentRun, TinyAgentsError>> {
        Some(match end {
            TurnEnd::Continue => return None,
            TurnEnd::Finish(status, text) => match self.screen_output(&text).await {
                Ok(text) => Ok(self.finish(status, text).await),
                Err(blocked) => Err(blocked),
            },
            TurnEnd::Limit(limit) => self.limit_reached(limit).await,
            TurnEnd::Fail(error) => Err(error),
            TurnEnd::Suspend(entries) => Ok(self.suspend(entries).await),
        })
    }

    /// Continues a run whose last message awaits either the model or the
    /// end of a turn.
    pub(crate) async fn continue_after(
        &mut self,
        end: TurnEnd,
    ) -> Result<AgentRun, TinyAgentsError> {
        match self.end_turn(end).await {
            Some(run) => run,
            None => self.drive().await,
        }
    }

    /// The model options of this run's calls.
    pub(crate) fn request_options(&self) -> &ModelOptions {
        self.options.as_ref().unwrap_or(&self.harness.options)
    }

    async fn call_model(
        &mut self,
        held: spending::HeldCall,
    ) -> Result<ModelOutcome, TinyAgentsError> {
        let harness = self.harness;
        self.state.turn += 1;
        let turn = self.state.turn;
        let events = self.events.sink();
        events.emit(|| AgentEvent::ModelStarted { turn }).await;
        let started = Instant::now();
        let forward = |delta: ModelDelta| events.try_emit(AgentEvent::ModelDelta { turn, delta });
        let request = ChatRequest {
            messages: &self.state.messages,
            tools: &harness.calls.model_tools,
            options: self.request_options(),
            deltas: if events.is_active() {
                Some(&forward)
            } else {
                None
            },
        };
        let redaction = self.events.redaction();
        let span = trace::chat(harness, &self.ctx, turn, &self.state.messages, redaction);
        // A provider is host code too: a panic in it fails the run.
        let call = AssertUnwindSafe(harness.model.as_ref().chat(request))
            .catch_unwind()
            .instrument(span.clone());
        // The model's answer is polled first, so an answer that is ready at
        // once registers no waiter on the cancellation token.
        let answer = tokio::select! {
            biased;
            answer = until(self.ctx.wall_clock_end(), call) => {
                if self.ctx.is_cancelled() {
                    // An answer that came is paid for, cancelled or not:
                    // what it spent is counted.
                    if let Some(Ok(Ok(response))) = &answer {
                        held.settle(self.ctx.spend(), || self.model_price(), response.usage);
                    }
                    return Ok(ModelOutcome::Cancelled);
                }
                answer
            }
            () = self.ctx.cancellation().cancelled() => return Ok(ModelOutcome::Cancelled),
        };
        let response = match answer {
            None => {
                let limit = self.wall_clock_spent();
                trace::chat_failed(&span, "timeout", &limit.to_string(), redaction);
                return Ok(ModelOutcome::Limit(limit));
            }
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(error))) => {
                trace::chat_failed(&span, error.error_type(), &error.to_string(), redaction);
                return Err(error.into());
            }
            Some(Err(panic)) => {
                let who = format!("model '{}'", harness.model.name());
                let error = panicked(&who, panic.as_ref());
                trace::chat_failed(&span, "panic", &error.to_string(), redaction);
                return Err(error);
            }
        };
        let cost = held.settle(self.ctx.spend(), || self.model_price(), response.usage);
        let capture = self.ctx.capture.model_io;
        trace::chat_answered(&span, &response, cost, capture, redaction);
        events
            .emit(|| AgentEvent::ModelCompleted {
                turn,
                usage: response.usage,
                cost,
                duration_ms: millis(started),
                tool_calls: u32::try_from(response.tool_calls.len()).unwrap_or(u32::MAX),
                // The answer may quote what a tool returned: scrubbed like
                // every captured payload.
                content: capture.then(|| redaction.text(response.content.clone())),
            })
            .await;
        Ok(ModelOutcome::Response(response))
    }

    /// The wall-clock limit, as reached now.
    fn wall_clock_spent(&self) -> TinyAgentsError {
        self.ctx
            .check_wall_clock()
            .err()
            .unwrap_or(TinyAgentsError::LimitExceeded {
                kind: tinyagents_core::LimitKind::WallClock,
                limit: self
                    .ctx
                    .limits
                    .wall_clock
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                used: u64::try_from(self.ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
    }

    /// The gate's screening of a final answer. Contained: an error or a
    /// panic blocks the output.
    async fn screen_output(&self, text: &str) -> Result<String, TinyAgentsError> {
        let Some(gate) = &self.harness.calls.gate else {
            return Ok(text.to_owned());
        };
        let by = "security gate (output screening)";
        let verdict = AssertUnwindSafe(gate.screen_output(&self.ctx, text))
            .catch_unwind()
            .await;
        let reason = match verdict {
            Ok(Ok(OutputVerdict::Allow)) => return Ok(text.to_owned()),
            Ok(Ok(OutputVerdict::Rewrite(replacement))) => return Ok(replacement),
            Ok(Ok(OutputVerdict::Block { reason })) => reason,
            Ok(Err(error)) => format!("screening failed, output blocked: {error}"),
            Err(panic) => format!(
                "screening panicked, output blocked: {}",
                panic_text(panic.as_ref())
            ),
        };
        Err(TinyAgentsError::Denied {
            by: by.to_owned(),
            reason,
        })
    }

    pub(crate) async fn limit_reached(
        &mut self,
        limit: TinyAgentsError,
    ) -> Result<AgentRun, TinyAgentsError> {
        let TinyAgentsError::LimitExceeded { kind, .. } = &limit else {
            return Err(limit);
        };
        let kind = *kind;
        self.report_limit(&limit).await;
        match self.ctx.limits.behavior {
            LimitBehavior::Error => {
                self.finish_in_ledger().await;
                Err(limit)
            }
            LimitBehavior::Stop => Ok(self
                .finish_with_last_text(RunStatus::LimitReached(kind))
                .await),
        }
    }

    async fn finish_with_last_text(&mut self, status: RunStatus) -> AgentRun {
        let text = self
            .state
            .last_assistant_text()
            .unwrap_or_default()
            .to_owned();
        self.finish(status, text).await
    }

    pub(crate) async fn finish(&mut self, status: RunStatus, final_text: String) -> AgentRun {
        if status != RunStatus::AwaitingApproval {
            self.finish_in_ledger().await;
        }
        // Read where they are used: nothing of them is held across the
        // emit (a run's future is copied whole into a delegating call's).
        let (usage, spend) = (self.state.usage, self.ctx.spend());
        self.sink()
            .emit(|| AgentEvent::RunCompleted {
                status,
                usage,
                spent: spend.total(),
            })
            .await;
        AgentRun {
            run_id: self.ctx.run_id.clone(),
            status,
            final_text,
            messages: std::mem::take(&mut self.state.messages),
            usage: self.state.usage,
            budget: self.ctx.budget(),
            spend: self.ctx.spend().clone(),
            tool_metadata: std::mem::take(&mut self.metadata),
            suspended: None,
            properties: Arc::clone(&self.ctx.properties),
        }
    }

    /// Emits `LimitReached` for `limit`, once per run.
    pub(crate) async fn report_limit(&mut self, limit: &TinyAgentsError) {
        if let TinyAgentsError::LimitExceeded { kind, limit, used } = limit
            && !self.limit_reported
        {
            self.limit_reported = true;
            self.sink()
                .emit(|| AgentEvent::LimitReached {
                    kind: *kind,
                    limit: *limit,
                    used: *used,
                })
                .await;
        }
    }
}

/// Opens a segment's stream of events: every run segment (a run, a
/// resume, a recovery) starts with `RunStarted` naming its run, and ends
/// with exactly one `RunCompleted` or `RunFailed`, even when it is refused
/// before it opens.
pub(crate) async fn announce(events: &EventSink, run_id: &RunId, harness: &AgentHarness) {
    events
        .emit(|| AgentEvent::RunStarted {
            run_id: run_id.clone(),
            agent_id: harness.calls.agent_id.clone(),
        })
        .await;
    for warning in harness.warnings.iter() {
        events.warn(|| warning.clone()).await;
    }
}

/// Emits `RunFailed` when a run ends with an error, so every run's stream
/// ends with a terminal event.
pub(crate) async fn report_failure(
    events: &EventSink,
    result: Result<AgentRun, TinyAgentsError>,
) -> Result<AgentRun, TinyAgentsError> {
    if let Err(error) = &result
        && !planted(Mutation::SilentFailure)
    {
        events
            .emit(|| AgentEvent::RunFailed {
                error: error.to_string(),
            })
            .await;
    }
    result
}
