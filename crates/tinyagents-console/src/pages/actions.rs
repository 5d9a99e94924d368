//! What the console changes: decisions on waiting calls, what a person
//! found of a call in doubt (both recorded with the console's operator),
//! and, through the host, a run resumed or recovered. Every form carries
//! the page's form token (checked here) and came from the console's own
//! origin (checked by the guard).

use std::sync::Arc;

use axum::extract::{Extension, Form, Path};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use tinyagents_core::{CallId, RunId, ToolResult};
use tinyagents_ledger::{Found, Resolve};
use tinyagents_runs::Decision;

use super::{PageError, Shared};
use crate::auth::Authed;
use crate::console::Inner;
use crate::host::HostError;
use crate::html::url_part;

/// How many runs' last words from the host are kept.
const SAID_KEPT: usize = 1_000;

/// A form's fields, in order (a name may repeat).
type Fields = Vec<(String, String)>;

fn field<'f>(fields: &'f Fields, name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn checked(inner: &Inner, authed: Authed, fields: &Fields) -> Result<(), PageError> {
    if inner.guard.form_allowed(authed, fields) {
        Ok(())
    } else {
        Err(PageError {
            status: StatusCode::FORBIDDEN,
            title: "Refused: not this console's form".to_owned(),
            text: "The form did not carry this console's form token, so it was not sent by \
                   one of its pages. Nothing was recorded."
                .to_owned(),
        })
    }
}

fn run_page(run: &RunId) -> Response {
    Redirect::to(&format!("/runs/{}", url_part(run.as_str()))).into_response()
}

/// `POST /decide`: decides calls of one run, each approved, denied or left
/// for later, with one reason, in one step; a run whose waiting calls are
/// all decided is resumed by the host (or left queued for a worker).
pub(crate) async fn decide(
    state: Shared,
    Extension(authed): Extension<Authed>,
    Form(fields): Form<Fields>,
) -> Result<Response, PageError> {
    let inner = state.0;
    checked(&inner, authed, &fields)?;
    let run = RunId::from(
        field(&fields, "run")
            .ok_or_else(|| PageError::bad("No run", "The form named no run.".to_owned()))?
            .to_owned(),
    );
    let reason = field(&fields, "reason")
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let mut decisions = Vec::new();
    for (name, value) in &fields {
        let Some(call) = name.strip_prefix("call:") else {
            continue;
        };
        let approved = match value.as_str() {
            "approve" => true,
            "deny" => false,
            "later" => continue,
            other => {
                return Err(PageError::bad(
                    "No such decision",
                    format!("'{other}' for call {call} is not approve, deny or later."),
                ));
            }
        };
        decisions.push(Decision {
            call_id: CallId::new(call),
            approved,
            reason: reason.clone(),
        });
    }
    if decisions.is_empty() {
        return Err(PageError::bad(
            "Nothing decided",
            "Choose approve or deny for at least one call.".to_owned(),
        ));
    }
    let decided = inner
        .stores
        .runs
        .decide(&run, &inner.options.operator, &decisions)
        .await
        .map_err(|e| refused("The decisions were not recorded", &e))?;
    if decided.is_complete() {
        let said = match &inner.host {
            Some(host) => {
                let host = Arc::clone(host);
                let target = run.clone();
                hook("resume", async move { host.resume(&target).await }).await
            }
            None => Ok(
                "every waiting call is decided: the run is queued for a worker to resume"
                    .to_owned(),
            ),
        };
        remember(&inner, &run, said);
    }
    Ok(run_page(&run))
}

/// `POST /resolve`: records what a person found of a call in doubt.
pub(crate) async fn resolve(
    state: Shared,
    Extension(authed): Extension<Authed>,
    Form(fields): Form<Fields>,
) -> Result<Response, PageError> {
    let inner = state.0;
    checked(&inner, authed, &fields)?;
    let (Some(run), Some(call)) = (field(&fields, "run"), field(&fields, "call")) else {
        return Err(PageError::bad(
            "No call",
            "The form named no run and call.".to_owned(),
        ));
    };
    let found = match field(&fields, "effect") {
        Some("happened") => Found::Happened(ToolResult::text(
            field(&fields, "result").unwrap_or("").to_owned(),
        )),
        Some("not_happened") => Found::NotHappened,
        _ => {
            return Err(PageError::bad(
                "Nothing found",
                "Choose whether the effect happened or not.".to_owned(),
            ));
        }
    };
    let mut resolve = Resolve::by_person(inner.options.operator.clone(), found);
    if let Some(note) = field(&fields, "note")
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        resolve = resolve.with_note(note);
    }
    inner
        .stores
        .ledger
        .resolve(&RunId::new(run), &CallId::new(call), &resolve)
        .await
        .map_err(|e| refused("The finding was not recorded", &e))?;
    Ok(Redirect::to("/doubt").into_response())
}

/// `POST /runs/{run}/resume`.
pub(crate) async fn resume(
    state: Shared,
    Extension(authed): Extension<Authed>,
    Path(run): Path<String>,
    Form(fields): Form<Fields>,
) -> Result<Response, PageError> {
    host_action(state.0, authed, RunId::from(run), &fields, "resume").await
}

/// `POST /runs/{run}/recover`.
pub(crate) async fn recover(
    state: Shared,
    Extension(authed): Extension<Authed>,
    Path(run): Path<String>,
    Form(fields): Form<Fields>,
) -> Result<Response, PageError> {
    host_action(state.0, authed, RunId::from(run), &fields, "recover").await
}

async fn host_action(
    inner: Arc<Inner>,
    authed: Authed,
    run: RunId,
    fields: &Fields,
    what: &'static str,
) -> Result<Response, PageError> {
    checked(&inner, authed, fields)?;
    let Some(host) = inner.host.clone() else {
        return Err(PageError::not_found(
            "Not here",
            format!("This console's host does not run agents, so it cannot {what} runs."),
        ));
    };
    let target = run.clone();
    let said = hook(what, async move {
        match what {
            "resume" => host.resume(&target).await,
            _ => host.recover(&target).await,
        }
    })
    .await;
    remember(&inner, &run, said);
    Ok(run_page(&run))
}

/// Runs a host hook on its own task: an error or a panic is the hook's,
/// said as such, and the console goes on.
async fn hook(
    what: &str,
    work: impl std::future::Future<Output = Result<String, HostError>> + Send + 'static,
) -> Result<String, String> {
    match tokio::spawn(work).await {
        Ok(Ok(said)) => Ok(said),
        Ok(Err(error)) => Err(format!("the host could not {what} the run: {error}")),
        Err(join) if join.is_panic() => Err(format!(
            "the host's {what} hook panicked; nothing was started"
        )),
        Err(_) => Err(format!("the host's {what} hook was cancelled")),
    }
}

fn remember(inner: &Inner, run: &RunId, said: Result<String, String>) {
    let entry = match said {
        Ok(text) => (true, text),
        Err(text) => {
            tracing::warn!(run = %run, "{text}");
            (false, text)
        }
    };
    let mut said = inner.said.lock();
    // What the host said is for the page a person is looking at now:
    // bounded, past a thousand runs it starts over.
    if said.len() >= SAID_KEPT {
        said.clear();
    }
    said.insert(run.clone(), entry);
}

fn refused(title: &str, error: &dyn std::fmt::Display) -> PageError {
    PageError {
        status: StatusCode::CONFLICT,
        title: title.to_owned(),
        text: error.to_string(),
    }
}
