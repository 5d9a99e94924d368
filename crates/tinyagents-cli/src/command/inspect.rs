//! `runs`, `show` and `sessions`: reading the ledger, the run records and
//! the session store, changing nothing.

use std::path::Path;

use anyhow::Context as _;
use serde_json::json;
use tinyagents::core::{RunId, SessionId, ToolReplay};
use tinyagents::ledger::{EffectLedger, LedgerRow, RunState, SqliteLedger, SqliteOptions};
use tinyagents::orchestrator::{
    ChatRole, SessionRecord, SessionStore as _, SqliteSessionStore, child_run_id,
    parent_of_child_run,
};

use super::{open_records, record, store_paths};
use crate::exit;
use crate::store::{RecordStatus, RunRecord, StorePaths, process_alive};
use crate::view::out;

/// `tinyagents runs`.
pub(crate) async fn runs(store: Option<&Path>, json: bool) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    let records = open_records(&paths)?;
    let ledger = open_ledger(&paths).await?;
    if !json {
        out(&format!(
            "{:<28} {:<14} {:<18} {:<19} {:>5} {:>8} {:>8}",
            "RUN", "AGENT", "STATUS", "STARTED (UTC)", "CALLS", "IN DOUBT", "TOKENS"
        ));
    }
    let listed = records.list()?;
    for record in &listed {
        let rows = tree_rows(&ledger, &RunId::new(&record.run_id)).await?;
        let in_doubt = rows.iter().filter(|(_, r)| r.is_unresolved()).count();
        let status = shown_status(record);
        if json {
            out(&json!({
                "run_id": record.run_id, "agent": record.agent, "status": status,
                "started_at_ms": record.started_at_ms,
                "updated_at_ms": record.updated_at_ms, "calls": rows.len(),
                "in_doubt": in_doubt, "usage": record.usage, "session": record.session,
                "file": record.file,
            })
            .to_string());
        } else {
            out(&format!(
                "{:<28} {:<14} {:<18} {:<19} {:>5} {:>8} {:>8}",
                record.run_id,
                record.agent,
                status,
                utc(record.started_at_ms),
                rows.len(),
                in_doubt,
                record.usage.total()
            ));
        }
    }
    // Runs the ledger holds open that the command line did not start
    // (another program on the same ledger), without delegated runs.
    for run_id in ledger.unfinished_runs().await? {
        if parent_of_child_run(&run_id).is_some()
            || listed.iter().any(|r| r.run_id == run_id.as_str())
        {
            continue;
        }
        let rows = tree_rows(&ledger, &run_id).await?;
        if json {
            out(&json!({"run_id": run_id, "status": "open (not started here)", "calls": rows.len()})
                .to_string());
        } else {
            out(&format!(
                "{:<28} {:<14} {:<18} {:<19} {:>5}",
                run_id.as_str(),
                "?",
                "open, not recorded",
                "",
                rows.len()
            ));
        }
    }
    Ok(exit::OK)
}

/// A record's status as `runs` shows it: a run whose process is gone is
/// interrupted.
fn shown_status(record: &RunRecord) -> String {
    if record.status == RecordStatus::Running && !process_alive(record.pid) {
        return "interrupted".to_owned();
    }
    record.status.as_str().to_owned()
}

/// `tinyagents show RUN`.
pub(crate) async fn show(run_id: &str, store: Option<&Path>, json: bool) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    let records = open_records(&paths)?;
    let record = record(&records, &paths, run_id)?;
    let ledger = open_ledger(&paths).await?;
    let id = RunId::new(run_id);
    let state = ledger.run_state(&id).await?;
    let rows = tree_rows(&ledger, &id).await?;
    if json {
        for (depth, row) in &rows {
            out(&row_json(row, *depth).to_string());
        }
        return Ok(exit::OK);
    }
    out(&format!(
        "run {run_id} · agent {} · {} · ledger: {} · started {} UTC · {} tokens",
        record.agent,
        shown_status(&record),
        match state {
            RunState::Unknown => "nothing recorded",
            RunState::Open => "open",
            RunState::Finished => "finished",
        },
        utc(record.started_at_ms),
        record.usage.total()
    ));
    if let Some(session) = &record.session {
        out(&format!("session {session}"));
    }
    for (depth, row) in &rows {
        out(&row_line(row, *depth));
    }
    if let Some(suspended) = &record.suspended {
        for pending in suspended.pending() {
            let decided = record
                .decisions
                .iter()
                .find(|d| d.call_id == pending.call.id)
                .map_or(
                    "undecided",
                    |d| if d.approved { "approved" } else { "denied" },
                );
            out(&format!(
                "  ⏸ {} {} waits ({decided}): {}",
                pending.call.id, pending.call.name, pending.reason
            ));
        }
    }
    let doubt = rows.iter().filter(|(_, r)| r.is_unresolved()).count();
    if doubt > 0 {
        out(&format!(
            "{doubt} call(s) in doubt: their effect is unknown (`tinyagents recover {run_id}`)"
        ));
    }
    if let Some(error) = &record.error {
        out(&format!("error: {error}"));
    }
    Ok(exit::OK)
}

/// The rows of `run` and of the delegated runs of its calls, depth first,
/// each with its depth in the tree.
async fn tree_rows(ledger: &SqliteLedger, run: &RunId) -> anyhow::Result<Vec<(usize, LedgerRow)>> {
    let rows = ledger
        .rows(run)
        .await
        .with_context(|| format!("reading the ledger rows of run {run}"))?;
    let mut ordered = Vec::with_capacity(rows.len());
    order(&rows, None, 0, &mut ordered);
    let mut out = Vec::with_capacity(ordered.len());
    for (depth, row) in ordered {
        // A delegated agent's run is keyed by the calling run and call.
        let child = child_run_id(&row.run_id, &row.call_id);
        out.push((depth, row));
        let nested = Box::pin(tree_rows(ledger, &child)).await?;
        out.extend(nested.into_iter().map(|(d, r)| (d + depth + 1, r)));
    }
    Ok(out)
}

/// `rows` under `parent` (top-level when `None`), in start order, each
/// followed by its nested calls.
fn order(
    rows: &[LedgerRow],
    parent: Option<&str>,
    depth: usize,
    out: &mut Vec<(usize, LedgerRow)>,
) {
    let mut children: Vec<&LedgerRow> = rows
        .iter()
        .filter(|r| r.parent_call_id.as_ref().map(|p| p.as_str()) == parent)
        .collect();
    children.sort_by_key(|r| (r.started_at, r.call_id.as_str().to_owned()));
    for row in children {
        out.push((depth, row.clone()));
        order(rows, Some(row.call_id.as_str()), depth + 1, out);
    }
}

fn row_line(row: &LedgerRow, depth: usize) -> String {
    let mark = if row.is_unresolved() {
        "?"
    } else {
        match row.status.as_str() {
            "completed" if row.result.as_ref().is_some_and(|r| r.is_error) => "✗",
            "completed" => "✓",
            "failed" => "✗",
            "deferred" => "⏸",
            _ => "?",
        }
    };
    let mut line = format!(
        "{}{mark} {} {} · {}",
        "  ".repeat(depth + 1),
        row.call_id,
        row.tool_name,
        row.status.as_str()
    );
    if row.is_unresolved() {
        line.push_str(" · IN DOUBT");
    }
    if parent_of_child_run(&row.run_id).is_some() {
        line.push_str(&format!(" · run {}", row.run_id));
    }
    line.push_str(match row.replay {
        ToolReplay::Safe => " · replay-safe",
        ToolReplay::Never => " · never replayed",
    });
    if row.attempts > 1 {
        line.push_str(&format!(" · {} attempts", row.attempts));
    }
    if let Some(resolution) = &row.resolution {
        line.push_str(&format!(" · found: {}", resolution.effect));
        if let Some(note) = &resolution.note {
            line.push_str(&format!(" ({note})"));
        }
    }
    line
}

fn row_json(row: &LedgerRow, depth: usize) -> serde_json::Value {
    json!({
        "run_id": row.run_id, "call_id": row.call_id, "parent_call_id": row.parent_call_id,
        "tool": row.tool_name, "status": row.status.as_str(), "in_doubt": row.is_unresolved(),
        "replay": row.replay, "attempts": row.attempts, "depth": depth,
        "started_at_ms": row.started_at.as_millis(),
        "settled_at_ms": row.settled_at.map(|t| t.as_millis()),
        "is_error": row.result.as_ref().map(|r| r.is_error),
        "effect": row.resolution.as_ref().map(|r| r.effect.to_string()),
    })
}

/// `tinyagents sessions [ID]`.
pub(crate) async fn sessions(
    id: Option<&str>,
    store: Option<&Path>,
    json: bool,
) -> anyhow::Result<u8> {
    let paths = store_paths(store);
    if !paths.sessions.exists() {
        anyhow::bail!(
            "no session store at {} (runs with --session make one)",
            paths.sessions.display()
        );
    }
    let sessions = SqliteSessionStore::open(&paths.sessions)
        .await
        .with_context(|| format!("opening the session store {}", paths.sessions.display()))?;
    let Some(id) = id else {
        for id in sessions.top_level_sessions().await? {
            let Some(record) = sessions.load(&id).await? else {
                continue;
            };
            let children = sessions.children(&id).await?.len();
            if json {
                out(&json!({"session": id, "messages": record.messages.len(),
                            "revision": record.revision, "child_sessions": children})
                .to_string());
            } else {
                out(&format!(
                    "{id} · {} messages · {children} child session(s)",
                    record.messages.len()
                ));
            }
        }
        return Ok(exit::OK);
    };
    let id = SessionId::from(id.to_owned());
    let record = sessions
        .load(&id)
        .await?
        .with_context(|| format!("no session '{id}' in {}", paths.sessions.display()))?;
    print_session(&record, 0, json);
    for child in sessions.children(&id).await? {
        print_session(&child, 1, json);
    }
    Ok(exit::OK)
}

fn print_session(record: &SessionRecord, depth: usize, json: bool) {
    let indent = "  ".repeat(depth);
    if json {
        out(
            &json!({"session": record.id, "parent": record.parent, "agent": record.agent_id,
                    "conversation": record.conversation, "transcript": record.transcript()})
            .to_string(),
        );
        return;
    }
    match (&record.parent, &record.agent_id) {
        (Some(_), Some(agent)) => out(&format!(
            "{indent}child session {} · agent {agent}{}",
            record.id,
            if record.conversation.is_empty() {
                String::new()
            } else {
                format!(" · conversation {}", record.conversation)
            }
        )),
        _ => out(&format!("{indent}session {}", record.id)),
    }
    for turn in record.transcript() {
        let who = match turn.role {
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
        };
        out(&format!("{indent}  {who}: {}", turn.text));
    }
}

/// The ledger of `paths`, which must exist.
async fn open_ledger(paths: &StorePaths) -> anyhow::Result<SqliteLedger> {
    let options = SqliteOptions {
        create_if_missing: false,
        ..SqliteOptions::default()
    };
    SqliteLedger::open_with(&paths.ledger, options)
        .await
        .with_context(|| format!("opening the ledger {}", paths.ledger.display()))
}

/// `YYYY-MM-DD HH:MM:SS` for milliseconds since the epoch (UTC).
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use tinyagents::core::{CallId, RunId, ToolReplay};
    use tinyagents::ledger::{LedgerRow, StartedRow, Timestamp};

    use super::{order, row_line, utc};

    fn row(call: &str, at: u64) -> LedgerRow {
        let started = StartedRow::new(
            RunId::new("r"),
            CallId::new(call),
            "t",
            "h",
            ToolReplay::Never,
        );
        LedgerRow::started(started, Timestamp::from_millis(at))
    }

    #[test]
    fn nested_rows_follow_their_parent_in_start_order() {
        let rows = [
            row("p2", 5),
            row("p1/1/1", 3),
            row("p1", 1),
            row("p1/2", 4),
            row("p1/1", 2),
        ];
        let mut out = Vec::new();
        order(&rows, None, 0, &mut out);
        let shape: Vec<(usize, &str)> = out.iter().map(|(d, r)| (*d, r.call_id.as_str())).collect();
        assert_eq!(
            shape,
            [
                (0, "p1"),
                (1, "p1/1"),
                (2, "p1/1/1"),
                (1, "p1/2"),
                (0, "p2")
            ]
        );
        assert_eq!(
            row_line(&out[2].1, out[2].0),
            "      ? p1/1/1 t · started · IN DOUBT · never replayed"
        );
    }

    #[test]
    fn times_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_796_218_046_000), "2026-12-02 13:27:26");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
    }
}
