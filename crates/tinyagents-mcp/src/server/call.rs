//! One MCP call as one run of the server's harness.

use std::collections::HashMap;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, ProgressNotificationParam,
    ProgressToken,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tinyagents_core::{AgentEvent, CallId, Message, RunId, RunStatus, SessionId, TinyAgentsError};
use tinyagents_harness::{AgentRun, ResumeOptions, RunHandle, RunRequest};
use tinyagents_orchestrator::SessionScope;
use tokio::sync::SemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::Served;
use super::approval::{Approver, Asked, Decided, MAX_APPROVAL_ROUNDS};
use super::budget::{budget_root, wire_budget, with_run};
use super::relay::RelayedCall;

/// Runs the call `params` names in a run of its own: the relay issues it,
/// the harness admits, runs and settles it, and its answer (or why it was
/// not run) is the MCP result, its `_meta` naming the run and what it
/// spent. `session` is the parent of an agent's child sessions. A budget in
/// the request's `_meta` caps the run from a root above it. A run
/// suspended for approval is put to the client when it can be asked
/// ([`Approver`]) and resumed once with the decisions.
pub(crate) async fn call_tool(
    served: &Served,
    session: &SessionId,
    params: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let tool = params.name.to_string();
    let listed = |name: &str| {
        served
            .harness
            .tools()
            .get(name)
            .is_some_and(|registered| registered.is_model_visible())
    };
    if !listed(&tool) {
        let offered: Vec<&str> = served
            .harness
            .tools()
            .iter()
            .filter(|t| t.is_model_visible())
            .map(|t| t.spec().name.as_str())
            .collect();
        return Err(ErrorData::invalid_params(
            format!(
                "unknown tool '{tool}'; this server offers: {}",
                offered.join(", ")
            ),
            None,
        ));
    }
    let input = serde_json::to_string(&RelayedCall {
        tool: tool.clone(),
        arguments: params.arguments.unwrap_or_default(),
    })
    .map_err(|e| ErrorData::internal_error(format!("the call could not be relayed: {e}"), None))?;
    // At most `max_concurrent_calls` runs at once; a call cancelled while
    // it waits for its turn never starts.
    let Some(turn) = take_turn(served, &context.ct).await? else {
        return Ok(error_result(format!(
            "the call of '{tool}' was cancelled before it started"
        )));
    };
    let run_id = RunId::generate();
    let mut request = RunRequest::new(input)
        .with_cancellation(context.ct.clone())
        .with_run_id(run_id.clone());
    // A budget from the caller lowers the run's caps from above it.
    let root = wire_budget(&context.meta, &tool)
        .map(|budget| budget_root(budget, &run_id, served.prices.clone()));
    request.spend.clone_from(&root);
    SessionScope::new(session.clone()).write_to(&mut request.properties);
    let mut watch = Watch {
        progress: context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
            sent: 0,
        }),
        asked: HashMap::new(),
    };
    let mut run = watch.drive(served.harness.start(request)).await;
    drop(turn);
    let approver = Approver::for_client(&context, served.request_timeout);
    let mut rounds = 0;
    while let (Some(approver), Ok(current)) = (&approver, &mut run) {
        if current.status != RunStatus::AwaitingApproval {
            break;
        }
        if rounds == MAX_APPROVAL_ROUNDS {
            let spent = current.budget.spent;
            return Ok(with_run(
                error_result(format!(
                    "the call of '{tool}' still waits for approval after {MAX_APPROVAL_ROUNDS} \
                     answers, so it was not run again"
                )),
                &current.run_id,
                Some(spent),
            ));
        }
        let Some(suspended) = current.suspended.take() else {
            break;
        };
        // A person may take a while: the call holds no turn meanwhile.
        let decisions = match approver.decide(&suspended, &watch.asked).await {
            Decided::Decisions(decisions) => decisions,
            Decided::Cancelled => {
                return Ok(error_result(format!(
                    "the call of '{tool}' was cancelled while it waited for approval"
                )));
            }
        };
        let Some(turn) = take_turn(served, &context.ct).await? else {
            return Ok(error_result(format!(
                "the call of '{tool}' was cancelled while it waited for approval"
            )));
        };
        // The suspended state is resumed here, once, with decisions made
        // from it; the harness refuses any second resume of it.
        // Under the budget its caller sent, the resumed run goes on in the
        // same tree, from what it had spent.
        let options = ResumeOptions {
            cancel: Some(context.ct.clone()),
            spend: root.clone(),
            ..ResumeOptions::default()
        };
        run = watch
            .drive(served.harness.start_resume(suspended, &decisions, options))
            .await;
        drop(turn);
        rounds += 1;
    }
    Ok(match run {
        Ok(run) => {
            let spent = run.budget.spent;
            with_run(answer(&tool, run), &run_id, Some(spent))
        }
        // A failed run reports nothing; under a budget its root still
        // knows what the runs under it spent.
        Err(error) => with_run(
            error_result(format!("the call of '{tool}' failed: {error}")),
            &run_id,
            root.map(|root| root.total()),
        ),
    })
}

/// A turn among the calls that run at once; `None` when the call was
/// cancelled while it waited for one.
async fn take_turn<'s>(
    served: &'s Served,
    cancel: &CancellationToken,
) -> Result<Option<SemaphorePermit<'s>>, ErrorData> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Ok(None),
        permit = served.calls.acquire() => permit
            .map(Some)
            .map_err(|_| ErrorData::internal_error("the server is shutting down", None)),
    }
}

/// Reads a run's events while it runs (each segment of it, a resume
/// included): progress for the client, and what the run said of each call
/// it left waiting.
struct Watch {
    progress: Option<Progress>,
    asked: HashMap<CallId, Asked>,
}

impl Watch {
    async fn drive(&mut self, mut handle: RunHandle<'_>) -> Result<AgentRun, TinyAgentsError> {
        while let Some(event) = handle.next_event().await {
            if let AgentEvent::ApprovalRequested {
                call_id,
                reason,
                arguments,
                ..
            } = &event
            {
                self.asked.insert(
                    call_id.clone(),
                    Asked {
                        reason: reason.clone(),
                        arguments: arguments.clone(),
                    },
                );
            }
            if let Some(progress) = &mut self.progress
                && let Some(update) = progress_update(&event)
            {
                progress.send(update).await;
            }
        }
        handle.wait().await
    }
}

/// The result of a relay run: the call's answer, or why it has none.
fn answer(tool: &str, run: AgentRun) -> CallToolResult {
    match run.status {
        RunStatus::AwaitingApproval => {
            let reason = run.pending().first().map_or_else(
                || "it needs a person's approval".to_owned(),
                |p| p.reason.clone(),
            );
            return error_result(format!(
                "the call of '{tool}' requires approval ({reason}); calls over MCP cannot be \
                 deferred, so it was not run"
            ));
        }
        RunStatus::Cancelled => {
            return error_result(format!("the call of '{tool}' was cancelled"));
        }
        RunStatus::LimitReached(kind) => {
            let ran = answered(&run);
            if ran.is_none() {
                return error_result(format!(
                    "the call of '{tool}' was not run: the server's {kind:?} limit was reached"
                ));
            }
        }
        RunStatus::Completed | RunStatus::Terminated => {}
    }
    match answered(&run) {
        Some((content, true)) => error_result(content),
        Some((content, false)) => CallToolResult::success(vec![ContentBlock::text(content)]),
        None => error_result(format!("the call of '{tool}' ended without an answer")),
    }
}

/// The answer the call's run folded: its text and whether it is an error.
fn answered(run: &AgentRun) -> Option<(String, bool)> {
    run.messages.iter().rev().find_map(|message| match message {
        Message::Tool {
            content, is_error, ..
        } => Some((content.clone(), *is_error)),
        _ => None,
    })
}

fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// One progress notification: what happened, and how far the served
/// call is when it says so itself.
struct Update {
    message: String,
    fraction: Option<f32>,
}

/// Progress notifications for one call. The protocol requires `progress`
/// to increase with every notification, with or without a `total`, so
/// `progress` counts the notifications (1, 2, …) whatever they report.
/// When the served tool itself reports how far it is (a `ToolProgress`
/// with a fraction), `total` is set so that `progress / total` is that
/// fraction (a tool counting `k` of `n` steps gives `total = n`). The
/// alternative, `progress = fraction × 100` of `total = 100`, would break
/// the rule whenever a fraction repeats or falls, and when notifications
/// without a fraction (a served agent's work) come between. Without a
/// fraction, or with a fraction of a nested tool (not the call's own),
/// `total` is left out: unknown.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: u32,
}

impl Progress {
    async fn send(&mut self, update: Update) {
        self.sent += 1;
        let progress = f64::from(self.sent);
        let mut params = ProgressNotificationParam::new(self.token.clone(), progress)
            .with_message(update.message);
        if let Some(total) = update.fraction.and_then(|f| total_for(progress, f)) {
            params = params.with_total(total);
        }
        // Best effort: a client that went away loses its progress only.
        let _ = self.peer.notify_progress(params).await;
    }
}

/// The `total` that makes `progress / total` equal `fraction`, to the
/// thousandth and never below `progress`; none for a fraction that says
/// nothing (zero, negative, not a number).
fn total_for(progress: f64, fraction: f32) -> Option<f64> {
    let fraction = f64::from(fraction);
    if !fraction.is_finite() || fraction <= 0.0 {
        return None;
    }
    let total = (progress / fraction.min(1.0) * 1000.0).round() / 1000.0;
    Some(total.max(progress))
}

/// What a run event tells the MCP client as progress: the served tool's
/// own progress (with its fraction), and what a served agent does (its
/// model calls and its tools). The relay's own turns are not news.
fn progress_update(event: &AgentEvent) -> Option<Update> {
    match event {
        AgentEvent::ToolProgress { fraction, .. } => Some(Update {
            message: progress_message(event)?,
            fraction: *fraction,
        }),
        AgentEvent::Delegated { .. } => Some(Update {
            message: progress_message(event)?,
            fraction: None,
        }),
        _ => None,
    }
}

/// The text of a progress event, a served agent's named.
fn progress_message(event: &AgentEvent) -> Option<String> {
    match event {
        AgentEvent::ToolProgress {
            fraction, message, ..
        } => Some(match fraction {
            Some(fraction) => format!("{message} ({:.0}%)", fraction * 100.0),
            None => message.clone(),
        }),
        AgentEvent::Delegated {
            agent_id, event, ..
        } => delegated_message(event).map(|what| format!("{agent_id}: {what}")),
        _ => None,
    }
}

fn delegated_message(event: &AgentEvent) -> Option<String> {
    match event {
        AgentEvent::ModelStarted { turn } => Some(format!("thinking (model call {turn})")),
        AgentEvent::ToolStarted { name, .. } => Some(format!("calling {name}")),
        AgentEvent::ToolCompleted { name, is_error, .. } => Some(if *is_error {
            format!("{name} reported an error")
        } else {
            format!("{name} answered")
        }),
        AgentEvent::ToolFailed { name, .. } => Some(format!("{name} failed")),
        AgentEvent::ToolProgress { .. } => progress_message(event),
        AgentEvent::Delegated {
            agent_id, event, ..
        } => delegated_message(event).map(|what| format!("{agent_id}: {what}")),
        _ => None,
    }
}
