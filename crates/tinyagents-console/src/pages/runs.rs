//! `/`: every run, newest first, with its agent, status, start, calls,
//! calls in doubt and tokens; filtered by status and agent.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::Query;
use serde::Deserialize;
use tinyagents_core::RunId;
use tinyagents_runs::{RecordStatus, RunQuery};

use super::{PageError, PageResult, Shared, framed, in_doubt, shown_status, top_run};
use crate::html::{esc, url_part};

/// How many runs the page shows at most (the newest).
const SHOWN: usize = 500;

/// The page's filters.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Filter {
    /// A shown status, or `in-doubt`.
    #[serde(default)]
    status: String,
    /// An agent's name.
    #[serde(default)]
    agent: String,
}

/// The statuses the filter offers: (value, label, store statuses).
const STATUSES: &[(&str, &[RecordStatus])] = &[
    ("running", &[RecordStatus::Running, RecordStatus::Queued]),
    ("waiting", &[RecordStatus::AwaitingApproval]),
    ("in-doubt", &[]),
    (
        "failed",
        &[
            RecordStatus::Failed,
            RecordStatus::Cancelled,
            RecordStatus::LimitReached,
        ],
    ),
    (
        "finished",
        &[RecordStatus::Completed, RecordStatus::Terminated],
    ),
];

/// `GET /`.
pub(crate) async fn page(state: Shared, Query(filter): Query<Filter>) -> PageResult {
    let inner = state.0;
    let mut query = RunQuery::default().limit(u32::MAX);
    let chosen = STATUSES.iter().find(|(name, _)| *name == filter.status);
    if !filter.status.is_empty() && chosen.is_none() {
        return Err(PageError::bad(
            "No such status",
            format!(
                "'{}' is not a status to filter by (one of {})",
                filter.status,
                STATUSES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if let Some((_, statuses)) = chosen {
        for status in *statuses {
            query = query.status(*status);
        }
    }
    if !filter.agent.trim().is_empty() {
        query = query.agent(filter.agent.trim());
    }
    let records = inner
        .stores
        .runs
        .list(&query)
        .await
        .map_err(|e| PageError::store("the runs", &e))?;
    let mut doubt: HashMap<RunId, usize> = HashMap::new();
    for call in in_doubt(&inner).await? {
        *doubt.entry(top_run(&call.row.run_id)).or_default() += 1;
    }
    let mut body = String::from("<h1>Runs</h1>\n");
    body.push_str(r#"<form class="filter" method="get" action="/"><label>Status <select name="status"><option value="">any</option>"#);
    for (name, _) in STATUSES {
        let _ = write!(
            body,
            r#"<option value="{name}"{}>{name}</option>"#,
            if *name == filter.status {
                " selected"
            } else {
                ""
            }
        );
    }
    let _ = write!(
        body,
        r#"</select></label> <label>Agent <input name="agent" value="{}"></label> <button>Filter</button></form>"#,
        esc(&filter.agent)
    );
    let mut shown = 0;
    let mut table = String::from(
        "<table class=\"runs\"><thead><tr><th>Run</th><th>Agent</th><th>Status</th>\
         <th>Started (UTC)</th><th>Calls</th><th>In doubt</th><th>Tokens</th></tr></thead><tbody>\n",
    );
    for record in records.iter().rev() {
        let in_doubt = doubt.get(&record.run_id).copied().unwrap_or(0);
        if filter.status == "in-doubt" && in_doubt == 0 {
            continue;
        }
        if shown == SHOWN {
            break;
        }
        shown += 1;
        let calls = inner
            .stores
            .ledger
            .rows(&record.run_id)
            .await
            .map_err(|e| {
                PageError::store(&format!("the ledger rows of run {}", record.run_id), &e)
            })?
            .len();
        let status = shown_status(record);
        let _ = writeln!(
            table,
            r#"<tr data-run="{id}" data-status="{status}"><td><a href="/runs/{href}">{id}</a></td><td>{agent}</td><td><span class="status {class}">{status}</span></td><td>{started}</td><td class="n">{calls}</td><td class="n{doubt_class}">{in_doubt}</td><td class="n">{tokens}</td></tr>"#,
            id = esc(record.run_id.as_str()),
            href = url_part(record.run_id.as_str()),
            agent = esc(&record.agent),
            class = status.replace([' ', ','], "-"),
            started = record.started_at.unwrap_or(record.created_at).utc(),
            doubt_class = if in_doubt > 0 { " alarm" } else { "" },
            tokens = record.usage.total(),
        );
    }
    table.push_str("</tbody></table>\n");
    if shown == 0 {
        body.push_str(r#"<p class="empty">No runs match.</p>"#);
    } else {
        body.push_str(&table);
        if shown == SHOWN {
            let _ = write!(body, "<p class=\"more\">The newest {SHOWN} are shown.</p>");
        }
    }
    framed(&inner, "Runs", "runs", &body).await
}
