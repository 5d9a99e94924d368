//! The fold: results back into the transcript in call order, `after_tool`
//! in reverse registration order, terminal events, metadata, controls.

use tinyagents_core::{
    AgentEvent, Message, RunContext, RunStatus, State, TinyAgentsError, ToolCall, ToolControl,
    ToolResult,
};
use tinytools::{RegisteredTool, ToolErrorPolicy, cut};

use super::execute::CallOutcome;
use super::{RunAcc, Slot, TurnEnd, denied_by};
use crate::events::EventSink;
use crate::harness::AgentHarness;
use crate::run::{PendingCall, TurnEntry};

/// What the fold of one turn decided beyond the transcript.
#[derive(Default)]
struct FoldState {
    control: Option<(ToolControl, String)>,
    fatal: Option<TinyAgentsError>,
}

impl AgentHarness {
    /// Folds a turn's slots, in call order.
    #[allow(clippy::too_many_arguments)] // the fold needs the whole turn
    pub(crate) async fn fold_turn(
        &self,
        ctx: &mut RunContext,
        state: &mut State,
        events: &EventSink,
        acc: &mut RunAcc,
        slots: Vec<Slot<'_>>,
        outcomes: Vec<Option<CallOutcome>>,
        assistant_text: String,
        limit: Option<TinyAgentsError>,
    ) -> Result<TurnEnd, TinyAgentsError> {
        let mut entries = Vec::with_capacity(slots.len());
        let mut fold = FoldState::default();
        let mut suspended = false;
        for (slot, outcome) in slots.into_iter().zip(outcomes) {
            let entry = match slot {
                Slot::Run { call, entry, .. } => {
                    if let Some(CallOutcome {
                        result: Err(TinyAgentsError::ApprovalRequired { reason, .. }),
                        duration_ms,
                        ..
                    }) = &outcome
                    {
                        // Raised during execution: the call waits for a person
                        // like one deferred at admission.
                        let text = format!(
                            "tool '{}' requires approval: {reason}; the run waits for a decision",
                            call.name
                        );
                        events
                            .emit(|| AgentEvent::ToolFailed {
                                call_id: call.id.clone(),
                                parent_call_id: None,
                                name: call.name.clone(),
                                duration_ms: *duration_ms,
                                error: text,
                            })
                            .await;
                        suspended = true;
                        entries.push(TurnEntry::Pending {
                            pending: PendingCall {
                                call,
                                reason: reason.clone(),
                            },
                        });
                        continue;
                    }
                    let message = match outcome {
                        Some(outcome) => {
                            self.settle(ctx, state, events, acc, &call, entry, outcome, &mut fold)
                                .await
                        }
                        None => {
                            let text =
                                format!("tool '{}' was not run: the run was cancelled", call.name);
                            self.emit_refused(ctx, events, &call, &text).await;
                            tool_message(&call, &ToolResult::error(text))
                        }
                    };
                    TurnEntry::Settled { message }
                }
                Slot::Refused { call, result } => TurnEntry::Settled {
                    message: tool_message(&call, &result),
                },
                Slot::Settled(message) => TurnEntry::Settled { message },
                Slot::Recorded { call, result } => {
                    self.emit_recorded(ctx, events, &call, &result).await;
                    if let Some(metadata) = &result.metadata {
                        acc.metadata.insert(call.id.clone(), metadata.clone());
                    }
                    TurnEntry::Settled {
                        message: tool_message(&call, &result),
                    }
                }
                Slot::Pending(pending) => {
                    suspended = true;
                    TurnEntry::Pending { pending }
                }
            };
            entries.push(entry);
        }
        if suspended {
            return Ok(TurnEnd::Suspend(entries));
        }
        state
            .messages
            .extend(entries.into_iter().filter_map(|entry| match entry {
                TurnEntry::Settled { message } => Some(message),
                TurnEntry::Pending { .. } => None,
            }));
        if let Some(error) = fold.fatal {
            return Ok(TurnEnd::Fail(error));
        }
        if let Some(limit) = limit {
            return Ok(TurnEnd::Limit(limit));
        }
        Ok(match fold.control {
            Some((ToolControl::ReturnDirect, text)) => TurnEnd::Finish(RunStatus::Terminated, text),
            Some((ToolControl::Terminate, _)) => {
                TurnEnd::Finish(RunStatus::Terminated, assistant_text)
            }
            None => TurnEnd::Continue,
        })
    }

    /// Settles one executed call: truncation, `after_tool`, its terminal
    /// event, metadata and control.
    #[allow(clippy::too_many_arguments)] // one call's whole settlement
    async fn settle(
        &self,
        ctx: &mut RunContext,
        state: &State,
        events: &EventSink,
        acc: &mut RunAcc,
        call: &ToolCall,
        entry: &RegisteredTool,
        outcome: CallOutcome,
        fold: &mut FoldState,
    ) -> Message {
        let (mut result, mut failed) = match outcome.result {
            Ok(result) => (result, false),
            Err(error) => (ToolResult::error(error.to_string()), true),
        };
        truncate(&mut result.content, ctx.limits.max_tool_result_bytes);
        for middleware in self.middlewares.iter().rev() {
            if let Err(error) = middleware.after_tool(ctx, state, call, &mut result).await {
                result = ToolResult::error(format!(
                    "result withheld: {}",
                    denied_by(middleware.name(), &error)
                ));
                failed = true;
                break;
            }
        }
        if failed {
            events
                .emit(|| AgentEvent::ToolFailed {
                    call_id: call.id.clone(),
                    parent_call_id: None,
                    name: call.name.clone(),
                    duration_ms: outcome.duration_ms,
                    error: result.content.clone(),
                })
                .await;
        } else {
            let capture = ctx.capture.tool_io;
            events
                .emit(|| AgentEvent::ToolCompleted {
                    call_id: call.id.clone(),
                    parent_call_id: None,
                    name: call.name.clone(),
                    duration_ms: outcome.duration_ms,
                    is_error: result.is_error,
                    result: capture.then(|| result.content.clone()),
                    metadata: result.metadata.clone(),
                })
                .await;
        }
        if (failed || result.is_error) && entry.spec().error_policy == ToolErrorPolicy::EndRun {
            fold.fatal
                .get_or_insert_with(|| TinyAgentsError::ToolFailed {
                    tool: call.name.clone(),
                    message: result.content.clone(),
                });
        }
        if let (false, Some(control)) = (failed, result.control) {
            fold.control
                .get_or_insert_with(|| (control, result.content.clone()));
        }
        if let Some(metadata) = result.metadata {
            acc.metadata.insert(call.id.clone(), metadata);
        }
        Message::Tool {
            call_id: call.id.clone(),
            provider_id: call.provider_id.clone(),
            name: call.name.clone(),
            content: result.content,
            is_error: result.is_error,
        }
    }
}

impl AgentHarness {
    /// Reports a call answered from its ledger row after a recovery.
    async fn emit_recorded(
        &self,
        ctx: &RunContext,
        events: &EventSink,
        call: &ToolCall,
        result: &ToolResult,
    ) {
        if !events.is_active() {
            return;
        }
        let capture = ctx.capture.tool_io;
        events
            .emit(|| AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                parent_call_id: None,
                name: call.name.clone(),
                arguments: capture.then(|| self.redacted(&call.arguments)),
            })
            .await;
        events
            .emit(|| AgentEvent::ToolCompleted {
                call_id: call.id.clone(),
                parent_call_id: None,
                name: call.name.clone(),
                duration_ms: 0,
                is_error: result.is_error,
                result: capture.then(|| result.content.clone()),
                metadata: result.metadata.clone(),
            })
            .await;
    }
}

/// The transcript row answering `call`.
pub(crate) fn tool_message(call: &ToolCall, result: &ToolResult) -> Message {
    Message::Tool {
        call_id: call.id.clone(),
        provider_id: call.provider_id.clone(),
        name: call.name.clone(),
        content: result.content.clone(),
        is_error: result.is_error,
    }
}

/// Cuts `content` to `max` bytes and says so.
pub(crate) fn truncate(content: &mut String, max: usize) {
    if content.len() <= max {
        return;
    }
    let total = content.len();
    let kept = cut(content, max);
    let kept_len = kept.len();
    *content = kept;
    content.push_str(&format!("\n[truncated: kept {kept_len} of {total} bytes]"));
}
