//! A served call that waits for a person, put to the MCP client.
//!
//! When the relay run of a call is suspended for approval and the client
//! declared the `elicitation` capability, each waiting call is put to the
//! client as one `elicitation/create` request. What binds the answer:
//!
//! - **To its question**: the answer is the JSON-RPC response to that one
//!   request, matched by its id (rmcp numbers a session's requests and
//!   forgets an id once it is answered, timed out or cancelled). A second
//!   response with the same id, or one after the wait ran out, finds no
//!   request and is dropped: it answers nothing.
//! - **To the call**: the decision is made here from the suspended run's
//!   [`PendingCall`] ([`PendingCall::approve`] or [`PendingCall::deny`]), so
//!   it names that run, call id, tool and arguments hash whatever the
//!   client sends; of the client's answer only its action, `approve` (the
//!   JSON `true`, nothing else) and a denial's `reason` are read.
//! - **Once**: the caller resumes the suspended state once with the
//!   decisions, and the harness refuses a second resume of it (its
//!   record of used approvals, or its effect ledger).

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, MetaObject, ProtocolVersion, RequestMetaObject,
    ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext, RoleServer, ServiceError};
use serde_json::{Value, json};
use tinyagents_core::{CallId, args_hash};
use tinyagents_harness::{ApprovalDecision, PendingCall, SuspendedRun};
use tokio_util::sync::CancellationToken;

/// How many times one MCP call may be suspended for approval and put to
/// the client: a call approved and then waiting again (another policy, a
/// tool that asks while it runs) is asked again, up to this many rounds.
pub(crate) const MAX_APPROVAL_ROUNDS: usize = 4;

/// The key of an approval request's `_meta` naming what it decides: the
/// run, the call, the tool and the arguments hash.
pub(crate) const APPROVAL_META: &str = "tinyagents/approval";

/// The most characters of a client's denial reason kept.
const MAX_REASON_CHARS: usize = 500;

/// What the run said of a call when it left it waiting (its
/// `ApprovalRequested` event): the reason, redacted, and the arguments
/// only as the harness's payload capture shows them, redacted.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asked {
    pub(crate) reason: String,
    pub(crate) arguments: Option<Value>,
}

/// Puts waiting calls to one MCP client.
pub(crate) struct Approver {
    peer: Peer<RoleServer>,
    timeout: Duration,
    cancel: CancellationToken,
}

/// The decisions on a suspended run's waiting calls, or the call was
/// cancelled while its client was being asked.
pub(crate) enum Decided {
    Decisions(Vec<ApprovalDecision>),
    Cancelled,
}

/// One client's answer on one call.
enum Answer {
    Approved,
    Denied(String),
    Cancelled,
}

impl Approver {
    /// The approver for the client of `context`, when it can be asked: it
    /// declared form elicitation, on a protocol that lets a server send it
    /// requests (`2026-07-28` forbids them). `None`: the call is refused as
    /// before.
    pub(crate) fn for_client(
        context: &RequestContext<RoleServer>,
        timeout: Duration,
    ) -> Option<Self> {
        if context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
        {
            return None;
        }
        let elicitation = context.client_capabilities()?.elicitation?;
        // No mode named means form (the capability as 2025-06-18 wrote it).
        let form = elicitation.form.is_some() || elicitation.url.is_none();
        form.then(|| Self {
            peer: context.peer.clone(),
            timeout,
            cancel: context.ct.clone(),
        })
    }

    /// Asks the client about each call `suspended` waits on, in call
    /// order, and makes each decision from the waiting call itself.
    pub(crate) async fn decide(
        &self,
        suspended: &SuspendedRun,
        asked: &HashMap<CallId, Asked>,
    ) -> Decided {
        let mut decisions = Vec::new();
        for pending in suspended.pending() {
            match self.ask(pending, asked.get(&pending.call.id)).await {
                Answer::Approved => decisions.push(pending.approve()),
                Answer::Denied(reason) => decisions.push(pending.deny(reason)),
                Answer::Cancelled => return Decided::Cancelled,
            }
        }
        Decided::Decisions(decisions)
    }

    async fn ask(&self, pending: &PendingCall, asked: Option<&Asked>) -> Answer {
        let Ok(requested_schema) = ElicitationSchema::builder()
            .required_bool_with("approve", |field| {
                field
                    .title("Approve this call")
                    .description("true runs this one call once; false denies it")
            })
            .optional_string_with("reason", |field| {
                field
                    .title("Reason")
                    .description("Why it is denied (the agent reads it)")
            })
            .build()
        else {
            return Answer::Denied("the approval request could not be built".to_owned());
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: Some(binding_meta(pending)),
            message: question(pending, asked),
            requested_schema,
        };
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let handle = match self
            .peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(self.timeout))
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                return Answer::Denied(format!("the MCP client could not be asked ({error})"));
            }
        };
        let id = handle.id.clone();
        let response = tokio::select! {
            biased;
            () = self.cancel.cancelled() => {
                // Withdraw the question: rmcp forgets the request, so an
                // answer still on its way answers nothing.
                let withdrawn = CancelledNotificationParam::new(
                    Some(id),
                    Some("the call was cancelled".to_owned()),
                );
                let _ = self.peer.notify_cancelled(withdrawn).await;
                return Answer::Cancelled;
            }
            response = handle.await_response() => response,
        };
        match response {
            Ok(ClientResult::ElicitResult(result)) => read_answer(&result),
            Ok(_) => {
                Answer::Denied("the MCP client's answer was not an elicitation result".to_owned())
            }
            Err(ServiceError::Timeout { timeout }) => Answer::Denied(format!(
                "the MCP client gave no answer within {timeout:?}, and no answer is a denial"
            )),
            Err(ServiceError::McpError(error)) => Answer::Denied(format!(
                "the MCP client refused the approval request ({})",
                error.message
            )),
            Err(error) => Answer::Denied(format!("the MCP client did not answer ({error})")),
        }
    }
}

/// What the person reads: the tool, why it waits, the run, the call and
/// the arguments' hash, and the arguments only as the run's events show
/// them (payload capture on, redacted).
fn question(pending: &PendingCall, asked: Option<&Asked>) -> String {
    let reason = asked.map_or(pending.reason.as_str(), |a| a.reason.as_str());
    let mut text = format!(
        "The tool '{tool}' waits for your approval: {reason}\n\
         Run: {run}\n\
         Call: {call}\n\
         Arguments SHA-256: {hash}\n",
        tool = pending.call.name,
        run = pending.run_id,
        call = pending.call.id,
        hash = args_hash(&pending.call.arguments),
    );
    if let Some(arguments) = asked.and_then(|a| a.arguments.as_ref()) {
        text.push_str(&format!("Arguments: {arguments}\n"));
    }
    text.push_str("Approve this one call (it runs once), or deny it?");
    text
}

/// The request's `_meta`: what the answer decides, for a client that
/// shows or records it. The server does not read it back.
fn binding_meta(pending: &PendingCall) -> RequestMetaObject {
    let mut meta = serde_json::Map::new();
    meta.insert(
        APPROVAL_META.to_owned(),
        json!({
            "run_id": pending.run_id.as_str(),
            "call_id": pending.call.id.as_str(),
            "tool": pending.call.name,
            "args_sha256": args_hash(&pending.call.arguments),
        }),
    );
    RequestMetaObject(MetaObject(meta))
}

/// Accept with `approve: true` approves; accept with anything else,
/// decline and cancel deny.
fn read_answer(result: &ElicitResult) -> Answer {
    let field = |name: &str| result.content.as_ref().and_then(|c| c.get(name));
    match result.action {
        ElicitationAction::Accept => {
            if field("approve") == Some(&Value::Bool(true)) {
                return Answer::Approved;
            }
            let reason = field("reason")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| r.chars().take(MAX_REASON_CHARS).collect::<String>());
            Answer::Denied(match reason {
                Some(reason) => format!("the MCP client's user denied it: {reason}"),
                None => "the MCP client's user denied it".to_owned(),
            })
        }
        ElicitationAction::Decline => {
            Answer::Denied("the MCP client's user declined to approve it".to_owned())
        }
        ElicitationAction::Cancel => {
            Answer::Denied("the MCP client's user dismissed the approval request".to_owned())
        }
        _ => Answer::Denied("the MCP client answered with an unknown action".to_owned()),
    }
}
