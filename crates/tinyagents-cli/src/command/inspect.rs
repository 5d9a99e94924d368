//! `runs`, `show` and `sessions`: reading the run store, the ledger and
//! the session store, changing nothing.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use tinyagents::core::{RunId, SessionId, ToolReplay};
use tinyagents::ledger::{EffectLedger, LedgerRow, RunState};
use tinyagents::orchestrator::{ChatRole, SessionRecord, child_run_id, parent_of_child_run};
use tinyagents::runs::{RecordStatus, RunEvent, RunQuery, RunRecord};

use super::run::shown_status;
use super::spending::RunSpending;
use super::{BadInput, refusal};
use crate::exit;
use crate::store::{Place, Stores};
use crate::view::out;

/// `tinyagents runs [--status S]… [--limit N]`.
pub(crate) async fn runs(
    place: Place,
    statuses: &[String],
    limit: u32,
    json: bool,
) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let mut query = RunQuery::default().limit(limit);
    for status in statuses {
        let parsed = RecordStatus::parse(status).ok_or_else(|| {
            BadInput::error(format!(
                "--status {status}: not a status (one of {})",
                RecordStatus::ALL.map(RecordStatus::as_str).join(", ")
            ))
        })?;
        query = query.status(parsed);
    }
    let listed = stores.runs.list(&query).await.map_err(refusal)?;
    list_runs(&stores, &listed, json).await?;
    // Runs the ledger holds open that the run store does not (another
    // program on the same ledger), without delegated runs.
    let mut others = 0;
    if statuses.is_empty() {
        for run_id in stores.ledger.unfinished_runs().await? {
            if parent_of_child_run(&run_id).is_some()
                || listed.iter().any(|r| r.run_id == run_id)
                || stores.runs.get(&run_id).await.map_err(refusal)?.is_some()
            {
                continue;
            }
            others += 1;
            let rows = tree_rows(stores.ledger.as_ref(), &run_id).await?;
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
    }
    if listed.is_empty() && others == 0 && !json {
        out(&format!(
            "no runs{} in {}",
            if statuses.is_empty() {
                String::new()
            } else {
                format!(" {}", statuses.join(" or "))
            },
            stores.place.shown()
        ));
    }
    stores.close().await?;
    Ok(exit::OK)
}

/// `tinyagents runs --in-doubt`: every call whose effect is unknown,
/// across every run, oldest first, with its idempotency key.
pub(crate) async fn in_doubt(place: Place, json: bool) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let doubts = stores.ledger.in_doubt().await?;
    if doubts.is_empty() && !json {
        out(&format!("no call in doubt in {}", stores.place.shown()));
    } else if !json {
        out(&format!(
            "{:<28} {:<10} {:<24} {:<12} {:>10}  IDEMPOTENCY KEY",
            "RUN", "CALL", "TOOL", "STATUS", "AGE"
        ));
    }
    for doubt in &doubts {
        let row = &doubt.row;
        if json {
            out(&json!({
                "run_id": row.run_id, "call_id": row.call_id, "tool": row.tool_name,
                "status": row.status.as_str(), "idempotency_key": doubt.idempotency_key.to_string(),
                "age_ms": u64::try_from(doubt.age.as_millis()).unwrap_or(u64::MAX),
                "run_finished": doubt.run_finished, "replay": row.replay,
            })
            .to_string());
        } else {
            out(&format!(
                "{:<28} {:<10} {:<24} {:<12} {:>9}s  {}",
                row.run_id.as_str(),
                row.call_id.as_str(),
                row.tool_name,
                row.status.as_str(),
                doubt.age.as_secs(),
                doubt.idempotency_key
            ));
        }
    }
    stores.close().await?;
    Ok(exit::OK)
}

/// Prints `records` (a header first, in text), each with its calls and
/// those in doubt from the ledger.
pub(crate) async fn list_runs(
    stores: &Stores,
    records: &[RunRecord],
    json: bool,
) -> anyhow::Result<()> {
    if !json && !records.is_empty() {
        out(&format!(
            "{:<28} {:<14} {:<18} {:<19} {:>5} {:>8} {:>8}",
            "RUN", "AGENT", "STATUS", "STARTED (UTC)", "CALLS", "IN DOUBT", "TOKENS"
        ));
    }
    for record in records {
        let rows = tree_rows(stores.ledger.as_ref(), &record.run_id).await?;
        let in_doubt = rows.iter().filter(|(_, r)| r.is_unresolved()).count();
        let status = shown_status(record);
        if json {
            out(&json!({
                "run_id": record.run_id, "agent": record.agent, "status": status,
                "started_at_ms": record.started_at.unwrap_or(record.created_at).as_millis(),
                "updated_at_ms": record.updated_at.as_millis(), "calls": rows.len(),
                "in_doubt": in_doubt, "usage": record.usage, "session": record.session,
                "file": record.file.as_ref().map(|f| &f.path), "epoch": record.epoch,
                "holder": record.holder.as_ref().map(|h| &h.owner),
                "error": record.error,
            })
            .to_string());
        } else {
            out(&format!(
                "{:<28} {:<14} {:<18} {:<19} {:>5} {:>8} {:>8}",
                record.run_id.as_str(),
                record.agent,
                status,
                utc(record.started_at.unwrap_or(record.created_at).as_millis()),
                rows.len(),
                in_doubt,
                record.usage.total()
            ));
        }
    }
    Ok(())
}

/// `tinyagents show RUN [--follow]`.
pub(crate) async fn show(
    place: Place,
    run_id: &str,
    follow: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let mut last = Vec::new();
    loop {
        let record = super::record(&stores, run_id).await?;
        let lines = picture(&stores, &record, json).await?;
        if lines != last {
            if !last.is_empty() && !json {
                out("");
            }
            let fresh = if json {
                lines
                    .iter()
                    .filter(|l| !last.contains(*l))
                    .cloned()
                    .collect()
            } else {
                lines.clone()
            };
            for line in fresh {
                out(&line);
            }
            last = lines;
        }
        let settled = record.status.has_ended()
            || record.status == RecordStatus::AwaitingApproval
            || (record.status == RecordStatus::Running
                && record.holder_gone(tinyagents::ledger::Timestamp::now()));
        if !follow || settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stores.close().await?;
    Ok(exit::OK)
}

/// What `show` prints of a run: its header, its whole call tree from the
/// ledger (every segment, delegated runs under their calls), the calls of
/// its last suspension with their decisions, what its runs and model
/// turns spent (from its journal), earlier decisions, and its history.
async fn picture(stores: &Stores, record: &RunRecord, json: bool) -> anyhow::Result<Vec<String>> {
    let id = &record.run_id;
    let state = stores.ledger.run_state(id).await?;
    let rows = tree_rows(stores.ledger.as_ref(), id).await?;
    let approvals = stores.runs.approvals(id).await.map_err(refusal)?;
    let spending = RunSpending::read(stores, record).await?;
    if json {
        let mut lines: Vec<String> = rows
            .iter()
            .map(|(d, r)| row_json(r, *d).to_string())
            .collect();
        lines.extend(approvals.iter().map(|c| {
            json!({"type": "waiting_call", "run_id": c.run_id, "suspension": c.suspension,
                   "call_id": c.call_id, "tool": c.tool, "reason": c.reason,
                   "args_hash": c.args_hash,
                   "decision": c.decision.as_ref().map(|d| json!({
                       "approved": d.approved, "reason": d.reason, "by": d.by,
                       "at_ms": d.at.as_millis()}))})
            .to_string()
        }));
        lines.push(
            json!({"type": "run", "run_id": id, "status": shown_status(record),
                   "agent": record.agent, "epoch": record.epoch, "usage": record.usage,
                   "spent": spending.total(),
                   "currency": spending.currency(),
                   "ledger": ledger_state(state), "error": record.error})
            .to_string(),
        );
        return Ok(lines);
    }
    let mut lines = vec![format!(
        "run {id} · agent {} · {} · ledger: {} · started {} UTC · {} tokens",
        record.agent,
        shown_status(record),
        ledger_state(state),
        utc(record.started_at.unwrap_or(record.created_at).as_millis()),
        record.usage.total()
    )];
    if let Some(file) = &record.file {
        lines.push(format!(
            "file {} (sha256 {})",
            file.path,
            file.sha256.get(..12).unwrap_or(&file.sha256)
        ));
    }
    if let Some(session) = &record.session {
        lines.push(format!("session {session}"));
    }
    lines.extend(rows.iter().map(|(depth, row)| row_line(row, *depth)));
    for call in approvals
        .iter()
        .filter(|c| c.suspension == record.suspension)
    {
        let waiting = record.status == RecordStatus::AwaitingApproval || record.is_decided();
        if !waiting {
            continue;
        }
        let decided = call.decision.as_ref().map_or_else(
            || "undecided".to_owned(),
            |d| {
                format!(
                    "{} by {}{}",
                    if d.approved { "approved" } else { "denied" },
                    d.by,
                    d.reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                )
            },
        );
        lines.push(format!(
            "  ⏸ {} {} waits ({decided}): {}",
            call.call_id, call.tool, call.reason
        ));
    }
    lines.extend(spending.lines());
    let decided: Vec<_> = approvals.iter().filter(|c| c.decision.is_some()).collect();
    if !decided.is_empty() {
        lines.push("decisions:".to_owned());
        for call in decided {
            if let Some(d) = &call.decision {
                lines.push(format!(
                    "  {} {} {} by {} at {} UTC{}",
                    call.call_id,
                    call.tool,
                    if d.approved { "approved" } else { "denied" },
                    d.by,
                    utc(d.at.as_millis()),
                    d.reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    let history = stores.runs.history(id).await.map_err(refusal)?;
    let notable: Vec<String> = history
        .iter()
        .filter_map(|h| match &h.event {
            RunEvent::FileAccepted { path, from, to } => Some(format!(
                "  {} UTC: {} accepted a change of {path} ({} → {})",
                utc(h.at.as_millis()),
                h.by,
                from.get(..12).unwrap_or(from),
                to.get(..12).unwrap_or(to)
            )),
            RunEvent::Claimed { epoch, segment } => Some(format!(
                "  {} UTC: {segment} by {} (epoch {epoch})",
                utc(h.at.as_millis()),
                h.by
            )),
            _ => None,
        })
        .collect();
    if !notable.is_empty() {
        lines.push("segments:".to_owned());
        lines.extend(notable);
    }
    let doubt = rows.iter().filter(|(_, r)| r.is_unresolved()).count();
    if doubt > 0 {
        lines.push(format!(
            "{doubt} call(s) in doubt: their effect is unknown (`tinyagents recover {id}`)"
        ));
    }
    if let Some(error) = &record.error {
        lines.push(format!("error: {error}"));
    }
    if record.status == RecordStatus::Failed && state == RunState::Open {
        lines.push(format!("it may be recovered: `tinyagents recover {id}`"));
    }
    Ok(lines)
}

fn ledger_state(state: RunState) -> &'static str {
    match state {
        RunState::Unknown => "nothing recorded",
        RunState::Open => "open",
        RunState::Finished => "finished",
    }
}

/// The rows of `run` and of the delegated runs of its calls, depth first,
/// each with its depth in the tree.
pub(crate) async fn tree_rows(
    ledger: &dyn EffectLedger,
    run: &RunId,
) -> anyhow::Result<Vec<(usize, LedgerRow)>> {
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
pub(crate) async fn sessions(place: Place, id: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let sessions = &stores.sessions;
    let Some(id) = id else {
        let top = stores.top_level_sessions().await?;
        if top.is_empty() && !json {
            out(&format!(
                "no sessions in {} (runs with --session make them)",
                stores.place.shown()
            ));
        }
        for id in top {
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
        stores.close().await?;
        return Ok(exit::OK);
    };
    let id = SessionId::from(id.to_owned());
    let record = sessions
        .load(&id)
        .await?
        .with_context(|| format!("no session '{id}' in {}", stores.place.shown()))?;
    print_session(&record, 0, json);
    for child in sessions.children(&id).await? {
        print_session(&child, 1, json);
    }
    stores.close().await?;
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

/// `YYYY-MM-DD HH:MM:SS` for milliseconds since the epoch (UTC).
pub(crate) fn utc(ms: u64) -> String {
    tinyagents::ledger::Timestamp::from_millis(ms).utc()
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
