//! `/sessions`: the sessions the store's runs used, and each one's
//! transcript with its child sessions (delegated agents' conversations).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use axum::extract::Path;
use tinyagents_core::SessionId;
use tinyagents_orchestrator::{ChatRole, SessionRecord};

use super::{PageError, PageResult, Shared, all_runs, framed};
use crate::html::{esc, url_part};

/// `GET /sessions`.
pub(crate) async fn list(state: Shared) -> PageResult {
    let inner = state.0;
    let runs = all_runs(&inner).await?;
    let sessions: BTreeSet<&str> = runs.iter().filter_map(|r| r.session.as_deref()).collect();
    let mut body = String::from("<h1>Sessions</h1>\n");
    if sessions.is_empty() {
        body.push_str(r#"<p class="empty">No run of this store used a session.</p>"#);
    } else {
        body.push_str("<table class=\"sessions\"><thead><tr><th>Session</th><th>Messages</th><th>Child sessions</th><th>Runs</th></tr></thead><tbody>\n");
    }
    for session in sessions {
        let id = SessionId::from(session.to_owned());
        let messages = inner
            .stores
            .sessions
            .load(&id)
            .await
            .map_err(|e| PageError::store(&format!("session {session}"), &e))?
            .map_or(0, |r| r.messages.len());
        let children = inner
            .stores
            .sessions
            .children(&id)
            .await
            .map_err(|e| PageError::store(&format!("the child sessions of {session}"), &e))?
            .len();
        let used = runs
            .iter()
            .filter(|r| r.session.as_deref() == Some(session))
            .count();
        let _ = writeln!(
            body,
            r#"<tr><td><a href="/sessions/{href}">{id}</a></td><td class="n">{messages}</td><td class="n">{children}</td><td class="n">{used}</td></tr>"#,
            href = url_part(session),
            id = esc(session),
        );
    }
    body.push_str("</tbody></table>\n");
    framed(&inner, "Sessions", "sessions", &body).await
}

/// `GET /sessions/{session}`.
pub(crate) async fn page(state: Shared, Path(session): Path<String>) -> PageResult {
    let inner = state.0;
    let id = SessionId::from(session.clone());
    let record = inner
        .stores
        .sessions
        .load(&id)
        .await
        .map_err(|e| PageError::store(&format!("session {session}"), &e))?
        .ok_or_else(|| {
            PageError::not_found(
                "No such session",
                format!("The session store has no session '{session}'."),
            )
        })?;
    let mut body = format!("<h1>Session <code>{}</code></h1>\n", esc(&session));
    transcript(&record, &mut body);
    let children = inner
        .stores
        .sessions
        .children(&id)
        .await
        .map_err(|e| PageError::store(&format!("the child sessions of {session}"), &e))?;
    for child in &children {
        let _ = write!(
            body,
            r#"<section class="child-session"><h2>Child session <code>{}</code>{}</h2>"#,
            esc(child.id.as_str()),
            child
                .agent_id
                .as_ref()
                .map(|a| format!(" · agent {}", esc(a.as_str())))
                .unwrap_or_default()
        );
        transcript(child, &mut body);
        body.push_str("</section>");
    }
    framed(&inner, &format!("Session {session}"), "sessions", &body).await
}

fn transcript(record: &SessionRecord, body: &mut String) {
    body.push_str("<ol class=\"transcript\">");
    for turn in record.transcript() {
        let who = match turn.role {
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
        };
        let _ = write!(
            body,
            r#"<li class="{who}"><span class="who">{who}</span> {}</li>"#,
            esc(&turn.text)
        );
    }
    body.push_str("</ol>");
}
