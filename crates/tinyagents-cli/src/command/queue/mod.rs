//! `queue`: the runs queue of a PostgreSQL database (`--db`, or
//! `TINYAGENTS_DATABASE_URL`), whose workers run the runs. It queues a
//! run, lists and shows runs, and decides the calls of a run awaiting
//! approval, which queues it again for any worker to resume. It runs
//! nothing itself.

mod decide;
mod look;

use tinyagents::core::RunId;
use tinyagents::harness::RunRequest;
use tinyagents::postgres::{PgDatabase, PgError, QueueError, RunQueue};

use crate::cli::QueueCommand;
use crate::exit;
use crate::view::out;

/// A refusal that is the invocation's fault (exit 2): no database named, a
/// bad connection string, a run or call that is not there, an id taken.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadInput(String);

impl BadInput {
    /// The refusal `message`, as an error.
    fn error(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Self(message.into()))
    }
}

/// `tinyagents queue [--db URL] COMMAND`.
pub(crate) async fn queue(
    db: Option<&str>,
    command: QueueCommand,
    json: bool,
) -> anyhow::Result<u8> {
    match command {
        QueueCommand::Enqueue { input, id } => enqueue(db, &input, id.as_deref(), json).await,
        QueueCommand::List { limit } => look::list(&open(db).await?, limit, json).await,
        QueueCommand::Show { run } => look::show(&open(db).await?, &run, json).await,
        QueueCommand::Approve {
            run,
            calls,
            deny,
            reason,
        } => {
            let decision = decide::Decision {
                calls: &calls,
                deny,
                reason: reason.as_deref(),
            };
            decide::approve(&open(db).await?, &run, decision, json).await
        }
    }
}

/// `queue enqueue INPUT [--id RUN]`.
async fn enqueue(
    db: Option<&str>,
    input: &str,
    id: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let mut request = RunRequest::new(input);
    if let Some(id) = id {
        if id.trim().is_empty() {
            return Err(BadInput::error("--id: a run id cannot be empty"));
        }
        request = request.with_run_id(RunId::new(id));
    }
    let queue = open(db).await?;
    let run = queue.enqueue(&request).await.map_err(refusal)?;
    if json {
        out(&serde_json::json!({"type": "enqueued", "run_id": run}).to_string());
    } else {
        out(run.as_str());
    }
    Ok(exit::OK)
}

/// The queue of the database `db` names.
async fn open(db: Option<&str>) -> anyhow::Result<RunQueue> {
    let Some(url) = db.filter(|url| !url.trim().is_empty()) else {
        return Err(BadInput::error(
            "no database for the queue: pass --db URL or set TINYAGENTS_DATABASE_URL",
        ));
    };
    let database = PgDatabase::connect(url).await.map_err(|error| {
        if matches!(error, PgError::Url { .. }) {
            BadInput::error(format!("--db: {error}"))
        } else {
            anyhow::Error::new(error)
        }
    })?;
    Ok(RunQueue::open(&database).await?)
}

/// A queue's refusal, as the command line reports it: a run or call that
/// is not there, or an id taken, is bad input; the rest is a failure.
fn refusal(error: QueueError) -> anyhow::Error {
    match error {
        QueueError::NotFound { .. } => {
            BadInput::error(format!("{error} (`tinyagents queue list` lists them)"))
        }
        QueueError::Exists { .. } | QueueError::Decisions { .. } => {
            BadInput::error(error.to_string())
        }
        other => anyhow::Error::new(other),
    }
}

/// The first line of `text`, at most 80 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 80 {
        let cut: String = line.chars().take(79).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use tinyagents::core::RunId;
    use tinyagents::postgres::{QueueError, QueueStatus};

    use super::{BadInput, first_line, refusal};

    #[test]
    fn a_missing_run_is_bad_input_and_a_run_in_the_wrong_state_is_not() {
        let missing = refusal(QueueError::NotFound {
            run: RunId::new("r1"),
        });
        assert!(missing.downcast_ref::<BadInput>().is_some());
        assert!(missing.to_string().contains("run r1 is not in the queue"));
        let settled = refusal(QueueError::NotAwaiting {
            run: RunId::new("r1"),
            status: QueueStatus::Queued,
        });
        assert!(settled.downcast_ref::<BadInput>().is_none());
    }

    #[test]
    fn first_lines_are_cut_at_eighty_characters() {
        assert_eq!(first_line("done\nmore"), "done");
        assert_eq!(first_line(""), "");
        let long = first_line(&"x".repeat(100));
        assert_eq!(long.chars().count(), 80);
        assert!(long.ends_with('…'));
    }
}
