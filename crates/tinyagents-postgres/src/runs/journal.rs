//! Runs' journals (`RunStore::append_journal`, `RunStore::journal`): the
//! events a held segment emitted, appended under its claim's epoch in one
//! statement, and read back in order.

use tinyagents_core::RunId;
use tinyagents_runs::backend::{journal_entry, journal_texts, to_i64, to_u64};
use tinyagents_runs::{JournalEntry, NewJournalEvent, RunStoreResult};

use super::{PostgresRunStore, failed};

/// Appends the events (`$3` times, `$4` texts, in order) to run `$1`'s
/// journal if epoch `$2` still holds it, and says whether it did. One
/// statement: the run's row is share-locked (`FOR KEY SHARE`, as the
/// ledger's fence reads it), so a claim raising the epoch meanwhile waits
/// for the append, or the append sees the raised epoch and adds nothing.
const APPEND: &str = "WITH held AS (
        SELECT 1 FROM tinyagents_runs WHERE id = $1 AND epoch = $2 FOR KEY SHARE
    ), added AS (
        INSERT INTO tinyagents_run_journal (run_id, at, event)
        SELECT $1, e.at, e.event
        FROM unnest($3::bigint[], $4::text[]) WITH ORDINALITY AS e(at, event, n)
        WHERE EXISTS (SELECT 1 FROM held)
        ORDER BY e.n
    )
    SELECT EXISTS (SELECT 1 FROM held)";

/// Run `$1`'s journal after seq `$2`, oldest first, at most `$3` entries.
const READ: &str = "SELECT seq, at, event FROM tinyagents_run_journal
    WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

/// Appends `events` to the run's journal if `epoch` still holds it; false,
/// and nothing written, when another claim took it or it does not exist.
pub(super) async fn append(
    store: &PostgresRunStore,
    run: &RunId,
    epoch: u64,
    events: &[NewJournalEvent],
) -> RunStoreResult<bool> {
    let operation = "write a run's journal";
    let (at, texts): (Vec<i64>, Vec<String>) = journal_texts(run, events)?.into_iter().unzip();
    let client = store.client(operation).await?;
    let statement = client
        .prepare_cached(APPEND)
        .await
        .map_err(failed(operation))?;
    let row = client
        .query_one(&statement, &[&run.as_str(), &to_i64(epoch), &at, &texts])
        .await
        .map_err(failed(operation))?;
    row.try_get(0).map_err(failed(operation))
}

/// The run's journal after entry `after`, oldest first, at most `limit`
/// entries; an entry whose text is not an event is returned as such.
pub(super) async fn read(
    store: &PostgresRunStore,
    run: &RunId,
    after: u64,
    limit: u32,
) -> RunStoreResult<Vec<JournalEntry>> {
    let operation = "read a run's journal";
    let client = store.client(operation).await?;
    let statement = client
        .prepare_cached(READ)
        .await
        .map_err(failed(operation))?;
    let rows = client
        .query(
            &statement,
            &[&run.as_str(), &to_i64(after), &i64::from(limit)],
        )
        .await
        .map_err(failed(operation))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let seq: i64 = row.try_get(0).map_err(failed(operation))?;
        let at: i64 = row.try_get(1).map_err(failed(operation))?;
        let text: String = row.try_get(2).map_err(failed(operation))?;
        out.push(journal_entry(to_u64(seq), to_u64(at), &text));
    }
    Ok(out)
}
