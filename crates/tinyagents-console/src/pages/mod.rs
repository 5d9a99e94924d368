//! The console's pages and actions: each reads the stores and answers
//! with HTML rendered here.

pub(crate) mod actions;
pub(crate) mod assets;
pub(crate) mod doubt;
pub(crate) mod inbox;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod sessions;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use tinyagents_core::{AgentEvent, CallId, RunId};
use tinyagents_runs::{JournalEntry, RecordStatus, RunQuery, RunRecord};

use crate::console::Inner;
use crate::html::{self, Frame};

/// The state every handler gets.
pub(crate) type Shared = axum::extract::State<Arc<Inner>>;

/// A page that could not be made: what could not be read, and why.
#[derive(Debug)]
pub(crate) struct PageError {
    pub(crate) status: StatusCode,
    pub(crate) title: String,
    pub(crate) text: String,
}

impl PageError {
    pub(crate) fn store(what: &str, error: &dyn std::fmt::Display) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: format!("Could not read {what}"),
            text: format!("{what}: {error}"),
        }
    }

    pub(crate) fn not_found(title: &str, text: String) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            title: title.to_owned(),
            text,
        }
    }

    pub(crate) fn bad(title: &str, text: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            title: title.to_owned(),
            text,
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        (self.status, Html(html::bare_page(&self.title, &self.text))).into_response()
    }
}

/// A page's answer.
pub(crate) type PageResult = Result<Html<String>, PageError>;

/// Anything else: not a page of the console.
pub(crate) async fn not_found() -> PageError {
    PageError::not_found(
        "No such page",
        "The console has no page at this address.".to_owned(),
    )
}

/// The frame of a page titled `title` under tab `tab`, with the counts of
/// waiting calls and calls in doubt.
pub(crate) async fn framed(inner: &Inner, title: &str, tab: &str, body: &str) -> PageResult {
    let waiting = inner
        .stores
        .runs
        .waiting(10_000)
        .await
        .map_err(|e| PageError::store("the approval inbox", &e))?
        .len();
    let in_doubt = in_doubt(inner).await?.len();
    let frame = Frame {
        title,
        tab,
        waiting,
        in_doubt,
        operator: &inner.options.operator,
        store: &inner.options.store_shown,
    };
    Ok(Html(html::page(&frame, body)))
}

/// The top run a run belongs to (itself, or the run that delegated to it).
pub(crate) fn top_run(run: &RunId) -> RunId {
    let mut run = run.clone();
    while let Some((parent, _)) = tinyagents_orchestrator::parent_of_child_run(&run) {
        run = parent;
    }
    run
}

/// Every run the store holds.
pub(crate) async fn all_runs(inner: &Inner) -> Result<Vec<RunRecord>, PageError> {
    inner
        .stores
        .runs
        .list(&RunQuery::default().limit(u32::MAX))
        .await
        .map_err(|e| PageError::store("the runs", &e))
}

/// The calls in doubt across runs, without the calls in flight of runs
/// that run now (held, their holder alive): their start is recorded and
/// their result is coming.
pub(crate) async fn in_doubt(inner: &Inner) -> Result<Vec<tinyagents_ledger::InDoubt>, PageError> {
    let all = inner
        .stores
        .ledger
        .in_doubt()
        .await
        .map_err(|e| PageError::store("the calls in doubt", &e))?;
    let now = tinyagents_ledger::Timestamp::now();
    let mut out = Vec::with_capacity(all.len());
    let mut running: std::collections::HashMap<RunId, bool> = std::collections::HashMap::new();
    for doubt in all {
        let top = top_run(&doubt.row.run_id);
        let in_flight = match running.get(&top) {
            Some(known) => *known,
            None => {
                let record = inner
                    .stores
                    .runs
                    .get(&top)
                    .await
                    .map_err(|e| PageError::store(&format!("run {top}"), &e))?;
                let live = record
                    .is_some_and(|r| r.status == RecordStatus::Running && !r.holder_gone(now));
                running.insert(top, live);
                live
            }
        };
        let started = doubt.row.status == tinyagents_ledger::CallStatus::Started;
        if !(in_flight && started) {
            out.push(doubt);
        }
    }
    Ok(out)
}

/// How a run stands, as a person reads it.
pub(crate) fn shown_status(record: &RunRecord) -> &'static str {
    match record.status {
        RecordStatus::Queued if record.is_decided() => "decided, to resume",
        RecordStatus::Queued => "queued",
        RecordStatus::Running if record.holder_gone(tinyagents_ledger::Timestamp::now()) => {
            "holder gone"
        }
        RecordStatus::Running => "running",
        RecordStatus::AwaitingApproval => "waiting",
        RecordStatus::Completed | RecordStatus::Terminated => "finished",
        RecordStatus::LimitReached => "limit reached",
        RecordStatus::Cancelled => "cancelled",
        RecordStatus::Failed => "failed",
    }
}

/// Every entry of `run`'s journal, read in pages.
pub(crate) async fn whole_journal(
    inner: &Inner,
    run: &RunId,
) -> Result<Vec<JournalEntry>, PageError> {
    const PAGE: u32 = 10_000;
    let mut all: Vec<JournalEntry> = Vec::new();
    loop {
        let after = all.last().map_or(0, |e| e.seq);
        let page = inner
            .stores
            .runs
            .journal(run, after, PAGE)
            .await
            .map_err(|e| PageError::store(&format!("the journal of run {run}"), &e))?;
        let done = page.len() < PAGE as usize;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

/// The arguments the journal holds for waiting call `call` (only when the
/// run captured tool payloads), at any depth of delegation.
pub(crate) fn journaled_arguments<'j>(
    journal: &'j [JournalEntry],
    call: &CallId,
) -> Option<&'j serde_json::Value> {
    fn find<'e>(event: &'e AgentEvent, call: &CallId) -> Option<&'e serde_json::Value> {
        match event {
            AgentEvent::ApprovalRequested {
                call_id, arguments, ..
            } if call_id == call => arguments.as_ref(),
            AgentEvent::Delegated { event, .. } => find(event, call),
            _ => None,
        }
    }
    journal
        .iter()
        .rev()
        .filter_map(|e| e.event.as_ref().ok())
        .find_map(|event| find(event, call))
}

/// `value` as indented JSON, escaped for HTML.
pub(crate) fn json_block(value: &serde_json::Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    format!("<pre class=\"json\">{}</pre>", html::esc(&text))
}
