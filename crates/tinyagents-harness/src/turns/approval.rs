//! A turn that waits for a person: the run suspended with its waiting
//! calls, and a decided call admitted again through the whole table, its
//! approval bound to the run, the call, the tool and the arguments.

use tinyagents_core::{RunStatus, TinyAgentsError, ToolCall, args_hash};
use tinytools::prepare_arguments;

use super::Run;
use super::turn::Slot;
use crate::call::{Admission, Scope};
use crate::run::{
    AgentRun, ApprovalDecision, HeldArguments, PendingCall, SUSPENDED_RUN_FORMAT, SuspendedRun,
    TurnEntry,
};

impl<'h> Run<'h> {
    /// Ends a run segment waiting for approval: the calls that needed none
    /// have settled; the state holds what the host needs to resume. A
    /// waiting call gives its budget slot back: resuming reserves it again.
    pub(crate) async fn suspend(&mut self, mut turn: Vec<TurnEntry>) -> AgentRun {
        let ctx = &self.ctx;
        let mut replay_blocked = Vec::new();
        for entry in &mut turn {
            if let TurnEntry::Pending { pending } = entry {
                ctx.tracker().release_tool_call();
                // The stored state keeps the waiting call as the transcript
                // does, redacted; a secret stays in this process only.
                let redacted = self.events.redaction().call(&pending.call);
                if redacted.changed || redacted.failed.is_some() {
                    replay_blocked.push(pending.call.id.clone());
                    let real = std::mem::replace(&mut pending.call, redacted.copy);
                    pending.held = HeldArguments(Some((real.arguments, real.raw_arguments)));
                }
            }
        }
        let suspended = SuspendedRun {
            format: SUSPENDED_RUN_FORMAT,
            run_id: ctx.run_id.clone(),
            state: self.state.clone(),
            turn,
            budget: ctx.budget(),
            active_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            properties: (*ctx.properties).clone(),
            depth: ctx.depth,
            replay_blocked,
        };
        let text = self
            .state
            .last_assistant_text()
            .unwrap_or_default()
            .to_owned();
        // A resume is held to the checkpoint of this turn: make it durable.
        self.flush_ledger().await;
        let mut run = self.finish(RunStatus::AwaitingApproval, text).await;
        run.suspended = Some(suspended);
        run
    }

    /// Applies a decision to a waiting call: an approved call is admitted
    /// again with the approval granted; others are refused.
    pub(crate) async fn decide(
        &mut self,
        position: usize,
        pending: PendingCall,
        blocked: bool,
        decision: Option<&ApprovalDecision>,
    ) -> Slot<'h> {
        let PendingCall { mut call, held, .. } = pending;
        let held = blocked.then_some(held);
        let text = match decision {
            Some(d) if d.approved => match self.approve(&mut call, d, held) {
                Ok(()) => return self.admit_approved(position, call).await,
                Err(text) => text,
            },
            Some(d) => format!(
                "denied by a person{}",
                d.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            None => "refused: no decision was given for this call".to_owned(),
        };
        let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
        self.refused_slot(call, &refusal).await
    }

    /// Checks an approval against its call and grants it for the call's
    /// arguments prepared again (injection, the invalid-arguments policy,
    /// the schema), which is what admission and the policies see.
    /// A call whose stored arguments are redacted (`held` is `Some`) runs
    /// only with the real arguments this process kept.
    fn approve(
        &mut self,
        call: &mut ToolCall,
        decision: &ApprovalDecision,
        held: Option<HeldArguments>,
    ) -> Result<(), String> {
        let harness = self.harness;
        if decision.tool_name != call.name || decision.args_hash != args_hash(&call.arguments) {
            return Err("refused: the approval does not match this call's tool or arguments, so it was not run".to_owned());
        }
        match held.map(|held| held.0) {
            None => {}
            Some(Some((arguments, raw_arguments))) => {
                call.arguments = arguments;
                call.raw_arguments = raw_arguments;
            }
            Some(None) => {
                return Err(format!(
                    "refused: the arguments of call {} held a secret that redaction kept out of the stored state, so it cannot run from that state (resume from the state this process returned, or let the model issue the call again)",
                    call.id
                ));
            }
        }
        if let Some(entry) = harness.calls.lookup(&call.name) {
            match prepare_arguments(
                entry,
                call,
                &harness.calls.injected,
                harness.calls.invalid_args,
            ) {
                Ok(prepared) => {
                    call.arguments = prepared;
                    call.raw_arguments = None;
                }
                Err(error) => return Err(TinyAgentsError::from(error).to_string()),
            }
        }
        self.ctx.approve_call(call);
        Ok(())
    }

    /// Admits an approved call like a new one, at its place in the turn.
    async fn admit_approved(&mut self, position: usize, call: ToolCall) -> Slot<'h> {
        let harness = self.harness;
        let scope = Scope::Model {
            ctx: &mut self.ctx,
            state: &self.state,
            position,
        };
        // Approved arguments are prepared again, whatever they were.
        match harness.calls.admit(scope, &self.events, call, None).await {
            Admission::Run(admitted) => Slot::admitted(admitted),
            Admission::Pending(call, reason) => {
                Slot::Pending(PendingCall::waiting(self.ctx.run_id.clone(), call, reason))
            }
            Admission::Refused(call, error) | Admission::Fatal(call, error) => {
                self.refused_slot(call, &error).await
            }
        }
    }
}
