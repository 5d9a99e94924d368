//! `/doubt`: every call whose effect is unknown, across runs, with its
//! idempotency key (what the tool's system knows it by) and age; a form to
//! record what a person found, and the run's recovery (its tools asked
//! again) when the host can run it.

use std::fmt::Write as _;

use super::{PageResult, Shared, framed, in_doubt, top_run};
use crate::html::{self, esc, url_part};

/// `GET /doubt`.
pub(crate) async fn page(state: Shared) -> PageResult {
    let inner = state.0;
    let doubts = in_doubt(&inner).await?;
    let mut body = String::from(
        "<h1>Calls in doubt</h1>\n<p class=\"lead\">Each started and no result was recorded: a crash came between. Ask its tool again (recover the run) or record what you found in the tool's system, by its idempotency key.</p>\n",
    );
    if doubts.is_empty() {
        body.push_str(r#"<p class="empty" id="doubt-empty">No call is in doubt.</p>"#);
    }
    let token = inner.guard.form_token();
    for doubt in &doubts {
        let row = &doubt.row;
        let top = top_run(&row.run_id);
        let _ = write!(
            body,
            r#"<section class="doubt" data-run="{run}" data-call="{call}"><h2><code>{call}</code> <b>{tool}</b> in run <a href="/runs/{href}">{run}</a></h2>
<dl><dt>Idempotency key</dt><dd><code class="key">{key}</code></dd><dt>Started</dt><dd>{age} ago ({attempts} attempt(s)), row {status}</dd><dt>Run</dt><dd>{finished}</dd></dl>"#,
            run = esc(row.run_id.as_str()),
            href = url_part(top.as_str()),
            call = esc(row.call_id.as_str()),
            tool = esc(&row.tool_name),
            key = esc(&doubt.idempotency_key.to_string()),
            age = html::duration(u64::try_from(doubt.age.as_millis()).unwrap_or(u64::MAX)),
            attempts = row.attempts,
            status = row.status.as_str(),
            finished = if doubt.run_finished {
                "finished: no call of it starts again"
            } else {
                "not finished: a recovery asks the tool and goes on"
            },
        );
        if inner.host.is_some() {
            let _ = write!(
                body,
                r#"<form method="post" action="/runs/{href}/recover" class="action"><input type="hidden" name="form_token" value="{token}"><button class="reconcile">Ask the tool again</button></form>"#,
                href = url_part(top.as_str()),
            );
        }
        let _ = write!(
            body,
            r#"<form method="post" action="/resolve" class="resolve"><input type="hidden" name="form_token" value="{token}"><input type="hidden" name="run" value="{run}"><input type="hidden" name="call" value="{call}">
<label><input type="radio" name="effect" value="happened"> it happened</label> <label><input type="radio" name="effect" value="not_happened"> it did not happen</label>
<label class="wide">What it returned (if it happened) <input name="result"></label>
<label class="wide">Note <input name="note" placeholder="how you checked"></label>
<button class="record">Record as {operator}</button></form></section>
"#,
            run = esc(row.run_id.as_str()),
            call = esc(row.call_id.as_str()),
            operator = esc(&inner.options.operator),
        );
    }
    framed(&inner, "In doubt", "doubt", &body).await
}
