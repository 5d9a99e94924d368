//! What became known of a call whose outcome a crash left unknown: the
//! decision a tool's reconciliation or a person records on its row
//! ([`EffectLedger::resolve`](crate::EffectLedger::resolve)), and the
//! ledger-wide list of what is still in doubt.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tinyagents_core::{IdempotencyKey, ToolResult};

use crate::clock::Timestamp;
use crate::row::{CallStatus, LedgerRow, StoredResult};

/// What is known of a call's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The effect happened.
    Happened,
    /// The effect never happened.
    NotHappened,
    /// Asked, and still unknown.
    Unknown,
}

impl Effect {
    /// The effect as stored (`happened`, `not_happened`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Happened => "happened",
            Self::NotHappened => "not_happened",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a stored effect.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "happened" => Self::Happened,
            "not_happened" => Self::NotHappened,
            "unknown" => Self::Unknown,
            _ => return None,
        })
    }

    /// Whether the effect is known (happened or not).
    pub fn is_known(self) -> bool {
        self != Self::Unknown
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Happened => "the effect happened",
            Self::NotHappened => "the effect never happened",
            Self::Unknown => "the outcome is still unknown",
        })
    }
}

/// Who decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolvedBy {
    /// The tool's own reconciliation (`Tool::reconcile`), asked by
    /// recovery.
    Reconcile,
    /// A person, named as the host knows them.
    Person(String),
}

impl ResolvedBy {
    /// As stored: `reconcile`, or `person:` and the name.
    pub fn stored(&self) -> String {
        match self {
            Self::Reconcile => "reconcile".to_owned(),
            Self::Person(who) => format!("person:{who}"),
        }
    }

    /// Parses [`stored`](Self::stored) text.
    pub fn parse(text: &str) -> Option<Self> {
        if text == "reconcile" {
            return Some(Self::Reconcile);
        }
        text.strip_prefix("person:")
            .map(|who| Self::Person(who.to_owned()))
    }
}

impl fmt::Display for ResolvedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reconcile => f.write_str("the tool's reconciliation"),
            Self::Person(who) => write!(f, "{who}"),
        }
    }
}

/// What a [`resolve`](crate::EffectLedger::resolve) found out.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The effect happened; on a row still in doubt this result settles it
    /// (`completed`) and answers the call from then on.
    Happened(ToolResult),
    /// The effect never happened: a row still in doubt becomes `deferred`
    /// (the call did not act, and may start again).
    NotHappened,
    /// Still unknown: a row still in doubt is settled `interrupted`
    /// ("interrupted, outcome unknown") and stays in doubt.
    Unknown,
}

impl Found {
    /// The effect found.
    pub fn effect(&self) -> Effect {
        match self {
            Self::Happened(_) => Effect::Happened,
            Self::NotHappened => Effect::NotHappened,
            Self::Unknown => Effect::Unknown,
        }
    }
}

/// A decision about a call in doubt, as given to
/// [`resolve`](crate::EffectLedger::resolve).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolve {
    /// What was found.
    pub found: Found,
    /// Who found it.
    pub by: ResolvedBy,
    /// Why, or how it was checked: the reconciliation's error, a person's
    /// words. Redact it before it gets here.
    pub note: Option<String>,
}

impl Resolve {
    /// A person's decision.
    pub fn by_person(who: impl Into<String>, found: Found) -> Self {
        Self {
            found,
            by: ResolvedBy::Person(who.into()),
            note: None,
        }
    }

    /// The tool's reconciliation's decision.
    pub fn by_reconcile(found: Found) -> Self {
        Self {
            found,
            by: ResolvedBy::Reconcile,
            note: None,
        }
    }

    /// Adds a note.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// How a row still in doubt settles under this decision: `Happened`
    /// completes it with the result found; `NotHappened` defers it (it did
    /// not act) with who found that as its reason; `Unknown` interrupts it
    /// ("interrupted, outcome unknown" and the note). Cut at `max_bytes`.
    pub fn settles_as(&self, max_bytes: usize) -> (CallStatus, StoredResult) {
        let note = self
            .note
            .as_deref()
            .map_or_else(String::new, |n| format!(": {n}"));
        match &self.found {
            Found::Happened(result) => {
                (CallStatus::Completed, StoredResult::cut(result, max_bytes))
            }
            Found::NotHappened => {
                let reason = format!(
                    "did not act ({} found that {}){note}",
                    self.by,
                    Effect::NotHappened
                );
                (
                    CallStatus::Deferred,
                    StoredResult::cut(&ToolResult::text(reason), max_bytes),
                )
            }
            Found::Unknown => {
                let answer = format!("interrupted, outcome unknown{note}");
                (
                    CallStatus::Interrupted,
                    StoredResult::cut(&ToolResult::error(answer), max_bytes),
                )
            }
        }
    }
}

/// A decision as the row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// What is known of the effect.
    pub effect: Effect,
    /// Who decided.
    pub by: ResolvedBy,
    /// When, by the ledger's clock.
    pub at: Timestamp,
    /// Why, or how it was checked.
    pub note: Option<String>,
}

/// A call whose effect is unknown, as [`in_doubt`](crate::EffectLedger::in_doubt)
/// lists it across runs.
#[derive(Debug, Clone, PartialEq)]
pub struct InDoubt {
    /// The call's row: tool, arguments hash, status (`started`, or
    /// `interrupted` without a known effect), attempts, any resolution.
    pub row: LedgerRow,
    /// The key the tool's system knows the call by.
    pub idempotency_key: IdempotencyKey,
    /// How long since the call last started, by the ledger's clock.
    pub age: Duration,
    /// Whether its run is marked finished (no call of it starts again).
    pub run_finished: bool,
}

impl InDoubt {
    /// The listing of `row`, `now` by the ledger's clock (for backends).
    pub fn of(row: LedgerRow, now: Timestamp, run_finished: bool) -> Self {
        let age = Duration::from_millis(now.as_millis().saturating_sub(row.started_at.as_millis()));
        Self {
            idempotency_key: IdempotencyKey {
                run_id: row.run_id.clone(),
                call_id: row.call_id.clone(),
                args_hash: row.args_hash.clone(),
            },
            row,
            age,
            run_finished,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effects_round_trip_their_text() {
        for effect in [Effect::Happened, Effect::NotHappened, Effect::Unknown] {
            assert_eq!(Effect::parse(effect.as_str()), Some(effect));
        }
        assert_eq!(Effect::parse("maybe"), None);
        assert!(Effect::Happened.is_known() && !Effect::Unknown.is_known());
        for by in [
            ResolvedBy::Reconcile,
            ResolvedBy::Person("ops: alice".into()),
        ] {
            assert_eq!(ResolvedBy::parse(&by.stored()), Some(by));
        }
        assert_eq!(ResolvedBy::parse("robot"), None);
    }

    #[test]
    fn a_row_in_doubt_settles_as_the_decision_says_and_its_text_says_who_found_what() {
        let unknown = Resolve::by_reconcile(Found::Unknown).with_note("the service timed out");
        let (status, stored) = unknown.settles_as(1024);
        assert_eq!(status, CallStatus::Interrupted);
        assert_eq!(
            stored.content,
            "interrupted, outcome unknown: the service timed out"
        );
        assert!(stored.is_error);
        let not = Resolve::by_person("alice", Found::NotHappened);
        let (status, stored) = not.settles_as(1024);
        assert_eq!(status, CallStatus::Deferred);
        assert_eq!(
            stored.content,
            "did not act (alice found that the effect never happened)"
        );
        assert!(!stored.is_error);
        let paid = ToolResult::text("paid");
        let (status, stored) =
            Resolve::by_reconcile(Found::Happened(paid.clone())).settles_as(1024);
        assert_eq!(
            (status, stored.to_tool_result()),
            (CallStatus::Completed, paid)
        );
    }
}
