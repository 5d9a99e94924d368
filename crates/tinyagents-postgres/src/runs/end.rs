//! How a held segment ends (`RunStore::end`): ended with a status, failed,
//! given back, or suspended on calls that wait for a person; written only
//! while the epoch that names it still holds the run.

use tinyagents_core::RunId;
use tinyagents_runs::backend::{tampered, to_i64, waiting_calls_of, waiting_seal};
use tinyagents_runs::{Ending, RecordStatus, RunEvent, RunStoreError, RunStoreResult};

use super::{PostgresRunStore, clock, failed, note};

/// What a segment's end clears: nobody holds the run any more.
const RELEASE: &str = "owner = NULL, host = NULL, pid = NULL, lease_until = NULL";

/// Records how the segment held under `epoch` ended, if that epoch still
/// holds the run (its row locked meanwhile); false, and nothing written,
/// when another claim took it since or it is not running.
pub(super) async fn end(
    store: &PostgresRunStore,
    run: &RunId,
    epoch: u64,
    ending: &Ending,
) -> RunStoreResult<bool> {
    let operation = "end a run";
    let key = &store.key;
    let mut client = store.client(operation).await?;
    let tx = client.transaction().await.map_err(failed(operation))?;
    let at = clock(&tx, operation).await?;
    let ms = to_i64(at.as_millis());
    let held = tx
        .query_opt(
            "SELECT status, epoch, suspension, owner FROM tinyagents_runs WHERE id = $1 \
             FOR UPDATE",
            &[&run.as_str()],
        )
        .await
        .map_err(failed(operation))?;
    let Some(held) = held else {
        return Err(RunStoreError::NotFound { run: run.clone() });
    };
    let column = failed(operation);
    let status: String = held.try_get(0).map_err(&column)?;
    let held_epoch: i64 = held.try_get(1).map_err(&column)?;
    let suspension: i64 = held.try_get(2).map_err(&column)?;
    let owner: Option<String> = held.try_get(3).map_err(&column)?;
    if status != RecordStatus::Running.as_str() || held_epoch != to_i64(epoch) {
        return Ok(false);
    }
    let by = owner.unwrap_or_default();
    let event = match ending {
        Ending::Ended {
            status,
            final_text,
            usage,
        } => {
            tx.execute(
                format!(
                    "UPDATE tinyagents_runs SET status = $2, final_text = $3, input_tokens = $4,
                         output_tokens = $5, error = NULL, ended_at = $6, updated_at = $6,
                         {RELEASE} WHERE id = $1"
                )
                .as_str(),
                &[
                    &run.as_str(),
                    &status.as_str(),
                    final_text,
                    &to_i64(usage.input_tokens),
                    &to_i64(usage.output_tokens),
                    &ms,
                ],
            )
            .await
            .map_err(failed(operation))?;
            RunEvent::Ended {
                status: *status,
                error: None,
            }
        }
        Ending::Failed { error } => {
            tx.execute(
                format!(
                    "UPDATE tinyagents_runs SET status = 'failed', error = $2, ended_at = $3,
                         updated_at = $3, {RELEASE} WHERE id = $1"
                )
                .as_str(),
                &[&run.as_str(), error, &ms],
            )
            .await
            .map_err(failed(operation))?;
            RunEvent::Ended {
                status: RecordStatus::Failed,
                error: Some(error.clone()),
            }
        }
        Ending::Released => {
            tx.execute(
                format!(
                    "UPDATE tinyagents_runs SET status = 'queued', updated_at = $2, {RELEASE}
                     WHERE id = $1"
                )
                .as_str(),
                &[&run.as_str(), &ms],
            )
            .await
            .map_err(failed(operation))?;
            RunEvent::Released
        }
        Ending::Suspended { state, usage } => {
            if state.run_id != *run {
                return Err(tampered(run, "suspended state (another run's)"));
            }
            let next = u32::try_from(suspension).unwrap_or(0) + 1;
            let sealed = key.seal_state(state)?;
            let sealed = serde_json::to_string(&sealed).map_err(|e| RunStoreError::Unreadable {
                run: run.clone(),
                what: "suspended state",
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
            tx.execute(
                format!(
                    "UPDATE tinyagents_runs SET status = 'awaiting_approval', suspension = $2,
                         suspended = $3, input_tokens = $4, output_tokens = $5,
                         updated_at = $6, {RELEASE} WHERE id = $1"
                )
                .as_str(),
                &[
                    &run.as_str(),
                    &i64::from(next),
                    &sealed,
                    &to_i64(usage.input_tokens),
                    &to_i64(usage.output_tokens),
                    &ms,
                ],
            )
            .await
            .map_err(failed(operation))?;
            let calls = waiting_calls_of(state);
            for call in &calls {
                let arguments = serde_json::to_string(&call.arguments).unwrap_or_default();
                tx.execute(
                    "INSERT INTO tinyagents_waiting_calls (run_id, suspension, position, call_id,
                         tool, reason, args_hash, arguments, requested_at, seal)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        &run.as_str(),
                        &i64::from(next),
                        &i64::from(call.position),
                        &call.call_id.as_str(),
                        &call.tool,
                        &call.reason,
                        &call.args_hash,
                        &arguments,
                        &ms,
                        &waiting_seal(key, run, next, call),
                    ],
                )
                .await
                .map_err(failed("record waiting calls"))?;
            }
            RunEvent::Suspended {
                suspension: next,
                calls: calls.into_iter().map(|c| c.call_id).collect(),
            }
        }
    };
    note(&tx, run, &by, at, &event).await?;
    tx.commit().await.map_err(failed(operation))?;
    Ok(true)
}
