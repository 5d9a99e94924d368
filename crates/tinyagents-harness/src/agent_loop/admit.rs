//! Admission of model-issued calls: budget, lookup, arguments,
//! `before_tool`, the security gate. A call refused here gets its result at
//! once; a deferred call waits for a person.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tinyagents_core::{
    AgentEvent, CallId, ChatResponse, LimitKind, Message, RunContext, State, TinyAgentsError,
    ToolCall, ToolResult,
};
use tinyagents_middleware::{GateDecision, ToolCallRequest, ToolVerdict};
use tinytools::{InvalidArgsPolicy, RegisteredTool, prepare_arguments};

use super::{RunAcc, TurnEnd, denied_by, report_limit};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::PendingCall;

/// One call of a turn, as admission leaves it.
pub(crate) enum Slot<'h> {
    /// Admitted: runs with these prepared arguments. `args_hash` is its
    /// idempotency key's hash, set when a ledger recorded its start.
    Run {
        call: ToolCall,
        entry: &'h RegisteredTool,
        args_hash: Option<String>,
    },
    /// Refused at admission: this result is its answer.
    Refused { call: ToolCall, result: ToolResult },
    /// Waits for approval.
    Pending(PendingCall),
    /// Settled in an earlier segment of a resumed turn.
    Settled(tinyagents_core::Message),
    /// Settled before a crash: the ledger's recorded result answers it, and
    /// it does not run again.
    Recorded { call: ToolCall, result: ToolResult },
}

/// How admission of one call ended.
pub(crate) enum Admission<'h> {
    Run(ToolCall, &'h RegisteredTool),
    Refused(ToolCall, String),
    Pending(ToolCall, String),
    Fatal(ToolCall, TinyAgentsError),
}

impl AgentHarness {
    /// Runs one turn that issued tool calls: admission, execution, fold.
    pub(crate) async fn tool_turn(
        &self,
        ctx: &mut RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        response: ChatResponse,
        token_limit: Option<TinyAgentsError>,
    ) -> Result<TurnEnd, TinyAgentsError> {
        let first = state.calls_issued + 1;
        state.calls_issued += response.tool_calls.len() as u64;
        let calls: Vec<ToolCall> = response
            .tool_calls
            .into_iter()
            .zip(first..)
            .map(|(call, index)| call.into_call(CallId::model(index)))
            .collect();
        let assistant_text = response.content;
        // The transcript keeps the calls as the model wrote them, with every
        // middleware's redaction applied; the tools get the real arguments.
        // Calls whose arguments redaction changed cannot be replayed from a
        // checkpoint: the secret was never persisted.
        let mut replay_blocked = Vec::new();
        let recorded = calls
            .iter()
            .map(|call| {
                let arguments = self.redacted(&call.arguments);
                // Only a middleware's redaction can change them.
                if !self.middlewares.is_empty() && arguments != call.arguments {
                    replay_blocked.push(call.id.clone());
                }
                ToolCall {
                    arguments,
                    ..call.clone()
                }
            })
            .collect();
        state.messages.push(Message::Assistant {
            content: assistant_text.clone(),
            tool_calls: recorded,
            reasoning: response.reasoning,
        });
        self.checkpoint(ctx, state, &replay_blocked, events).await;
        self.run_calls(
            ctx,
            state,
            events,
            acc,
            calls,
            assistant_text,
            token_limit,
            &[],
        )
        .await
    }

    /// Admits, executes and folds the calls of one turn, whose assistant
    /// message is already in the transcript. `replay_blocked` names calls a
    /// recovery must not run again (their arguments were redacted).
    #[allow(clippy::too_many_arguments)] // one turn's whole context
    pub(crate) async fn run_calls(
        &self,
        ctx: &mut RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        calls: Vec<ToolCall>,
        assistant_text: String,
        token_limit: Option<TinyAgentsError>,
        replay_blocked: &[CallId],
    ) -> Result<TurnEnd, TinyAgentsError> {
        let mut limit = token_limit;
        let mut slots = Vec::with_capacity(calls.len());
        for (position, call) in calls.into_iter().enumerate() {
            if replay_blocked.contains(&call.id) {
                slots.push(self.blocked_replay(ctx, events, call).await);
                continue;
            }
            let admission = match &limit {
                // A token cap crossed by this very response refuses all its calls.
                Some(
                    reached @ TinyAgentsError::LimitExceeded {
                        kind: LimitKind::Tokens,
                        ..
                    },
                ) => Admission::Refused(call, limit_text(reached)),
                _ => self.admit(ctx, state, call, position, &mut limit).await,
            };
            let slot = match admission {
                Admission::Run(prepared, entry) => Slot::Run {
                    call: prepared,
                    entry,
                    args_hash: None,
                },
                Admission::Refused(call, message) => {
                    self.refused_slot(ctx, events, call, message).await
                }
                Admission::Pending(prepared, reason) => Slot::Pending(PendingCall {
                    call: prepared,
                    reason,
                }),
                Admission::Fatal(_, error) => return Ok(TurnEnd::Fail(error)),
            };
            slots.push(slot);
        }
        if let Some(reached) = &limit {
            report_limit(events, acc, reached).await;
        }
        self.start_rows(ctx, events, &mut slots).await;
        let outcomes = self.execute_turn(ctx, state, events, &slots).await;
        self.fold_turn(
            ctx,
            state,
            events,
            acc,
            slots,
            outcomes,
            assistant_text,
            limit,
        )
        .await
    }

    /// A call refused before it ran: its (redacted) refusal is its result.
    pub(crate) async fn refused_slot<'h>(
        &'h self,
        ctx: &RunContext,
        events: &EventSink,
        call: ToolCall,
        message: String,
    ) -> Slot<'h> {
        let message = self.scrubbed(message);
        self.emit_refused(ctx, events, &call, &message).await;
        Slot::Refused {
            call,
            result: ToolResult::error(message),
        }
    }

    /// Admits one model-issued call. Every issued call spends a slot of the
    /// budget, so a model that keeps sending broken calls is bounded.
    async fn admit<'h>(
        &'h self,
        ctx: &mut RunContext,
        state: &State,
        call: ToolCall,
        position: usize,
        limit: &mut Option<TinyAgentsError>,
    ) -> Admission<'h> {
        let max_parallel = ctx.limits.max_parallel_calls;
        if u32::try_from(position).unwrap_or(u32::MAX) >= max_parallel {
            let reached = TinyAgentsError::LimitExceeded {
                kind: LimitKind::ParallelCalls,
                limit: u64::from(max_parallel),
                used: u64::try_from(position).unwrap_or(u64::MAX) + 1,
            };
            let text = limit_text(&reached);
            limit.get_or_insert(reached);
            return Admission::Refused(call, text);
        }
        if let Err(reached) = ctx.tracker().try_reserve_tool_call() {
            let text = limit_text(&reached);
            limit.get_or_insert(reached);
            return Admission::Refused(call, text);
        }
        let Some(entry) = self.lookup(&call.name) else {
            let text = self.not_found_text(&call.name);
            return Admission::Refused(call, text);
        };
        let call = match prepare_arguments(entry, &call, &self.injected, self.invalid_args) {
            Ok(arguments) => ToolCall {
                arguments,
                raw_arguments: None,
                ..call
            },
            Err(error) if self.invalid_args == InvalidArgsPolicy::Fail => {
                return Admission::Fatal(call, error.into());
            }
            Err(error) => return Admission::Refused(call, error.to_string()),
        };
        self.authorize(ctx, state, call, entry).await
    }

    /// The policy stages of admission: `before_tool` on every middleware
    /// (most restrictive verdict wins; an error is a denial), then the gate.
    pub(crate) async fn authorize<'h>(
        &'h self,
        ctx: &mut RunContext,
        state: &State,
        mut call: ToolCall,
        entry: &'h RegisteredTool,
    ) -> Admission<'h> {
        let mut verdict = ToolVerdict::Allow;
        for middleware in &self.middlewares {
            let name_before = call.name.clone();
            let next = match middleware.before_tool(ctx, state, &mut call).await {
                Ok(next) => next,
                Err(error) => ToolVerdict::Deny {
                    reason: denied_by(middleware.name(), &error).to_string(),
                },
            };
            if call.name != name_before {
                let text = format!(
                    "denied by {}: a middleware may not change which tool is called",
                    middleware.name()
                );
                return Admission::Refused(call, text);
            }
            verdict = verdict.most_restrictive(match next {
                ToolVerdict::Deny { reason } => ToolVerdict::Deny {
                    reason: prefix_denial(middleware.name(), reason),
                },
                other => other,
            });
            if matches!(verdict, ToolVerdict::Deny { .. }) {
                break;
            }
        }
        if let ToolVerdict::Deny { reason } = verdict {
            return Admission::Refused(call, reason);
        }
        if let Some(gate) = &self.gate {
            let request = ToolCallRequest {
                run_id: &ctx.run_id,
                agent_id: ctx.agent_id.as_ref(),
                call_id: &call.id,
                parent_call_id: None,
                spec: entry.spec(),
                arguments: &call.arguments,
            };
            let decision = AssertUnwindSafe(gate.authorize_tool(&request))
                .catch_unwind()
                .await;
            match decision {
                Ok(Ok(GateDecision::Allow)) => {}
                Ok(Ok(GateDecision::Ask { reason })) => {
                    if !ctx.approvals.is_call_approved(&call) {
                        verdict = verdict.most_restrictive(ToolVerdict::Defer { reason });
                    }
                }
                Ok(Ok(GateDecision::Deny { reason })) => {
                    return Admission::Refused(call, format!("denied by security gate: {reason}"));
                }
                Ok(Err(error)) => {
                    let text = format!("denied by security gate: the gate failed: {error}");
                    return Admission::Refused(call, text);
                }
                Err(_) => {
                    let text = "denied by security gate: the gate panicked".to_owned();
                    return Admission::Refused(call, text);
                }
            }
        }
        match verdict {
            ToolVerdict::Defer { reason } => Admission::Pending(call, reason),
            _ => Admission::Run(call, entry),
        }
    }

    fn not_found_text(&self, name: &str) -> String {
        let available: Vec<&str> = self.model_tools.iter().map(|d| d.name.as_str()).collect();
        format!(
            "tool not found: {name}. Available tools: {}",
            available.join(", ")
        )
    }

    /// Emits `ToolStarted` and `ToolFailed` for a call refused before it ran,
    /// so every call id a host sees has its pair of events.
    pub(crate) async fn emit_refused(
        &self,
        ctx: &RunContext,
        events: &EventSink,
        call: &ToolCall,
        message: &str,
    ) {
        if !events.is_active() {
            return;
        }
        let parent_call_id = call.id.parent();
        let arguments = ctx.capture.tool_io.then(|| self.redacted(&call.arguments));
        events
            .emit(|| AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                parent_call_id: parent_call_id.clone(),
                name: call.name.clone(),
                arguments,
            })
            .await;
        events
            .emit(|| AgentEvent::ToolFailed {
                call_id: call.id.clone(),
                parent_call_id,
                name: call.name.clone(),
                duration_ms: 0,
                error: message.to_owned(),
            })
            .await;
    }

    /// A refusal text with every middleware's redaction applied (it may
    /// quote the arguments).
    pub(crate) fn scrubbed(&self, text: String) -> String {
        if self.middlewares.is_empty() {
            return text;
        }
        let mut value = serde_json::Value::String(text);
        for middleware in &self.middlewares {
            middleware.redact(&mut value);
        }
        match value {
            serde_json::Value::String(text) => text,
            other => other.to_string(),
        }
    }

    /// A copy of a model-issued call's payload with every middleware's
    /// redaction applied, for events and persistence.
    pub(crate) fn redacted(&self, payload: &serde_json::Value) -> serde_json::Value {
        let mut copy = payload.clone();
        if self.middlewares.is_empty() {
            return copy;
        }
        for middleware in &self.middlewares {
            middleware.redact(&mut copy);
        }
        copy
    }
}

fn prefix_denial(by: &str, reason: String) -> String {
    if reason.starts_with("denied by ") {
        reason
    } else {
        format!("denied by {by}: {reason}")
    }
}

/// The model-readable text of a limit refusal.
pub(crate) fn limit_text(limit: &TinyAgentsError) -> String {
    match limit {
        TinyAgentsError::LimitExceeded { kind, limit, .. } => {
            format!("refused: the run reached its {kind} limit of {limit}")
        }
        other => other.to_string(),
    }
}
