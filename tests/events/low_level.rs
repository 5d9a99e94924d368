//! Issue 10 item 8 through `event_channel` and `run_with`: a dropped
//! receiver and a receiver that is never read cannot hang a run that is
//! cancelled or runs out of wall clock, and a slow reader that still reads
//! loses nothing.

use tinyagents::prelude::*;
use tinyagents::{RunLimits, core::CancellationToken, core::LimitKind};

use super::*;

#[tokio::test]
async fn issue10_item8_a_run_whose_receiver_was_dropped_completes() {
    let harness = busy_harness(|b| b);
    let (sink, receiver) = event_channel(1);
    drop(receiver);
    let run = hang_guard("run_with", harness.run_with(RunRequest::new("go"), &sink))
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    assert_eq!(
        sink.dropped_events(),
        0,
        "nobody listened: nothing was lost"
    );
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_run_whose_buffer_of_one_is_never_read_gives_way_to_cancellation() {
    let harness = busy_harness(|b| b);
    let (sink, mut receiver, probe) = probed_channel(1);
    let token = CancellationToken::new();
    let canceller = cancel_when_full(probe, token.clone());
    let run = hang_guard(
        "a cancelled run nobody reads",
        harness.run_with(RunRequest::new("go").with_cancellation(token), &sink),
    )
    .await
    .unwrap();
    canceller.await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_transcript_paired(&run.messages);
    assert_given_way(&sink, &mut receiver);
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_run_whose_buffer_of_one_is_never_read_stops_at_the_wall_clock() {
    let harness = busy_harness(|b| b.limits(wall_clock(LimitBehavior::Stop)));
    let (sink, mut receiver) = event_channel(1);
    let run = hang_guard(
        "a run out of wall clock nobody reads",
        harness.run_with(RunRequest::new("go"), &sink),
    )
    .await
    .unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::WallClock));
    assert_transcript_paired(&run.messages);
    assert_given_way(&sink, &mut receiver);
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_run_whose_buffer_of_one_is_never_read_fails_at_the_wall_clock() {
    let harness = busy_harness(|b| b.limits(wall_clock(LimitBehavior::Error)));
    let (sink, mut receiver) = event_channel(1);
    let failed = hang_guard(
        "a failing run nobody reads",
        harness.run_with(RunRequest::new("go"), &sink),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            failed,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::WallClock,
                ..
            }
        ),
        "{failed}"
    );
    assert_given_way(&sink, &mut receiver);
}

#[tokio::test(start_paused = true)]
async fn issue10_item8_a_slow_reader_of_a_cancelled_run_still_gets_every_event_paired() {
    let harness = busy_harness(|b| b);
    let (sink, mut receiver) = event_channel(1);
    let token = CancellationToken::new();
    let reader = {
        let token = token.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = receiver.recv().await {
                // Slow, but reading: well within the stalled-reader grace.
                tokio::time::sleep(Duration::from_millis(10)).await;
                if matches!(event, AgentEvent::ToolStarted { .. }) {
                    token.cancel();
                }
                seen.push(event);
            }
            seen
        })
    };
    let run = hang_guard(
        "a cancelled run with a slow reader",
        harness.run_with(RunRequest::new("go").with_cancellation(token), &sink),
    )
    .await
    .unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_transcript_paired(&run.messages);
    assert_eq!(sink.dropped_events(), 0);
    drop(sink);
    let events = hang_guard("the reader", reader).await.unwrap();
    assert_complete_stream(&events, RunStatus::Cancelled);
}

/// Limits of a 5-second wall clock.
pub(crate) fn wall_clock(behavior: LimitBehavior) -> RunLimits {
    RunLimits::default()
        .with_wall_clock(Some(Duration::from_secs(5)))
        .with_behavior(behavior)
}

/// A channel of `capacity` and a sender kept to watch its free room.
pub(crate) fn probed_channel(
    capacity: usize,
) -> (
    EventSink,
    tokio::sync::mpsc::Receiver<AgentEvent>,
    tokio::sync::mpsc::Sender<AgentEvent>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    (EventSink::from_sender(tx.clone()), rx, tx)
}

/// From another task, cancels `token` once the channel `probe` watches is
/// full.
pub(crate) fn cancel_when_full(
    probe: tokio::sync::mpsc::Sender<AgentEvent>,
    token: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while probe.capacity() > 0 {
            tokio::task::yield_now().await;
        }
        token.cancel();
    })
}

/// The buffer of one holds the run's first event, unread all along; the
/// events that found it full gave way and were counted.
pub(crate) fn assert_given_way(
    sink: &EventSink,
    receiver: &mut tokio::sync::mpsc::Receiver<AgentEvent>,
) {
    assert!(
        matches!(receiver.try_recv(), Ok(AgentEvent::RunStarted { .. })),
        "the first event waited in the buffer"
    );
    assert!(receiver.try_recv().is_err(), "nothing else fit");
    assert!(sink.dropped_events() >= 2, "{}", sink.dropped_events());
}
