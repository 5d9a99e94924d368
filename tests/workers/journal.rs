//! A worker journals the runs it holds: the events of a run it completed
//! are in the run store, in order, without the streamed deltas.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tinyagents::core::{ChatRequest, ModelDelta, ModelError};
use tinyagents::postgres::{FactoryError, LeasedRun};
use tinyagents::prelude::*;
use tinyagents::runs::{RecordStatus, RunStore as _};

use crate::lifecycle::{enqueue, setup, until_status, worker};

/// Calls `refund` at the first turn, then answers; each answer streamed in
/// deltas first, when the harness listens for them (counted in `streamed`).
struct StreamingRefund {
    streamed: Arc<AtomicUsize>,
}

#[async_trait]
impl ChatModel for StreamingRefund {
    fn name(&self) -> &str {
        "streaming-refund"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let turns = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let deltas = match turns {
            0 => vec![ModelDelta::ToolCallStarted {
                index: 0,
                name: "refund".into(),
            }],
            _ => vec![
                ModelDelta::Text {
                    text: "refun".into(),
                },
                ModelDelta::Text { text: "ded".into() },
            ],
        };
        if let Some(sink) = request.deltas {
            for delta in deltas {
                sink(delta);
                self.streamed.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(match turns {
            0 => ScriptedModel::tool_call("refund", json!({ "cents": 100 })),
            _ => ChatResponse::text("refunded"),
        })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Cents {
    cents: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_a_worker_completed_has_its_events_journaled_without_the_streamed_deltas() {
    let (_cluster, db, store) = setup().await;
    let streamed = Arc::new(AtomicUsize::new(0));
    let factory = {
        let streamed = Arc::clone(&streamed);
        move |run: &LeasedRun| -> Result<AgentHarness, FactoryError> {
            let refund = FnTool::new("refund", "Refunds.", |args: Cents| async move {
                anyhow::Ok(format!("refunded {}", args.cents))
            })
            .map_spec(|spec| spec.replay(ToolReplay::Never));
            let model = StreamingRefund {
                streamed: Arc::clone(&streamed),
            };
            let mut builder =
                AgentHarness::builder(Arc::new(model)).ledger(Arc::clone(&run.ledger));
            builder.register(Arc::new(refund))?;
            Ok(builder.build()?)
        }
    };
    let run = enqueue(&store, &RunRequest::new("refund c-7")).await;
    let report = until_status(
        &store,
        worker(&db, "journaling", factory),
        &run,
        RecordStatus::Completed,
    )
    .await;
    assert_eq!(report.completed, 1, "{report:?}");
    assert!(
        streamed.load(Ordering::SeqCst) > 0,
        "the model streamed deltas to the worker's run"
    );

    let entries = store.journal(&run, 0, 1_000).await.unwrap();
    assert!(
        entries.windows(2).all(|w| w[0].seq < w[1].seq),
        "{entries:?}"
    );
    let events: Vec<AgentEvent> = entries
        .into_iter()
        .map(|entry| entry.event.unwrap())
        .collect();
    assert!(
        matches!(events.first(), Some(AgentEvent::RunStarted { run_id, .. }) if *run_id == run),
        "the run's start first: {events:?}"
    );
    assert!(
        matches!(
            events.last(),
            Some(AgentEvent::RunCompleted {
                status: RunStatus::Completed,
                ..
            })
        ),
        "the run's end last: {events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ModelDelta { .. })),
        "streamed deltas are not journaled: {events:?}"
    );
    let started = events
        .iter()
        .position(|e| matches!(e, AgentEvent::ToolStarted { name, .. } if name == "refund"))
        .expect("the refund's start is journaled");
    let AgentEvent::ToolStarted { call_id, .. } = &events[started] else {
        unreachable!()
    };
    let completed = events
        .iter()
        .position(|e| {
            matches!(e, AgentEvent::ToolCompleted { call_id: done, is_error: false, .. }
                if done == call_id)
        })
        .expect("the refund's completion is journaled");
    assert!(started < completed, "{events:?}");
    let turns = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ModelCompleted { .. }))
        .count();
    assert_eq!(turns, 2, "both model turns: {events:?}");
}
