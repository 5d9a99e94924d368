//! `/runs/{run}`: a run's record, its whole call tree (every segment,
//! delegated runs under their calls), its waiting calls with the forms to
//! decide them, its decisions and its history; the tree live while the
//! run runs (`/runs/{run}/tree` is the part the script swaps in).

use std::fmt::Write as _;

use axum::extract::Path;
use axum::response::Html;
use tinyagents_core::{RunId, Spent, ToolReplay};
use tinyagents_orchestrator::child_run_id;
use tinyagents_runs::{HistoryEntry, JournalEntry, RecordStatus, RunEvent, RunRecord, WaitingCall};

use super::{
    PageError, PageResult, Shared, framed, inbox, json_block, shown_status, whole_journal,
};
use crate::console::Inner;
use crate::html::{self, esc, url_part};
use crate::tree::{CallTree, JournalCalls, Node, NodeKind, NodeState};

/// Whether `record`'s run may still change by itself (someone runs it).
pub(crate) fn is_active(record: &RunRecord) -> bool {
    matches!(record.status, RecordStatus::Running | RecordStatus::Queued)
}

/// The run's record, or a page saying there is none.
pub(crate) async fn record_of(inner: &Inner, run: &RunId) -> Result<RunRecord, PageError> {
    inner
        .stores
        .runs
        .get(run)
        .await
        .map_err(|e| PageError::store(&format!("run {run}"), &e))?
        .ok_or_else(|| {
            PageError::not_found("No such run", format!("The run store has no run '{run}'."))
        })
}

/// The ledger rows of `run` and of its delegated runs (a delegated run's
/// rows are keyed by the calling run and call), looked for under the calls
/// that may have delegated (`calls`).
async fn rows_of(
    inner: &Inner,
    run: &RunId,
    calls: &JournalCalls,
) -> Result<Vec<tinyagents_ledger::LedgerRow>, PageError> {
    let read = |run: RunId| async move {
        inner
            .stores
            .ledger
            .rows(&run)
            .await
            .map_err(|e| PageError::store(&format!("the ledger rows of run {run}"), &e))
    };
    let mut out = read(run.clone()).await?;
    let mut next = 0;
    while next < out.len() {
        let (parent, call) = (&out[next].run_id, &out[next].call_id);
        next += 1;
        if calls.may_have_delegated(parent, call) {
            let rows = read(child_run_id(parent, call)).await?;
            out.extend(rows);
        }
    }
    Ok(out)
}

/// The run's tree, from its journal and ledger rows.
async fn tree_of(
    inner: &Inner,
    record: &RunRecord,
    journal: &[JournalEntry],
) -> Result<CallTree, PageError> {
    let calls = JournalCalls::of(&record.run_id, journal);
    let rows = rows_of(inner, &record.run_id, &calls).await?;
    Ok(CallTree::build(
        &record.run_id,
        &record.agent,
        journal,
        &rows,
        is_active(record),
    ))
}

/// The run's history, oldest first.
async fn history_of(inner: &Inner, run: &RunId) -> Result<Vec<HistoryEntry>, PageError> {
    inner
        .stores
        .runs
        .history(run)
        .await
        .map_err(|e| PageError::store(&format!("the history of run {run}"), &e))
}

/// `GET /runs/{run}`.
pub(crate) async fn page(state: Shared, Path(run): Path<String>) -> PageResult {
    let inner = state.0;
    let run = RunId::from(run);
    let record = record_of(&inner, &run).await?;
    let journal = whole_journal(&inner, &run).await?;
    let tree = tree_of(&inner, &record, &journal).await?;
    let history = history_of(&inner, &run).await?;
    let approvals = inner
        .stores
        .runs
        .approvals(&run)
        .await
        .map_err(|e| PageError::store(&format!("the approvals of run {run}"), &e))?;
    let mut body = String::with_capacity(64 * 1024);
    let _ = write!(
        body,
        r#"<h1>Run <code>{id}</code></h1>
<dl class="record"><dt>Agent</dt><dd>{agent}</dd><dt>Status</dt><dd><span class="status" id="run-status">{status}</span></dd>"#,
        id = esc(run.as_str()),
        agent = esc(&record.agent),
        status = shown_status(&record),
    );
    if let Some(file) = &record.file {
        let _ = write!(
            body,
            "<dt>Agents file</dt><dd><code>{}</code> (sha256 {})</dd>",
            esc(&file.path),
            esc(file.sha256.get(..12).unwrap_or(&file.sha256))
        );
    }
    if let Some(session) = &record.session {
        let _ = write!(
            body,
            r#"<dt>Session</dt><dd><a href="/sessions/{}">{}</a></dd>"#,
            url_part(session),
            esc(session)
        );
    }
    let _ = write!(
        body,
        "<dt>Started (UTC)</dt><dd>{}</dd><dt>Tokens</dt><dd>{} in, {} out</dd><dt>Claims</dt><dd>{}</dd>",
        record.started_at.unwrap_or(record.created_at).utc(),
        record.usage.input_tokens,
        record.usage.output_tokens,
        record.epoch
    );
    if let Some(spent) = tree.nodes.first().and_then(|top| top.spent) {
        cost_fact(&spent, &mut body);
    }
    if let Some(holder) = &record.holder {
        let _ = write!(
            body,
            "<dt>Held by</dt><dd>{} on {} (pid {})</dd>",
            esc(&holder.owner),
            esc(&holder.host),
            holder.pid
        );
    }
    if let Some(error) = &record.error {
        let _ = write!(
            body,
            r#"<dt>Error</dt><dd class="error">{}</dd>"#,
            esc(error)
        );
    }
    body.push_str("</dl>\n");
    if let Some((ok, said)) = inner.said.lock().get(&run).cloned() {
        let _ = write!(
            body,
            r#"<p class="notice {}" id="host-said">{}</p>"#,
            if ok { "ok" } else { "alarm" },
            esc(&said)
        );
    }
    actions(&inner, &record, &tree, &mut body);
    if record.status == RecordStatus::AwaitingApproval {
        let undecided: Vec<_> = approvals
            .iter()
            .filter(|c| c.suspension == record.suspension && c.decision.is_none())
            .cloned()
            .collect();
        body.push_str("<h2>Waiting for a decision</h2>\n");
        inbox::decision_form(&inner, &run, &undecided, &journal, &mut body);
    }
    let _ = write!(
        body,
        r#"<h2>Calls</h2><section id="live" data-run="{href}"{live}>"#,
        href = url_part(run.as_str()),
        live = if is_active(&record) {
            r#" data-live="on""#
        } else {
            ""
        }
    );
    render_tree(&tree, &claims(&history), &mut body);
    body.push_str("</section>\n");
    let decided: Vec<&WaitingCall> = approvals.iter().filter(|c| c.decision.is_some()).collect();
    if !decided.is_empty() {
        decisions_table("Decisions", &decided, &mut body);
    }
    history_section(&history, &mut body);
    framed(&inner, &format!("Run {run}"), "runs", &body).await
}

/// `GET /runs/{run}/tree`: the live part of the page.
pub(crate) async fn fragment(state: Shared, Path(run): Path<String>) -> PageResult {
    let inner = state.0;
    let run = RunId::from(run);
    let record = record_of(&inner, &run).await?;
    let journal = whole_journal(&inner, &run).await?;
    let tree = tree_of(&inner, &record, &journal).await?;
    let mut body = String::with_capacity(64 * 1024);
    render_tree(&tree, &claims(&history_of(&inner, &run).await?), &mut body);
    Ok(Html(body))
}

/// When each claim in `history` was made and what it began (start,
/// resume, recover), oldest first.
fn claims(history: &[HistoryEntry]) -> Vec<(u64, String)> {
    history
        .iter()
        .filter_map(|h| match &h.event {
            RunEvent::Claimed { segment, .. } => Some((h.at.as_millis(), segment.clone())),
            _ => None,
        })
        .collect()
}

fn actions(inner: &Inner, record: &RunRecord, tree: &CallTree, body: &mut String) {
    if inner.host.is_none() {
        return;
    }
    let href = url_part(record.run_id.as_str());
    let token = inner.guard.form_token();
    let in_doubt = tree.nodes.iter().any(|n| n.state == NodeState::InDoubt);
    let gone = record.status == RecordStatus::Running
        && record.holder_gone(tinyagents_ledger::Timestamp::now());
    if record.status == RecordStatus::Queued && record.is_decided() {
        let _ = write!(
            body,
            r#"<form method="post" action="/runs/{href}/resume" class="action"><input type="hidden" name="form_token" value="{token}"><button id="resume">Resume</button> every waiting call is decided</form>"#
        );
    }
    if matches!(
        record.status,
        RecordStatus::Failed | RecordStatus::Cancelled
    ) || gone
        || in_doubt
    {
        let _ = write!(
            body,
            r#"<form method="post" action="/runs/{href}/recover" class="action"><input type="hidden" name="form_token" value="{token}"><button id="recover">Recover</button> settled calls answer from the ledger; calls in doubt go to their tools</form>"#
        );
    }
}

/// A table of decided `calls` under heading `title`: run, call, tool,
/// decision, who, when, why, and the arguments' hash it binds.
pub(crate) fn decisions_table(title: &str, calls: &[&WaitingCall], body: &mut String) {
    let _ = writeln!(
        body,
        "<h2>{}</h2><table class=\"decisions\"><thead><tr><th>Run</th><th>Call</th><th>Tool</th><th>Decision</th><th>By</th><th>At (UTC)</th><th>Reason</th><th>Binds</th></tr></thead><tbody>",
        esc(title)
    );
    for call in calls {
        let Some(d) = &call.decision else {
            continue;
        };
        let _ = writeln!(
            body,
            r#"<tr data-run="{run}" data-call="{c}"><td><a href="/runs/{href}">{run}</a></td><td>{c}</td><td>{t}</td><td class="{v}">{v}</td><td>{by}</td><td>{at}</td><td>{r}</td><td><code title="arguments' SHA-256">{h}</code></td></tr>"#,
            run = esc(call.run_id.as_str()),
            href = url_part(call.run_id.as_str()),
            c = esc(call.call_id.as_str()),
            t = esc(&call.tool),
            v = if d.approved { "approved" } else { "denied" },
            by = esc(&d.by),
            at = d.at.utc(),
            r = esc(d.reason.as_deref().unwrap_or("")),
            h = esc(call.args_hash.get(..12).unwrap_or(&call.args_hash)),
        );
    }
    body.push_str("</tbody></table>\n");
}

fn history_section(entries: &[HistoryEntry], body: &mut String) {
    body.push_str("<h2>History</h2><ol class=\"history\">\n");
    for entry in entries {
        let what = match &entry.event {
            RunEvent::Created { status } => format!("created ({})", status.as_str()),
            RunEvent::Claimed { epoch, segment } => format!("{segment} (claim {epoch})"),
            RunEvent::Suspended { suspension, calls } => format!(
                "waits for a person (suspension {suspension}): {}",
                calls
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            RunEvent::Decided {
                call_id,
                approved,
                reason,
                ..
            } => format!(
                "{} {}{}",
                if *approved { "approved" } else { "denied" },
                call_id,
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            RunEvent::FileAccepted { path, from, to } => format!(
                "accepted a change of {path} ({} → {})",
                from.get(..12).unwrap_or(from),
                to.get(..12).unwrap_or(to)
            ),
            RunEvent::Released => "released (given back for another holder)".to_owned(),
            RunEvent::Ended { status, error } => match error {
                Some(error) => format!("ended {}: {error}", status.as_str()),
                None => format!("ended {}", status.as_str()),
            },
            other => format!("{other:?}"),
        };
        let _ = writeln!(
            body,
            "<li><time>{}</time> {} <span class=\"by\">by {}</span></li>",
            entry.at.utc(),
            esc(&what),
            esc(&entry.by)
        );
    }
    body.push_str("</ol>\n");
}

/// Writes `tree` as nested lists.
pub(crate) fn render_tree(tree: &CallTree, claims: &[(u64, String)], body: &mut String) {
    let captured = tree
        .nodes
        .iter()
        .any(|n| n.arguments.is_some() || n.output.is_some());
    let _ = write!(
        body,
        r#"<p class="summary" id="tree-summary" data-calls="{}">{} call{}{}</p>"#,
        tree.calls(),
        tree.calls(),
        if tree.calls() == 1 { "" } else { "s" },
        if captured {
            ""
        } else {
            " · payloads not captured (the run's capture setting withholds arguments and results)"
        }
    );
    for why in &tree.unreadable {
        let _ = write!(body, r#"<p class="alarm">{}</p>"#, esc(why));
    }
    body.push_str("<ul class=\"tree\">");
    node(tree, claims, 0, body);
    body.push_str("</ul>");
}

fn node(tree: &CallTree, claims: &[(u64, String)], id: usize, body: &mut String) {
    let Some(n) = tree.nodes.get(id) else {
        return;
    };
    let (class, label) = match &n.kind {
        NodeKind::Run { run_id, agent } => (
            "run",
            format!(
                "run <code>{}</code>{}",
                esc(run_id.as_str()),
                agent
                    .as_deref()
                    .map(|a| format!(" · agent {}", esc(a)))
                    .unwrap_or_default()
            ),
        ),
        NodeKind::Segment { number: 0 } => (
            "segment",
            "calls the ledger has and the journal lacks".to_owned(),
        ),
        NodeKind::Segment { number } => {
            // The claim that began it: the last one before its start.
            let how = n
                .started_ms
                .and_then(|at| claims.iter().rev().find(|(t, _)| *t <= at))
                .map(|(_, how)| format!(" · {}", esc(how)))
                .unwrap_or_default();
            ("segment", format!("segment {number}{how}"))
        }
        NodeKind::Turn { turn } => ("turn", format!("model turn {turn}")),
        NodeKind::Call {
            call_id,
            tool,
            nested,
        } => (
            "call",
            format!(
                "<code>{}</code> <b>{}</b>{}",
                esc(call_id.as_str()),
                esc(tool),
                if *nested { " · nested" } else { "" }
            ),
        ),
    };
    let data = match &n.kind {
        NodeKind::Call { call_id, .. } => format!(r#" data-call="{}""#, esc(call_id.as_str())),
        NodeKind::Run { run_id, .. } => format!(r#" data-run="{}""#, esc(run_id.as_str())),
        _ => String::new(),
    };
    let _ = write!(
        body,
        r#"<li class="node {class} state-{state}"{data} data-state="{state}"><span class="line">{label} <span class="state">{state}</span>"#,
        state = n.state.as_str(),
    );
    facts(n, body);
    body.push_str("</span>");
    detail(n, body);
    if !n.children.is_empty() {
        body.push_str("<ul>");
        for child in &n.children {
            node(tree, claims, *child, body);
        }
        body.push_str("</ul>");
    }
    body.push_str("</li>");
}

fn facts(n: &Node, body: &mut String) {
    if let Some(ledger) = &n.ledger {
        body.push_str(match ledger.replay {
            ToolReplay::Safe => r#" <span class="tag">replay-safe</span>"#,
            ToolReplay::Never => r#" <span class="tag">never replayed</span>"#,
        });
        if ledger.attempts > 1 {
            let _ = write!(
                body,
                r#" <span class="tag">{} attempts</span>"#,
                ledger.attempts
            );
        }
    }
    if let Some(ms) = n.duration_ms {
        let _ = write!(body, r#" <span class="time">{}</span>"#, html::duration(ms));
    }
    if let Some(usage) = n.usage {
        let _ = write!(
            body,
            r#" <span class="tokens">{} tokens</span>"#,
            usage.total()
        );
    }
    if let Some(cost) = n.cost {
        let _ = write!(
            body,
            r#" <span class="cost" title="{SMALLEST_UNIT}">cost {cost}</span>"#
        );
    }
    // A run that delegated: its tree's total beside its own.
    if let Some(spent) = n
        .spent
        .filter(|s| Some(s.usage) != n.usage || s.cost != n.cost.unwrap_or_default())
    {
        let _ = write!(
            body,
            r#" <span class="tokens">tree {} tokens</span>"#,
            spent.usage.total()
        );
        if spent.model_calls > spent.unpriced_calls {
            let _ = write!(
                body,
                r#" <span class="cost" title="{SMALLEST_UNIT}">tree cost {}</span>"#,
                spent.cost
            );
        }
    }
}

/// What a cost is in, said where one is shown.
const SMALLEST_UNIT: &str = "in the smallest unit of the price table's currency";

/// The record's `Cost`: what the run and every run under it spent, when
/// some call was priced, with the calls that were not.
fn cost_fact(spent: &Spent, body: &mut String) {
    if spent.model_calls <= spent.unpriced_calls {
        return;
    }
    let _ = write!(
        body,
        r#"<dt>Cost</dt><dd><span class="cost" id="run-cost">{}</span> ({SMALLEST_UNIT}, with every run it delegated to"#,
        spent.cost
    );
    if spent.unpriced_calls > 0 {
        let _ = write!(body, "; {} model call(s) unpriced", spent.unpriced_calls);
    }
    body.push_str(")</dd>");
}

fn detail(n: &Node, body: &mut String) {
    match &n.state {
        NodeState::Failed(error) => {
            let _ = write!(body, r#"<div class="why failed">{}</div>"#, esc(error));
        }
        NodeState::Waiting(reason) => {
            let _ = write!(body, r#"<div class="why waiting">waits: {}</div>"#, esc(reason));
        }
        NodeState::Stopped(why) => {
            let _ = write!(body, r#"<div class="why">{}</div>"#, esc(why));
        }
        NodeState::InDoubt => body.push_str(
            r#"<div class="why alarm">in doubt: it started and no result was recorded; its effect is unknown</div>"#,
        ),
        _ => {}
    }
    if let Some(found) = n.ledger.as_ref().and_then(|l| l.found.as_ref()) {
        let _ = write!(body, r#"<div class="why found">{}</div>"#, esc(found));
    }
    if let Some(progress) = &n.progress {
        let _ = write!(body, r#"<div class="progress">{}</div>"#, esc(progress));
    }
    for note in &n.notes {
        let _ = write!(body, r#"<div class="why">{}</div>"#, esc(note));
    }
    if let Some(arguments) = &n.arguments {
        let _ = write!(
            body,
            r#"<details class="arguments"><summary>arguments</summary>{}</details>"#,
            json_block(arguments)
        );
    }
    if let Some(output) = &n.output {
        let what = if matches!(n.kind, NodeKind::Turn { .. }) {
            "text"
        } else {
            "result"
        };
        let _ = write!(
            body,
            r#"<details class="output"><summary>{what}</summary><pre>{}</pre></details>"#,
            esc(output)
        );
    }
}
