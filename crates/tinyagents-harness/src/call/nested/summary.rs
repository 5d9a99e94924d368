//! The summaries of a parent's nested calls: one entry per ended call (the
//! first `SUMMARY_CAP`, then a count), rendered into the parent's result
//! metadata as `nested_calls`.

use serde_json::{Map, Value, json};
use tinyagents_core::{CallId, ToolResult};
use tinytools::cut;

use super::{NestedRunner, NestedStatus, RunnerState};

/// Entries kept in a parent's `nested_calls` summary.
const SUMMARY_CAP: usize = 32;
/// Bytes of a nested call's serialised arguments kept in its summary entry.
const SUMMARY_ARGS_BYTES: usize = 1024;
/// Bytes of a nested call's error kept in its summary entry.
const SUMMARY_ERROR_BYTES: usize = 256;

/// One ended call, as its parent's summary lists it.
pub(super) struct SummaryEntry {
    pub(super) id: CallId,
    pub(super) name: String,
    pub(super) status: NestedStatus,
    pub(super) duration_ms: u64,
    pub(super) args: Option<String>,
    pub(super) error: Option<String>,
}

/// A parent's summary: its first entries, and how many more there were.
#[derive(Default)]
pub(super) struct Summary {
    entries: Vec<SummaryEntry>,
    truncated: u64,
}

impl Summary {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.truncated == 0
    }
}

impl NestedRunner {
    /// The serialised arguments a summary keeps (only under capture, and
    /// redacted).
    pub(crate) fn summary_args(&self, arguments: &Value) -> Option<String> {
        self.events.captures().then(|| {
            let redacted = self.events.redaction().copy(arguments);
            cut(&redacted.to_string(), SUMMARY_ARGS_BYTES)
        })
    }

    /// The error a summary entry keeps: under capture, or for an abandoned
    /// call (its text says why), cut.
    pub(super) fn summary_error(&self, status: NestedStatus, error: &str) -> Option<String> {
        let keep = self.events.captures() || status == NestedStatus::Abandoned;
        (keep && !error.is_empty()).then(|| cut(error, SUMMARY_ERROR_BYTES))
    }
}

/// Adds `entry` to the summary of `parent`, unless `parent` has ended (its
/// summary was taken, or no one will read it).
pub(super) fn push_summary(state: &mut RunnerState, parent: &CallId, entry: SummaryEntry) {
    let Some(family) = state.family(parent) else {
        return;
    };
    let summary = &mut family.summary;
    if summary.entries.len() < SUMMARY_CAP {
        summary.entries.push(entry);
    } else {
        summary.truncated += 1;
    }
}

/// The summary as its parent's result metadata shows it.
pub(super) fn render(summary: Summary) -> Value {
    let entries: Vec<Value> = summary
        .entries
        .into_iter()
        .map(|entry| {
            let mut object = Map::new();
            object.insert("id".into(), json!(entry.id));
            object.insert("name".into(), json!(entry.name));
            object.insert("status".into(), json!(entry.status.as_str()));
            object.insert("duration_ms".into(), json!(entry.duration_ms));
            if let Some(args) = entry.args {
                object.insert("args".into(), json!(args));
            }
            if let Some(error) = entry.error {
                object.insert("error".into(), json!(error));
            }
            Value::Object(object)
        })
        .collect();
    let mut out = Map::new();
    out.insert("nested_calls".into(), Value::Array(entries));
    if summary.truncated > 0 {
        out.insert("nested_calls_truncated".into(), json!(summary.truncated));
    }
    Value::Object(out)
}

/// Adds a parent's summary to its result's metadata, when that metadata is
/// absent or an object.
pub(crate) fn attach_summary(result: &mut ToolResult, summary: Value) {
    let Value::Object(summary) = summary else {
        return;
    };
    match &mut result.metadata {
        None => result.metadata = Some(Value::Object(summary)),
        Some(Value::Object(existing)) => existing.extend(summary),
        Some(_) => {}
    }
}
