//! The history of a run: what happened to its record, with who and when.

use serde::{Deserialize, Serialize};
use tinyagents_core::CallId;
use tinyagents_ledger::Timestamp;

use crate::record::RecordStatus;

/// One entry of a run's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// When.
    pub at: Timestamp,
    /// Who (a holder's name, a person).
    pub by: String,
    /// What.
    pub event: RunEvent,
}

/// What happened to a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// It was recorded: held at once, or queued.
    Created {
        /// Where it started.
        status: RecordStatus,
    },
    /// A holder took it.
    Claimed {
        /// The claim's epoch.
        epoch: u64,
        /// How it will run: `start`, `resume` or `recover`.
        segment: String,
    },
    /// It waits for a person on some calls.
    Suspended {
        /// Which suspension.
        suspension: u32,
        /// The calls that wait.
        calls: Vec<CallId>,
    },
    /// A person decided a waiting call.
    Decided {
        /// Which suspension.
        suspension: u32,
        /// The call.
        call_id: CallId,
        /// Approved or denied.
        approved: bool,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An operator accepted that its agents file changed since it started,
    /// so a resume or a recovery builds the agents from the new content.
    FileAccepted {
        /// The file.
        path: String,
        /// The hash the run had.
        from: String,
        /// The hash accepted.
        to: String,
    },
    /// Its holder gave it back unfinished.
    Released,
    /// A segment ended.
    Ended {
        /// The record's status after it.
        status: RecordStatus,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Serialize for RecordStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RecordStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown run status '{text}'")))
    }
}
