//! Calls a recovery meets again whose arguments held redacted secrets: the
//! checkpoint has only their redacted copy, so they are never run from it;
//! each is answered from its row, or from its tool's reconciliation.

use tinyagents_core::{TinyAgentsError, ToolCall, ToolReplay};
use tinyagents_ledger::{Found, Outcome};

use super::Run;
use super::turn::Slot;
use crate::call::{Doubt, guarded};

impl<'h> Run<'h> {
    /// A recovered call whose arguments held a redacted secret: it cannot run
    /// again. A settled one is answered from its row.
    pub(crate) async fn blocked_replay(&self, call: ToolCall) -> Slot<'h> {
        let harness = self.harness;
        let Some(ledger) = &harness.calls.ledger else {
            return self.refuse_blocked(call, None).await;
        };
        let Ok(Some(row)) = guarded("get", ledger.get(&self.ctx.run_id, &call.id)).await else {
            return self.refuse_blocked(call, None).await;
        };
        if let Some(stored) = row.result {
            return Slot::Recorded {
                call,
                result: stored.to_tool_result(),
            };
        }
        let why = format!(
            "call {} started before the crash and its arguments held redacted secrets, so it cannot be replayed",
            call.id
        );
        // Its tool can still say whether it acted (it needs no arguments for
        // that); a finding recorded settles the row, else it is settled here.
        let (text, settle) = if row.replay == ToolReplay::Never {
            let doubt = Doubt {
                spend: Some(self.ctx.spend()),
                ..Doubt::of(&row)
            };
            let tool = harness.calls.tools.get(&row.tool_name);
            let finding = harness
                .calls
                .ask(doubt, tool, &row.tool_name, self.ctx.cancellation())
                .await;
            let recorded = harness
                .calls
                .record_finding(ledger.as_ref(), self.events.redaction(), doubt, &finding)
                .await;
            match (recorded, finding.found) {
                (Ok(()), Found::Happened(result)) => return Slot::Recorded { call, result },
                (Ok(()), Found::NotHappened) => (
                    format!("refused: {}; it never acted, and {why}", finding.note),
                    false,
                ),
                (Ok(()), Found::Unknown) => (
                    format!("interrupted, outcome unknown: {why}; {}", finding.note),
                    false,
                ),
                (Err(error), _) => (
                    format!(
                        "interrupted, outcome unknown: {why}; {} (not recorded: {error})",
                        finding.note
                    ),
                    true,
                ),
            }
        } else {
            (format!("interrupted, outcome unknown: {why}"), true)
        };
        if settle {
            harness
                .calls
                .settle_row(
                    &self.ctx,
                    &self.events,
                    &call.id,
                    Outcome::Interrupted(text.clone()),
                )
                .await;
        }
        self.refuse_blocked(call, Some(text)).await
    }

    /// The refusal of a call that cannot be replayed: `text`, or without a
    /// row to say more, that its arguments were never persisted.
    async fn refuse_blocked(&self, call: ToolCall, text: Option<String>) -> Slot<'h> {
        let text = text.unwrap_or_else(|| {
            format!(
                "refused: call {} cannot be replayed after a crash: its arguments held secrets that were never persisted",
                call.id
            )
        });
        let refusal = TinyAgentsError::tool_failed(call.name.clone(), text);
        self.refused_slot(call, &refusal).await
    }
}
