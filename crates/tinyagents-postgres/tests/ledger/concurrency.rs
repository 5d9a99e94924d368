//! Many tasks sharing one ledger: every row written and settled once.

use std::sync::Arc;

use tinyagents_core::{CallId, RunId, ToolReplay, ToolResult};
use tinyagents_ledger::{CallStatus, EffectLedger, LedgerError, Outcome};
use tinyagents_postgres::PostgresLedger;

use crate::common::{Fresh, started};

const TASKS: usize = 64;
const CALLS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_of_twenty_calls_each_settle_every_row_exactly_once() {
    let fresh = Fresh::start().await;
    let ledger = Arc::new(PostgresLedger::open(&fresh.database().await).await.unwrap());
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                let run = RunId::from(format!("task-{task}"));
                for call in 0..CALLS {
                    let row = started(&run, &format!("p{call}"), ToolReplay::Never);
                    ledger.record_started(row.clone()).await.unwrap();
                    let outcome = Outcome::Completed(ToolResult::text(format!("{task}/{call}")));
                    ledger
                        .record_settled(&run, &row.call_id, &outcome)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    ledger.flush().await.unwrap();
    for task in 0..TASKS {
        let run = RunId::from(format!("task-{task}"));
        let rows = ledger.rows(&run).await.unwrap();
        assert_eq!(rows.len(), CALLS, "{run}: every row written");
        for (call, row) in rows.iter().enumerate() {
            assert_eq!(row.call_id, CallId::new(format!("p{call}")), "start order");
            assert_eq!(
                (row.status, row.attempts),
                (CallStatus::Completed, 1),
                "{run}/{}",
                row.call_id
            );
            let content = &row.result.as_ref().expect("a result").content;
            assert_eq!(content, &format!("{task}/{call}"), "its own result");
        }
        let again = Outcome::Failed("late".into());
        assert!(matches!(
            ledger
                .record_settled(&run, &CallId::new("p0"), &again)
                .await,
            Err(LedgerError::AlreadySettled {
                status: CallStatus::Completed,
                ..
            })
        ));
    }
    assert!(ledger.in_doubt().await.unwrap().is_empty());
    ledger.shutdown().await.unwrap();
}
