//! `queue list` and `queue show`: the queue's runs, changing nothing.
//! A waiting call is shown by id, tool and reason, without its arguments:
//! whether they may be shown is the workers' capture setting, which the
//! queue does not say (and `show` never prints them either).

use serde_json::{Value, json};
use tinyagents::core::RunId;
use tinyagents::postgres::{QueueStatus, QueuedRun, RunQueue};

use super::{BadInput, first_line};
use crate::exit;
use crate::view::out;

/// Every status, in the order a run goes through them.
const STATUSES: [QueueStatus; 5] = [
    QueueStatus::Queued,
    QueueStatus::Running,
    QueueStatus::AwaitingApproval,
    QueueStatus::Completed,
    QueueStatus::Failed,
];

/// `queue list [--limit N]`.
pub(super) async fn list(queue: &RunQueue, limit: u32, json: bool) -> anyhow::Result<u8> {
    let runs = queue.list(limit).await?;
    let counts = queue.counts().await?;
    let count = |status: QueueStatus| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    if json {
        for run in &runs {
            out(&run_json(run).to_string());
        }
        let mut line = serde_json::Map::new();
        line.insert("type".into(), json!("counts"));
        for status in STATUSES {
            line.insert(status.as_str().into(), json!(count(status)));
        }
        out(&Value::Object(line).to_string());
        return Ok(exit::OK);
    }
    out(&format!(
        "{:<28} {:<17} {:<12} {:>5} {:>8}  ANSWER / ERROR",
        "RUN", "STATUS", "OWNER", "EPOCH", "ATTEMPTS"
    ));
    for run in &runs {
        out(format!(
            "{:<28} {:<17} {:<12} {:>5} {:>8}  {}",
            run.id.as_str(),
            run.status.as_str(),
            run.owner.as_deref().unwrap_or("-"),
            run.epoch,
            run.attempts,
            summary(run)
        )
        .trim_end());
    }
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    if u64::try_from(runs.len()).unwrap_or(u64::MAX) < total {
        out(&format!(
            "the oldest {} of {total} runs (--limit N for more)",
            runs.len()
        ));
    }
    let counted: Vec<String> = STATUSES
        .iter()
        .map(|s| format!("{} {}", s.as_str(), count(*s)))
        .collect();
    out(&counted.join(" · "));
    Ok(exit::OK)
}

/// `queue show RUN`.
pub(super) async fn show(queue: &RunQueue, run_id: &str, json: bool) -> anyhow::Result<u8> {
    let Some(run) = queue.get(&RunId::new(run_id)).await? else {
        return Err(BadInput::error(format!(
            "run {run_id} is not in the queue (`tinyagents queue list` lists them)"
        )));
    };
    if json {
        out(&run_json(&run).to_string());
        return Ok(exit::OK);
    }
    out(&format!(
        "run {} · {} · owner {} · epoch {} · attempts {}",
        run.id,
        run.status,
        run.owner.as_deref().unwrap_or("-"),
        run.epoch,
        run.attempts
    ));
    if let Some(outcome) = &run.outcome {
        out(&format!(
            "ended {} · {} tokens",
            outcome.status, outcome.total_tokens
        ));
        out(&format!("answer: {}", outcome.final_text));
    }
    if let Some(error) = &run.error {
        out(&format!("error: {error}"));
    }
    if !run.pending.is_empty() {
        out(&format!(
            "waits for a decision on {} call(s):",
            run.pending.len()
        ));
        for pending in &run.pending {
            out(&format!(
                "  ⏸ {} {}: {}",
                pending.call.id, pending.call.name, pending.reason
            ));
        }
        out(&format!(
            "decide with `tinyagents queue approve {}` (or `--deny --reason TEXT`); \
             a worker then resumes it",
            run.id
        ));
    }
    Ok(exit::OK)
}

/// What `list` says of a run after its counters.
fn summary(run: &QueuedRun) -> String {
    if let Some(error) = &run.error {
        return format!("error: {}", first_line(error));
    }
    if let Some(outcome) = &run.outcome {
        return first_line(&outcome.final_text);
    }
    if run.status == QueueStatus::AwaitingApproval {
        return format!("waits on {} call(s)", run.pending.len());
    }
    String::new()
}

/// A run as one JSON object.
fn run_json(run: &QueuedRun) -> Value {
    let pending: Vec<Value> = run
        .pending
        .iter()
        .map(|p| json!({"call_id": p.call.id, "tool": p.call.name, "reason": p.reason}))
        .collect();
    json!({
        "type": "run", "run_id": run.id, "status": run.status.as_str(), "owner": run.owner,
        "epoch": run.epoch, "attempts": run.attempts,
        "final_text": run.outcome.as_ref().map(|o| &o.final_text),
        "outcome": run.outcome.as_ref().map(|o| &o.status),
        "total_tokens": run.outcome.as_ref().map(|o| o.total_tokens),
        "error": run.error, "pending": pending,
    })
}

#[cfg(test)]
mod tests {
    use tinyagents::core::RunId;
    use tinyagents::postgres::{QueueStatus, QueuedRun, RunOutcome};

    use super::{run_json, summary};

    fn run(status: QueueStatus) -> QueuedRun {
        QueuedRun {
            id: RunId::new("r1"),
            status,
            owner: None,
            epoch: 1,
            attempts: 1,
            outcome: None,
            error: None,
            pending: Vec::new(),
        }
    }

    #[test]
    fn a_run_is_summed_up_by_its_answers_first_line_or_its_error() {
        let mut done = run(QueueStatus::Completed);
        done.outcome = Some(RunOutcome {
            final_text: "refunded\nin full".into(),
            status: "completed".into(),
            total_tokens: 7,
        });
        assert_eq!(summary(&done), "refunded");
        assert_eq!(run_json(&done)["final_text"], "refunded\nin full");
        let mut failed = run(QueueStatus::Failed);
        failed.error = Some("the model failed\ndetails".into());
        assert_eq!(summary(&failed), "error: the model failed");
        assert_eq!(summary(&run(QueueStatus::Queued)), "");
        assert_eq!(
            summary(&run(QueueStatus::AwaitingApproval)),
            "waits on 0 call(s)"
        );
    }
}
