//! `queue`: the runs workers take, in the run store of `--db` (or
//! `--store`): queue a run of an agents file, list the runs and how many
//! are in each status, show one, decide a waiting one's calls. The same
//! records, approvals and listings as `runs`, `show` and `approve`; it
//! runs nothing itself.

use std::path::Path;

use serde_json::{Value, json};
use tinyagents::core::RunId;
use tinyagents::prelude::RunRequest;
use tinyagents::runs::{NewRun, RecordStatus, RunQuery};

use super::{BadInput, approve, inspect, refusal};
use crate::cli::QueueCommand;
use crate::exit;
use crate::file;
use crate::store::{Place, Stores};
use crate::view::out;

/// `tinyagents queue COMMAND`.
pub(crate) async fn queue(place: Place, command: &QueueCommand, json: bool) -> anyhow::Result<u8> {
    match command {
        QueueCommand::Enqueue { file, input, id } => {
            enqueue(place, file, input, id.as_deref(), json).await
        }
        QueueCommand::List { limit } => list(place, *limit, json).await,
        QueueCommand::Show { run } => inspect::show(place, run, false, json).await,
        QueueCommand::Approve(deciding) => approve::approve(place, deciding, json).await,
    }
}

/// `queue enqueue FILE INPUT [--id RUN]`.
async fn enqueue(
    place: Place,
    path: &Path,
    input: &str,
    id: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let loaded = file::load(path)?;
    let mut request = RunRequest::new(input);
    if let Some(id) = id {
        if id.trim().is_empty() {
            return Err(BadInput::error("--id: a run id cannot be empty"));
        }
        request = request.with_run_id(RunId::new(id));
    }
    let stores = Stores::open(place, true).await?;
    let new = NewRun::new(&loaded.main, &request).with_file(loaded.identity.clone());
    let run = new.run_id.clone();
    stores.runs.create(new, None).await.map_err(refusal)?;
    if json {
        out(&json!({"type": "enqueued", "run_id": run}).to_string());
    } else {
        out(run.as_str());
    }
    stores.close().await?;
    Ok(exit::OK)
}

/// `queue list [--limit N]`.
async fn list(place: Place, limit: u32, json: bool) -> anyhow::Result<u8> {
    let stores = Stores::open(place, false).await?;
    let runs = stores
        .runs
        .list(&RunQuery::default().limit(limit))
        .await
        .map_err(refusal)?;
    let counts = stores.runs.counts().await.map_err(refusal)?;
    let count = |status: RecordStatus| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    };
    inspect::list_runs(&stores, &runs, json).await?;
    if json {
        let mut line = serde_json::Map::new();
        line.insert("type".into(), json!("counts"));
        for status in RecordStatus::ALL {
            line.insert(status.as_str().into(), json!(count(status)));
        }
        out(&Value::Object(line).to_string());
    } else {
        let total: u64 = counts.iter().map(|(_, n)| n).sum();
        if runs.is_empty() {
            out(&format!("no runs in {}", stores.place.shown()));
        } else if u64::try_from(runs.len()).unwrap_or(u64::MAX) < total {
            out(&format!(
                "the oldest {} of {total} runs (--limit N for more)",
                runs.len()
            ));
        }
        let counted: Vec<String> = RecordStatus::ALL
            .iter()
            .map(|s| format!("{} {}", s.as_str(), count(*s)))
            .collect();
        out(&counted.join(" · "));
    }
    stores.close().await?;
    Ok(exit::OK)
}
