//! Servicing a nested call: the call path's one admission, execution and
//! settlement, with the nested origin. What differs from a model-issued
//! call is in the admission table and the settlement's `match`; what is
//! here is the nested call's life around them: its `ToolStarted` on
//! arrival, the calling tool leaving (abandonment), and the reply.

use std::sync::Arc;

use tinyagents_core::{CallId, TinyAgentsError, ToolCall};

use super::ToolSpan;
use super::nested::{NestedRequest, NestedRunner, NestedStatus};
use super::{Admission, Admitted, CallEnv, CallOutcome, CallSite, Scope, SettleScope, Settlement};

impl CallEnv<'_> {
    /// Services one nested request to its end: the reply carries the result
    /// or the refusal; events, summary and budget are settled here. Every
    /// request that reaches the loop gets its `ToolStarted` first and then
    /// exactly one terminal event, whoever ends it (see `NestedRunner`).
    pub(crate) async fn serve_nested(&self, runner: &Arc<NestedRunner>, request: NestedRequest) {
        let path = self.path;
        // A request whose caller or parent is gone never starts: no events,
        // no row, no slot.
        let Some(request) = runner.drop_orphan(request) else {
            return;
        };
        let NestedRequest {
            parent,
            id,
            name,
            arguments,
            mut reply,
            span: parent_span,
        } = request;
        self.events
            .started_nested(&id, &parent, &name, &arguments)
            .await;
        let charged = runner.started(&id, &parent, &name, runner.summary_args(&arguments));
        let call = ToolCall::new(id.clone(), name, arguments);
        let scope = Scope::Nested {
            ctx: self.ctx,
            state: self.state,
            parent: &parent,
            runner,
            quota_spent: !charged,
        };
        let admission = tokio::select! {
            biased;
            admitted = path.admit(scope, self.events, call, None) => Some(admitted),
            () = reply.closed() => None,
        };
        let admitted = match admission {
            Some(Admission::Run(admitted)) => admitted,
            Some(Admission::Refused(call, error) | Admission::Fatal(call, error)) => {
                let text = error.to_string();
                self.nested_refused_span(&id, &parent_span, &call, error.error_type(), &text);
                runner.end_failed(&id, 0, NestedStatus::Failed, &text).await;
                let _ = reply.send(Err(error));
                return;
            }
            Some(Admission::Pending(call, _)) => {
                // The admission table never defers a nested call; fail closed.
                let error = TinyAgentsError::NestedApprovalRequired {
                    tool: call.name.clone(),
                };
                let text = error.to_string();
                self.nested_refused_span(&id, &parent_span, &call, error.error_type(), &text);
                runner.end_failed(&id, 0, NestedStatus::Failed, &text).await;
                let _ = reply.send(Err(error));
                return;
            }
            None => {
                runner.end_abandoned(&id, &parent).await;
                return;
            }
        };
        let Admitted {
            call,
            entry,
            hold,
            recorded,
            args_hash,
            ..
        } = admitted;
        let kind = hold.as_ref().map(|(_, kind)| *kind);
        if let Some(kind) = kind {
            runner.admitted(&id, kind);
        }
        let replayed = recorded.is_some();
        let outcome = match recorded {
            // Settled before a crash: answered from its row, not run again.
            Some(result) => Some(CallOutcome::recorded(result)),
            None => {
                let site = CallSite {
                    parent_call_id: Some(&parent),
                    nested: Some(runner),
                    args_hash: args_hash.as_deref(),
                    provider_id: None,
                    parent_span: Some(&parent_span),
                };
                // Made inside the `select!`, so this future holds the call's
                // execution once; the call is only lent to it.
                tokio::select! {
                    biased;
                    outcome = self.execute_call(&call, entry, site) => Some(outcome),
                    () = reply.closed() => None,
                }
            }
        };
        drop(hold);
        let Some(outcome) = outcome.map(CallOutcome::for_nested) else {
            // The calling tool stopped waiting: the call is abandoned; its
            // ledger row (if any) stays started.
            runner.end_abandoned(&id, &parent).await;
            return;
        };
        if !replayed {
            path.record(self.ctx, self.events, &id, entry.spec(), &outcome)
                .await;
        }
        let scope = SettleScope::Nested {
            ctx: self.ctx,
            state: self.state,
            runner,
        };
        match path.settle(scope, self.events, &call, outcome).await {
            Settlement::Answered { result, error } => {
                let _ = reply.send(error.map_or(Ok(result), Err));
            }
            // Its parent settled first and claimed its end.
            Settlement::Claimed => {}
            Settlement::Deferred(reason) => {
                let _ = reply.send(Err(TinyAgentsError::ApprovalRequired {
                    tool: call.name,
                    reason,
                }));
            }
        }
    }

    /// The `execute_tool` span of a nested call refused at admission, under
    /// its calling tool's span.
    fn nested_refused_span(
        &self,
        id: &CallId,
        parent: &tracing::Span,
        call: &ToolCall,
        error_type: &str,
        text: &str,
    ) {
        let span = ToolSpan {
            id,
            name: &call.name,
            provider_id: None,
            parent: Some(parent),
            run: self.shared,
        };
        let arguments = || self.events.redaction().arguments(call);
        span.refused(self.events, arguments, error_type, text);
    }
}
