//! `/inbox`: every call waiting for a person, across runs, with its tool,
//! why it waits (what asked), what a decision binds (run, call, tool,
//! arguments' hash) and its arguments when the run captured them; forms
//! to approve or deny one call or several with a reason; and the
//! decisions made lately.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tinyagents_core::RunId;
use tinyagents_runs::{JournalEntry, WaitingCall};

use super::{
    PageError, PageResult, Shared, all_runs, framed, journaled_arguments, json_block, whole_journal,
};
use crate::console::Inner;
use crate::html::{esc, url_part};

/// How many decisions the page lists.
const DECISIONS_SHOWN: usize = 50;

/// `GET /inbox`.
pub(crate) async fn page(state: Shared) -> PageResult {
    let inner = state.0;
    let waiting = inner
        .stores
        .runs
        .waiting(10_000)
        .await
        .map_err(|e| PageError::store("the approval inbox", &e))?;
    let mut by_run: BTreeMap<RunId, Vec<WaitingCall>> = BTreeMap::new();
    for call in waiting {
        by_run.entry(call.run_id.clone()).or_default().push(call);
    }
    let mut body = String::from("<h1>Approvals</h1>\n");
    if by_run.is_empty() {
        body.push_str(r#"<p class="empty" id="inbox-empty">No call waits for a decision.</p>"#);
    }
    for (run, calls) in &by_run {
        let agent = calls.first().map(|c| c.agent.as_str()).unwrap_or("");
        let _ = write!(
            body,
            r#"<section class="waiting-run" data-run="{id}"><h2>Run <a href="/runs/{href}">{id}</a> · agent {agent}</h2>"#,
            id = esc(run.as_str()),
            href = url_part(run.as_str()),
            agent = esc(agent),
        );
        let journal = whole_journal(&inner, run).await?;
        decision_form(&inner, run, calls, &journal, &mut body);
        body.push_str("</section>\n");
    }
    recent_decisions(&inner, &mut body).await?;
    framed(&inner, "Approvals", "inbox", &body).await
}

/// A form deciding `calls` of `run` in one step: each approved, denied or
/// left for later, with one reason.
pub(crate) fn decision_form(
    inner: &Inner,
    run: &RunId,
    calls: &[WaitingCall],
    journal: &[JournalEntry],
    body: &mut String,
) {
    if calls.is_empty() {
        return;
    }
    let _ = write!(
        body,
        r#"<form method="post" action="/decide" class="decide"><input type="hidden" name="form_token" value="{token}"><input type="hidden" name="run" value="{run}">"#,
        token = inner.guard.form_token(),
        run = esc(run.as_str()),
    );
    let several = calls.len() > 1;
    for call in calls {
        let id = esc(call.call_id.as_str());
        let _ = write!(
            body,
            r#"<fieldset class="waiting" data-call="{id}"><legend><code>{id}</code> <b>{tool}</b></legend>
<p class="reason">{reason}</p>
<p class="binds">A decision binds run <code>{run}</code>, call <code>{id}</code>, tool <code>{tool}</code>, arguments' SHA-256 <code>{hash}</code>; asked at {at} UTC.</p>"#,
            tool = esc(&call.tool),
            reason = esc(&call.reason),
            run = esc(run.as_str()),
            hash = esc(&call.args_hash),
            at = call.requested_at.utc(),
        );
        match journaled_arguments(journal, &call.call_id) {
            Some(shown) => {
                body.push_str(r#"<div class="arguments"><span class="label">arguments</span>"#);
                body.push_str(&json_block(shown));
                if *shown != call.arguments {
                    body.push_str(r#"<p class="note">Shown redacted; the decision binds the arguments the run holds (their hash above).</p>"#);
                }
                body.push_str("</div>");
            }
            None => body.push_str(
                r#"<p class="note withheld">Arguments withheld: the run does not capture tool payloads.</p>"#,
            ),
        }
        let _ = write!(
            body,
            r#"<div class="choice"><label><input type="radio" name="call:{id}" value="approve"{a}> approve</label> <label><input type="radio" name="call:{id}" value="deny"{a}> deny</label>{later}</div></fieldset>"#,
            // Nothing is chosen for a person: a lone call must be approved
            // or denied; of several, each is left for later until chosen.
            a = if several { "" } else { " required" },
            later = if several {
                format!(
                    r#" <label><input type="radio" name="call:{id}" value="later" checked> later</label>"#
                )
            } else {
                String::new()
            }
        );
    }
    let _ = write!(
        body,
        r#"<label class="reason-input">Reason <input name="reason" placeholder="why (kept with the decision)"></label> <button class="record">Record as {}</button></form>"#,
        esc(&inner.options.operator)
    );
}

/// The latest decisions across the runs that waited.
async fn recent_decisions(inner: &Inner, body: &mut String) -> Result<(), PageError> {
    let runs = all_runs(inner).await?;
    let mut decided = Vec::new();
    for record in runs
        .iter()
        .rev()
        .filter(|r| r.suspension > 0)
        .take(DECISIONS_SHOWN)
    {
        let calls = inner
            .stores
            .runs
            .approvals(&record.run_id)
            .await
            .map_err(|e| {
                PageError::store(&format!("the approvals of run {}", record.run_id), &e)
            })?;
        decided.extend(calls.into_iter().filter(|c| c.decision.is_some()));
    }
    decided.sort_by_key(|c| std::cmp::Reverse(c.decision.as_ref().map(|d| d.at)));
    decided.truncate(DECISIONS_SHOWN);
    if decided.is_empty() {
        return Ok(());
    }
    let decided: Vec<&WaitingCall> = decided.iter().collect();
    super::run::decisions_table("Decided lately", &decided, body);
    Ok(())
}
