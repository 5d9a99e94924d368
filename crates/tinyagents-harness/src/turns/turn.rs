//! One tool turn of the loop: the model's calls admitted in order through
//! the call path, executed, and folded back into the transcript in call
//! order.

use tinyagents_core::{
    CallId, ChatResponse, LimitKind, Message, RunStatus, TinyAgentsError, ToolCall, ToolControl,
    ToolReplay, ToolResult,
};
use tinytools::{RegisteredTool, ToolErrorPolicy};

use super::lent::{Issued, Lent};
use super::{Run, TurnEnd};
use crate::call::ToolSpan;
use crate::call::{Admission, Admitted, CallOutcome, Scope, SettleScope, Settlement, refusal_text};
use crate::run::{PendingCall, TurnEntry};

/// One call of a turn, as admission leaves it.
pub(crate) enum Slot<'h> {
    /// Issued by the model, not yet admitted (a turn's slots are built
    /// from the model's calls and admitted in place).
    Issued(ToolCall),
    /// Issued by the model with its arguments ready as sent for this tool
    /// (`CallPath::ready_as_sent`), not yet admitted.
    Ready(ToolCall, &'h RegisteredTool),
    /// Taken out for admission; never folded.
    Vacant,
    /// Admitted: runs with these prepared arguments. `args_hash` is its
    /// idempotency key's hash, set when a ledger recorded its start.
    Run {
        call: ToolCall,
        entry: &'h RegisteredTool,
        args_hash: Option<String>,
        /// The replay class its started row records (admission's).
        replay: ToolReplay,
        /// How it ran; `None` until it has (or when the run was cancelled
        /// before it started).
        outcome: Option<CallOutcome>,
    },
    /// Refused at admission: this result is its answer.
    Refused { call: ToolCall, result: ToolResult },
    /// Waits for approval.
    Pending(PendingCall),
    /// Settled in an earlier segment of a resumed turn.
    Settled(Message),
    /// Settled before a crash: the ledger's recorded result answers it, and
    /// it does not run again.
    Recorded { call: ToolCall, result: ToolResult },
}

/// What the fold of one turn decided beyond the transcript. Settled rows go
/// straight into the transcript; a turn that suspends takes them back out.
#[derive(Default)]
struct Fold {
    /// The transcript's length when the fold began.
    start: usize,
    /// Calls waiting for a person, with their place among the turn's rows.
    pending: Vec<(usize, PendingCall)>,
    /// Rows folded so far.
    rows: usize,
    control: Option<(ToolControl, String)>,
    fatal: Option<TinyAgentsError>,
}

impl<'h> Slot<'h> {
    /// A call as admission admitted it: nothing it decided is dropped.
    pub(crate) fn admitted(admitted: Admitted<'h>) -> Self {
        Slot::Run {
            call: admitted.call,
            entry: admitted.entry,
            args_hash: admitted.args_hash,
            replay: admitted.replay,
            outcome: None,
        }
    }

    /// The started row this slot's call needs (call, tool, hash, replay
    /// class), when it is an admitted call with a ledger's hash.
    pub(crate) fn start_of(&self) -> Option<crate::call::StartOf<'_>> {
        match self {
            Slot::Run {
                call,
                entry,
                args_hash: Some(hash),
                replay,
                ..
            } => Some((call, *entry, hash.as_str(), *replay)),
            _ => None,
        }
    }

    /// Whether this admitted call may overlap other concurrency-safe calls.
    pub(crate) fn runs_shared(&self, harness: &crate::harness::AgentHarness) -> bool {
        matches!(self, Slot::Run { entry, .. } if harness.calls.runs_shared(entry))
    }
}

impl<'h> Run<'h> {
    /// Folds a settled row into the transcript.
    fn fold_settled(&mut self, fold: &mut Fold, message: Message) {
        self.state.messages.push(message);
        fold.rows += 1;
    }

    /// Folds a call that waits for a person.
    fn fold_pending(fold: &mut Fold, pending: PendingCall) {
        fold.pending.push((fold.rows, pending));
        fold.rows += 1;
    }

    /// Runs one turn that issued tool calls: admission, execution, fold.
    pub(crate) async fn tool_turn(
        &mut self,
        response: ChatResponse,
        token_limit: Option<TinyAgentsError>,
    ) -> Result<TurnEnd, TinyAgentsError> {
        let first = self.state.calls_issued + 1;
        let issued = response.tool_calls.len();
        self.state.calls_issued += issued as u64;
        // The turn's slots reuse the last turn's buffer: one per call,
        // admitted in place.
        let mut slots = std::mem::take(&mut self.spare_slots);
        slots.reserve(issued);
        // The transcript keeps the calls as the model wrote them, with every
        // middleware's redaction applied (arguments and any raw text); the
        // tools get the real arguments. Calls whose payload redaction
        // changed cannot be replayed from a checkpoint: the secret was never
        // persisted.
        let mut replay_blocked = Vec::new();
        let mut refused = Vec::new();
        let mut recorded = Vec::with_capacity(issued);
        let redaction = self.events.redaction();
        let lends = self.lends_arguments();
        let mut lent = Lent::at(self.state.messages.len());
        for (call, n) in response.tool_calls.into_iter().zip(first..) {
            // Arguments too deep to persist stay as text and are refused.
            let call = call.into_call(CallId::model(n)).confine_deep_arguments();
            let ready = self.harness.calls.ready_as_sent(&call);
            let at = recorded.len();
            if lends && ready.is_some() {
                // The transcript's copy waits for the slot's arguments,
                // which the fold moves back once the call is answered.
                lent.mark(at);
                recorded.push(ToolCall {
                    id: call.id.clone(),
                    provider_id: call.provider_id.clone(),
                    name: call.name.clone(),
                    arguments: serde_json::Value::Null,
                    raw_arguments: None,
                });
            } else {
                let redacted = redaction.call(&call);
                if redacted.changed {
                    replay_blocked.push(call.id.clone());
                }
                if let Some(error) = redacted.failed {
                    refused.push((call.id.clone(), error));
                }
                recorded.push(redacted.copy);
            }
            slots.push(match ready {
                Some(entry) => Slot::Ready(call, entry),
                None => Slot::Issued(call),
            });
        }
        self.lent = lent.any().then_some(lent);
        self.state.messages.push(Message::Assistant {
            content: response.content,
            tool_calls: recorded,
            reasoning: response.reasoning,
        });
        self.checkpoint(&replay_blocked).await;
        self.run_calls(slots, token_limit, &[], &refused).await
    }

    /// Admits, executes and folds the calls of one turn (`Slot::Issued`,
    /// admitted in place), whose assistant message is already in the
    /// transcript. `replay_blocked` names calls a recovery must not run
    /// again (their arguments were redacted); `refused` calls whose
    /// redaction failed.
    pub(crate) async fn run_calls(
        &mut self,
        mut slots: Vec<Slot<'h>>,
        token_limit: Option<TinyAgentsError>,
        replay_blocked: &[CallId],
        refused: &[(CallId, TinyAgentsError)],
    ) -> Result<TurnEnd, TinyAgentsError> {
        let mut limit = token_limit;
        for (position, slot) in slots.iter_mut().enumerate() {
            let (call, ready) = match std::mem::replace(slot, Slot::Vacant) {
                Slot::Issued(call) => (call, None),
                Slot::Ready(call, entry) => (call, Some(entry)),
                other => {
                    *slot = other;
                    continue;
                }
            };
            let issued = Issued {
                position,
                ready,
                replay_blocked,
                refused,
            };
            match self.admit_issued(issued, call, &mut limit).await {
                Ok(admitted) => *slot = admitted,
                Err(end) => {
                    // The turn ends here: the transcript takes back the
                    // arguments its calls still hold.
                    for (k, slot) in slots.drain(..).enumerate() {
                        if let Some(call) = slot.into_call() {
                            self.give_back(k, call.arguments);
                        }
                    }
                    self.lent = None;
                    return Ok(end);
                }
            }
        }
        if let Some(reached) = &limit {
            self.report_limit(reached).await;
        }
        self.complete_turn(slots, limit).await
    }

    /// One issued call of a turn through admission: its slot, or how the
    /// turn ends (`InvalidArgsPolicy::Fail`).
    async fn admit_issued(
        &mut self,
        issued: Issued<'h, '_>,
        call: ToolCall,
        limit: &mut Option<TinyAgentsError>,
    ) -> Result<Slot<'h>, TurnEnd> {
        let Issued {
            position,
            ready,
            replay_blocked,
            refused,
        } = issued;
        let harness = self.harness;
        if replay_blocked.contains(&call.id) {
            // It spent its slot when it was first issued, like every
            // issued call (issue 13: without this, a recovered turn
            // gave its slot to the next call).
            let _ = self.ctx.tracker().try_reserve_tool_call();
            return Ok(self.blocked_replay(call).await);
        }
        if let Some((_, error)) = refused.iter().find(|(id, _)| *id == call.id) {
            // Budget is spent like any issued call's, so refusals stay bounded.
            let _ = self.ctx.tracker().try_reserve_tool_call();
            return Ok(self.refused_slot(call, error).await);
        }
        // A token cap crossed by this very response refuses all its calls.
        if let Some(
            reached @ TinyAgentsError::LimitExceeded {
                kind: LimitKind::Tokens,
                ..
            },
        ) = &*limit
        {
            let reached = reached.clone();
            return Ok(self.refused_slot(call, &reached).await);
        }
        let scope = Scope::Model {
            ctx: &mut self.ctx,
            state: &self.state,
            position,
        };
        Ok(
            match harness.calls.admit(scope, &self.events, call, ready).await {
                Admission::Run(admitted) => Slot::admitted(admitted),
                Admission::Refused(call, error) => {
                    if matches!(error, TinyAgentsError::LimitExceeded { .. }) {
                        limit.get_or_insert_with(|| error.clone());
                    }
                    self.refused_slot(call, &error).await
                }
                Admission::Pending(call, reason) => match self.settled_answer(&call).await {
                    // A call that ran and settled before a crash (recovery
                    // meets it again) is answered from its row: a person is
                    // not asked to approve what already happened.
                    Some(result) => Slot::Recorded { call, result },
                    None => {
                        let pending = PendingCall::waiting(self.ctx.run_id.clone(), call, reason);
                        match self.earlier_decision(&pending).await {
                            // Decided before a crash: admitted again with
                            // that decision, from the slot it gives back.
                            Some(decision) => {
                                self.ctx.tracker().release_tool_call();
                                self.decide(position, pending, false, Some(&decision)).await
                            }
                            None => Slot::Pending(pending),
                        }
                    }
                },
                Admission::Fatal(call, error) => {
                    self.give_back(position, call.arguments);
                    return Err(TurnEnd::Fail(error));
                }
            },
        )
    }

    /// Records, executes and folds a turn's admitted slots.
    pub(crate) async fn complete_turn(
        &mut self,
        mut slots: Vec<Slot<'h>>,
        limit: Option<TinyAgentsError>,
    ) -> Result<TurnEnd, TinyAgentsError> {
        self.start_rows(&mut slots).await;
        self.execute_turn(&mut slots).await;
        self.fold_turn(slots, limit).await
    }

    /// A call refused before it ran: its events, and its (redacted) refusal
    /// as its result.
    pub(crate) async fn refused_slot(&self, call: ToolCall, error: &TinyAgentsError) -> Slot<'h> {
        let text = refusal_text(&self.harness.calls, error);
        self.refused_span(&call, error.error_type(), &text);
        self.events.refused(&call, &text).await;
        let text = self.events.redaction().text(text);
        Slot::Refused {
            call,
            result: ToolResult::error(text),
        }
    }

    /// Folds a turn's slots, in call order.
    async fn fold_turn(
        &mut self,
        mut slots: Vec<Slot<'h>>,
        limit: Option<TinyAgentsError>,
    ) -> Result<TurnEnd, TinyAgentsError> {
        let mut fold = Fold {
            start: self.state.messages.len(),
            ..Fold::default()
        };
        for (k, slot) in slots.drain(..).enumerate() {
            match slot {
                // Admission replaces every issued call; one left would be
                // a broken turn: it gets a refusal, never silence.
                Slot::Issued(call) | Slot::Ready(call, _) => {
                    let text = format!("tool '{}' was not admitted", call.name);
                    self.events.refused(&call, &text).await;
                    let message = tool_message(&call, &ToolResult::error(text));
                    self.give_back(k, call.arguments);
                    self.fold_settled(&mut fold, message);
                }
                Slot::Vacant => {}
                Slot::Run {
                    call,
                    entry,
                    outcome,
                    ..
                } => match outcome {
                    Some(outcome) => {
                        self.settle_call(k, call, Some(entry), outcome, &mut fold)
                            .await
                    }
                    None => {
                        let text =
                            format!("tool '{}' was not run: the run was cancelled", call.name);
                        self.refused_span(&call, "cancelled", &text);
                        self.events.refused(&call, &text).await;
                        let message = tool_message(&call, &ToolResult::error(text));
                        self.give_back(k, call.arguments);
                        self.fold_settled(&mut fold, message);
                    }
                },
                Slot::Recorded { call, result } => {
                    self.events.started(&call).await;
                    let entry = self.harness.calls.lookup(&call.name);
                    let outcome = CallOutcome::recorded(result);
                    self.settle_call(k, call, entry, outcome, &mut fold).await;
                }
                Slot::Refused { call, result } => {
                    let message = tool_message(&call, &result);
                    self.give_back(k, call.arguments);
                    self.fold_settled(&mut fold, message);
                }
                Slot::Settled(message) => self.fold_settled(&mut fold, message),
                Slot::Pending(pending) => {
                    self.give_back_copy(k, &pending.call.arguments);
                    Self::fold_pending(&mut fold, pending);
                }
            }
        }
        self.lent = None;
        // The emptied buffer serves the next turn.
        self.spare_slots = slots;
        if !fold.pending.is_empty() {
            for (_, pending) in &fold.pending {
                self.events
                    .approval_requested(&pending.call, &pending.reason)
                    .await;
            }
            // The turn waits: its rows leave the transcript for the
            // suspended state, in call order with the waiting calls.
            let mut settled = self.state.messages.drain(fold.start..);
            let mut pending = fold.pending.into_iter().peekable();
            let mut entries = Vec::with_capacity(fold.rows);
            for row in 0..fold.rows {
                match pending.next_if(|(at, _)| *at == row) {
                    Some((_, pending)) => entries.push(TurnEntry::Pending { pending }),
                    None => {
                        if let Some(message) = settled.next() {
                            entries.push(TurnEntry::Settled { message });
                        }
                    }
                }
            }
            return Ok(TurnEnd::Suspend(entries));
        }
        if let Some(error) = fold.fatal {
            return Ok(TurnEnd::Fail(error));
        }
        if let Some(limit) = limit {
            return Ok(TurnEnd::Limit(limit));
        }
        Ok(match fold.control {
            Some((ToolControl::ReturnDirect, text)) => TurnEnd::Finish(RunStatus::Terminated, text),
            Some((ToolControl::Terminate, _)) => {
                let text = self.state.last_assistant_text().unwrap_or_default();
                TurnEnd::Finish(RunStatus::Terminated, text.to_owned())
            }
            None => TurnEnd::Continue,
        })
    }

    /// Settles one model-issued call through the call path and folds what
    /// it decided: its transcript row, metadata, control, an end-run error.
    async fn settle_call(
        &mut self,
        k: usize,
        call: ToolCall,
        entry: Option<&RegisteredTool>,
        outcome: CallOutcome,
        fold: &mut Fold,
    ) {
        let scope = SettleScope::Model {
            ctx: &mut self.ctx,
            state: &self.state,
        };
        let (mut result, error) = match self
            .harness
            .calls
            .settle(scope, &self.events, &call, outcome)
            .await
        {
            Settlement::Answered { result, error } => (result, error),
            Settlement::Deferred(reason) => {
                // It asked for a person while it ran and did not act: an
                // approval it ran under was not used.
                if self.harness.calls.ledger.is_none() {
                    self.harness.resumed.release(&self.ctx.run_id, &call.id);
                }
                self.give_back_copy(k, &call.arguments);
                let run_id = self.ctx.run_id.clone();
                Self::fold_pending(fold, PendingCall::waiting(run_id, call, reason));
                return;
            }
            // Only a nested call's end can be claimed by another.
            Settlement::Claimed => (
                ToolResult::error(format!("tool '{}' was settled elsewhere", call.name)),
                None,
            ),
        };
        let failed = error.is_some();
        let end_run = entry.is_some_and(|e| e.spec().error_policy == ToolErrorPolicy::EndRun);
        if (failed || result.is_error) && end_run {
            // The host's error keeps a withheld error's own text.
            let detail = match &error {
                Some(TinyAgentsError::ToolFailed { detail, .. }) => detail.clone(),
                _ => None,
            };
            fold.fatal
                .get_or_insert_with(|| TinyAgentsError::ToolFailed {
                    tool: call.name.clone(),
                    message: result.content.clone(),
                    detail,
                });
        }
        if let (false, Some(control)) = (failed, result.control) {
            fold.control
                .get_or_insert_with(|| (control, result.content.clone()));
        }
        if let Some(metadata) = result.metadata.take() {
            self.metadata.insert(call.id.clone(), metadata);
        }
        let message = Message::Tool {
            call_id: call.id,
            provider_id: call.provider_id,
            name: call.name,
            content: result.content,
            is_error: result.is_error,
        };
        self.give_back(k, call.arguments);
        self.fold_settled(fold, message);
    }
}

impl Run<'_> {
    /// The `execute_tool` span of a model-issued call refused before it ran.
    fn refused_span(&self, call: &ToolCall, error_type: &str, text: &str) {
        let span = ToolSpan {
            id: &call.id,
            name: &call.name,
            provider_id: call.provider_id.as_deref(),
            parent: None,
            run: &self.shared,
        };
        let arguments = || self.events.redaction().arguments(call);
        span.refused(&self.events, arguments, error_type, text);
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
