//! A run page's live updates: server-sent events saying when the run
//! changed (its record, its journal, its ledger rows), from which the
//! page's script fetches the tree again; `settled` once it no longer runs.
//! Each stream polls the stores, so it sees runs any process runs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Path;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tinyagents_core::RunId;

use crate::console::Inner;
use crate::pages::run::{is_active, record_of};
use crate::pages::{PageError, Shared};

/// How often a stream looks at the stores.
const POLL: Duration = Duration::from_millis(250);

/// What changes when a run moves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mark {
    status: &'static str,
    updated_ms: u64,
    epoch: u64,
    journal_seq: u64,
    rows: usize,
    settled_rows: usize,
    found_rows: usize,
}

struct Watch {
    inner: Arc<Inner>,
    run: RunId,
    last: Option<Mark>,
    done: bool,
}

async fn mark(inner: &Inner, run: &RunId, after: u64) -> Result<(Mark, bool), PageError> {
    let record = record_of(inner, run).await?;
    let journal = inner
        .stores
        .runs
        .journal(run, after, 100_000)
        .await
        .map_err(|e| PageError::store(&format!("the journal of run {run}"), &e))?;
    let rows = inner
        .stores
        .ledger
        .rows(run)
        .await
        .map_err(|e| PageError::store(&format!("the ledger rows of run {run}"), &e))?;
    let mark = Mark {
        status: record.status.as_str(),
        updated_ms: record.updated_at.as_millis(),
        epoch: record.epoch,
        journal_seq: journal.last().map_or(after, |e| e.seq),
        rows: rows.len(),
        settled_rows: rows.iter().filter(|r| r.settled_at.is_some()).count(),
        found_rows: rows.iter().filter(|r| r.resolution.is_some()).count(),
    };
    Ok((mark, !is_active(&record)))
}

/// `GET /runs/{run}/live`.
pub(crate) async fn stream(
    state: Shared,
    Path(run): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let inner = state.0;
    let run = RunId::from(run);
    record_of(&inner, &run).await?;
    let watch = Watch {
        inner,
        run,
        last: None,
        done: false,
    };
    let events = futures_util::stream::unfold(watch, |mut w| async move {
        if w.done {
            return None;
        }
        loop {
            let after = w.last.as_ref().map_or(0, |m| m.journal_seq);
            let (now, settled) = match mark(&w.inner, &w.run, after).await {
                Ok(found) => found,
                Err(error) => {
                    w.done = true;
                    let event = Event::default().event("failed").data(error.text.clone());
                    return Some((Ok(event), w));
                }
            };
            let first = w.last.is_none();
            let changed = w.last.as_ref() != Some(&now);
            w.last = Some(now);
            if settled {
                w.done = true;
                return Some((Ok(Event::default().event("settled").data("settled")), w));
            }
            if changed && !first {
                return Some((Ok(Event::default().event("change").data("change")), w));
            }
            tokio::time::sleep(POLL).await;
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
