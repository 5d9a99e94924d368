//! One MCP call as one run of the server's harness.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, MetaObject,
    ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tinyagents_core::{AgentEvent, Message, RunStatus, SessionId};
use tinyagents_harness::{AgentRun, EventSink, RunRequest};
use tinyagents_orchestrator::SessionScope;

use super::Served;
use super::relay::RelayedCall;
use crate::RUN_ID_META;

/// Runs the call `params` names in a run of its own: the relay issues it,
/// the harness admits, runs and settles it, and its answer (or why it was
/// not run) is the MCP result. `session` is the parent of an agent's child
/// sessions.
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
    let _turn = tokio::select! {
        biased;
        () = context.ct.cancelled() => {
            return Ok(error_result(format!("the call of '{tool}' was cancelled before it started")));
        }
        permit = served.calls.acquire() => permit.map_err(|_| {
            ErrorData::internal_error("the server is shutting down", None)
        })?,
    };
    let mut request = RunRequest::new(input).with_cancellation(context.ct.clone());
    SessionScope::new(session.clone()).write_to(&mut request.properties);
    let run = match context.meta.get_progress_token() {
        None => served.harness.run_with(request, &EventSink::none()).await,
        Some(token) => {
            let mut progress = Progress {
                peer: context.peer.clone(),
                token,
                sent: 0,
            };
            let mut handle = served.harness.start(request);
            while let Some(event) = handle.next_event().await {
                if let Some(message) = progress_message(&event) {
                    progress.send(message).await;
                }
            }
            handle.wait().await
        }
    };
    Ok(match run {
        Ok(run) => {
            let run_id = run.run_id.as_str().to_owned();
            let mut result = answer(&tool, run);
            let mut meta = serde_json::Map::new();
            meta.insert(RUN_ID_META.to_owned(), serde_json::Value::from(run_id));
            result.meta = Some(MetaObject(meta));
            result
        }
        Err(error) => error_result(format!("the call of '{tool}' failed: {error}")),
    })
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

/// Progress notifications for one call: numbered 1, 2, … so they always
/// increase, as the protocol requires.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: u32,
}

impl Progress {
    async fn send(&mut self, message: String) {
        self.sent += 1;
        let params = ProgressNotificationParam::new(self.token.clone(), f64::from(self.sent))
            .with_message(message);
        // Best effort: a client that went away loses its progress only.
        let _ = self.peer.notify_progress(params).await;
    }
}

/// What a run event tells the MCP client as progress: the served tool's
/// own progress, and what a served agent does (its model calls and its
/// tools). The relay's own turns are not news.
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
