//! The rows of the ledger: what a started call writes, how it settles, and
//! the row read back.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tinyagents_core::{CallId, RunId, ToolControl, ToolReplay, ToolResult};

use crate::clock::Timestamp;
use crate::resolution::Resolution;

/// The default cut of a stored result's content: 64 KiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;

/// What the harness writes before a tool runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedRow {
    /// The run.
    pub run_id: RunId,
    /// The call (`p1`, `p1/1`, …), unique in the run.
    pub call_id: CallId,
    /// The immediate parent of a nested call, `None` for a model-issued one.
    pub parent_call_id: Option<CallId>,
    /// The tool's name.
    pub tool_name: String,
    /// The hash of the prepared arguments ([`args_hash`](crate::args_hash)),
    /// the call's idempotency key with the run and call ids.
    pub args_hash: String,
    /// Whether the call may run again when a crash left its outcome unknown.
    pub replay: ToolReplay,
}

impl StartedRow {
    /// A started row whose parent is the one the call id names
    /// ([`CallId::parent`]).
    pub fn new(
        run_id: RunId,
        call_id: CallId,
        tool_name: impl Into<String>,
        args_hash: impl Into<String>,
        replay: ToolReplay,
    ) -> Self {
        Self {
            parent_call_id: call_id.parent(),
            run_id,
            call_id,
            tool_name: tool_name.into(),
            args_hash: args_hash.into(),
            replay,
        }
    }
}

/// How a call ended, as the harness reports it when it settles the row.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The tool returned a result (its own `is_error` included).
    Completed(ToolResult),
    /// The call ended without a result: it raised, timed out, or was refused
    /// after its row was written. The text is what the model was told.
    Failed(String),
    /// Recovery resolved a call that was in doubt without running it again
    /// (a `ToolReplay::Never` call after a crash): "interrupted, outcome
    /// unknown". The text is the result given to the model.
    Interrupted(String),
    /// The call asked for an approval while it ran (a tool or a wrap layer
    /// raised it) and did not act: the row rests as
    /// [`CallStatus::Deferred`] until the call starts again once a person
    /// decides. The text is the reason (what approval was asked for).
    Deferred(String),
}

/// The state of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Written before the tool ran and not settled: after a crash, the call
    /// is in doubt (it may not have run, may have run, or may have finished).
    Started,
    /// The tool returned a result.
    Completed,
    /// The call ended without a result.
    Failed,
    /// Resolved by recovery without running again; the outcome is unknown.
    Interrupted,
    /// The call asked for an approval while it ran and did not act. Not in
    /// doubt and not settled: a resting state, from which the call may start
    /// again (whatever its replay class) once the approval is decided. Its
    /// result holds the reason.
    Deferred,
}

impl CallStatus {
    /// Whether the call ended for good: [`Completed`](Self::Completed),
    /// [`Failed`](Self::Failed) or [`Interrupted`](Self::Interrupted). A
    /// settled call never starts again. [`Started`](Self::Started) and
    /// [`Deferred`](Self::Deferred) are not settled.
    pub fn is_settled(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Interrupted)
    }

    /// Whether the call is in doubt ([`Started`](Self::Started)): it may not
    /// have run, may have run, or may have finished.
    pub fn is_in_doubt(self) -> bool {
        self == Self::Started
    }

    /// Whether the row holds a result: every status but
    /// [`Started`](Self::Started) (a deferred row holds its reason).
    pub fn has_result(self) -> bool {
        self != Self::Started
    }

    /// The status as stored (`started`, `completed`, `failed`,
    /// `interrupted`, `deferred`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
            Self::Deferred => "deferred",
        }
    }

    /// Parses a stored status.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "started" => Self::Started,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "interrupted" => Self::Interrupted,
            "deferred" => Self::Deferred,
            _ => return None,
        })
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A result as the ledger keeps it: the content cut at the ledger's limit,
/// metadata kept only when its JSON fits the same limit.
///
/// Results should be redacted before they reach the ledger: it stores what
/// it is given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResult {
    /// The content, cut at the limit on a UTF-8 boundary.
    pub content: String,
    /// The tool reported its own failure (always true for `Failed` and
    /// `Interrupted` outcomes, always false for `Deferred`, whose content is
    /// the reason the call waits and not an answer the model saw).
    pub is_error: bool,
    /// Host-only metadata, `None` when absent or dropped for size.
    pub metadata: Option<Value>,
    /// The control request of the result.
    pub control: Option<ToolControl>,
    /// The content's length in bytes before the cut.
    pub original_bytes: u64,
    /// Whether the content was cut or the metadata dropped.
    pub truncated: bool,
}

impl StoredResult {
    /// Stores `outcome`, cutting content and metadata at `max_bytes`.
    /// Returns the row status and the result to keep.
    pub fn from_outcome(outcome: &Outcome, max_bytes: usize) -> (CallStatus, Self) {
        match outcome {
            Outcome::Completed(result) => (CallStatus::Completed, Self::cut(result, max_bytes)),
            Outcome::Failed(text) => (
                CallStatus::Failed,
                Self::cut(&ToolResult::error(text.clone()), max_bytes),
            ),
            Outcome::Interrupted(text) => (
                CallStatus::Interrupted,
                Self::cut(&ToolResult::error(text.clone()), max_bytes),
            ),
            Outcome::Deferred(reason) => (
                CallStatus::Deferred,
                Self::cut(&ToolResult::text(reason.clone()), max_bytes),
            ),
        }
    }

    /// Cuts `result` at `max_bytes`: the content on a UTF-8 boundary, the
    /// metadata dropped when its JSON text is longer than the limit.
    pub fn cut(result: &ToolResult, max_bytes: usize) -> Self {
        let content = cut_utf8(&result.content, max_bytes);
        let mut truncated = content.len() < result.content.len();
        let metadata = match &result.metadata {
            Some(value) if json_len(value) <= max_bytes => Some(value.clone()),
            Some(_) => {
                truncated = true;
                None
            }
            None => None,
        };
        Self {
            content: content.to_owned(),
            is_error: result.is_error,
            metadata,
            control: result.control,
            original_bytes: u64::try_from(result.content.len()).unwrap_or(u64::MAX),
            truncated,
        }
    }

    /// The result as the tool would have returned it (cut as stored), so
    /// that a settled call can be answered from its row.
    pub fn to_tool_result(&self) -> ToolResult {
        ToolResult {
            content: self.content.clone(),
            is_error: self.is_error,
            metadata: self.metadata.clone(),
            control: self.control,
        }
    }
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a
/// character boundary.
fn cut_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The length of `value`'s compact JSON text, counted without building it.
fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` into an infallible writer cannot fail.
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// One row of the ledger as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    /// The run.
    pub run_id: RunId,
    /// The call.
    pub call_id: CallId,
    /// The immediate parent of a nested call.
    pub parent_call_id: Option<CallId>,
    /// The tool's name.
    pub tool_name: String,
    /// The hash of the prepared arguments.
    pub args_hash: String,
    /// The tool's replay class.
    pub replay: ToolReplay,
    /// Started, or how it settled.
    pub status: CallStatus,
    /// How many times the call was started (a replay-safe call restarted
    /// after a crash counts 2, …).
    pub attempts: u32,
    /// When the call last started.
    pub started_at: Timestamp,
    /// When it settled.
    pub settled_at: Option<Timestamp>,
    /// The stored result, present once the row settled; for a deferred row,
    /// its reason.
    pub result: Option<StoredResult>,
    /// What a tool's reconciliation or a person last found out about the
    /// call's effect, when the row was in doubt. A restart keeps it (it says
    /// why the call ran again).
    pub resolution: Option<Resolution>,
}

impl LedgerRow {
    /// The row of a call that just started for the first time.
    pub fn started(row: StartedRow, at: Timestamp) -> Self {
        Self {
            run_id: row.run_id,
            call_id: row.call_id,
            parent_call_id: row.parent_call_id,
            tool_name: row.tool_name,
            args_hash: row.args_hash,
            replay: row.replay,
            status: CallStatus::Started,
            attempts: 1,
            started_at: at,
            settled_at: None,
            result: None,
            resolution: None,
        }
    }

    /// Whether the call is in doubt: started and never settled (a deferred
    /// row is not: it did not act).
    pub fn is_in_doubt(&self) -> bool {
        self.status.is_in_doubt()
    }

    /// Whether nobody knows yet what the call's effect was: it is in doubt
    /// (started and never settled), or it was answered "interrupted,
    /// outcome unknown" and its tool must not repeat (`ToolReplay::Never`)
    /// and no reconciliation or person has said whether it happened. Such a
    /// row keeps its run in `unfinished_runs`, is listed by `unresolved` and
    /// `in_doubt`, and is never pruned. An interrupted replay-safe call is
    /// resolved by its class: running it again is harmless.
    pub fn is_unresolved(&self) -> bool {
        match self.status {
            CallStatus::Started => true,
            CallStatus::Interrupted => {
                self.replay == ToolReplay::Never
                    && self
                        .resolution
                        .as_ref()
                        .is_none_or(|resolution| !resolution.effect.is_known())
            }
            CallStatus::Completed | CallStatus::Failed | CallStatus::Deferred => false,
        }
    }

    /// Counts one more start of an existing row (a restart): status back to
    /// started, the settled time and result cleared.
    pub(crate) fn restart(&mut self, at: Timestamp) {
        self.status = CallStatus::Started;
        self.attempts = self.attempts.saturating_add(1);
        self.started_at = at;
        self.settled_at = None;
        self.result = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_is_cut_on_a_char_boundary() {
        let result = ToolResult::text("aé€x"); // 1 + 2 + 3 + 1 bytes
        let stored = StoredResult::cut(&result, 5);
        assert_eq!(stored.content, "aé");
        assert!(stored.truncated);
        assert_eq!(stored.original_bytes, 7);
        let whole = StoredResult::cut(&result, 7);
        assert_eq!(whole.content, "aé€x");
        assert!(!whole.truncated);
    }

    #[test]
    fn oversized_metadata_is_dropped_and_flagged() {
        let result = ToolResult::text("ok").with_metadata(json!({"k": "0123456789"}));
        let stored = StoredResult::cut(&result, 10);
        assert_eq!(stored.metadata, None);
        assert!(stored.truncated);
        let kept = StoredResult::cut(&result, 64);
        assert_eq!(kept.metadata, Some(json!({"k": "0123456789"})));
        assert_eq!(kept.to_tool_result(), result);
    }

    #[test]
    fn statuses_round_trip_their_text() {
        for status in [
            CallStatus::Started,
            CallStatus::Completed,
            CallStatus::Failed,
            CallStatus::Interrupted,
            CallStatus::Deferred,
        ] {
            assert_eq!(CallStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(CallStatus::parse("deferred"), Some(CallStatus::Deferred));
        assert_eq!(CallStatus::parse("done"), None);
    }

    #[test]
    fn a_deferred_status_is_neither_settled_nor_in_doubt_and_holds_a_result() {
        let deferred = CallStatus::Deferred;
        assert!(!deferred.is_settled());
        assert!(!deferred.is_in_doubt());
        assert!(deferred.has_result());
        assert!(CallStatus::Started.is_in_doubt() && !CallStatus::Started.has_result());
        for settled in [
            CallStatus::Completed,
            CallStatus::Failed,
            CallStatus::Interrupted,
        ] {
            assert!(settled.is_settled() && !settled.is_in_doubt() && settled.has_result());
        }
    }

    #[test]
    fn a_deferred_outcome_stores_its_reason_as_a_non_error() {
        let outcome = Outcome::Deferred("approval needed: wire_money".into());
        let (status, stored) = StoredResult::from_outcome(&outcome, 1024);
        assert_eq!(status, CallStatus::Deferred);
        assert_eq!(stored.content, "approval needed: wire_money");
        assert!(!stored.is_error);
    }
}
