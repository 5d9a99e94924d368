//! Issue 10 item 8, the run handle: a run that is both the stream of its
//! events and the future of its result completes in every order of reading
//! and awaiting.

use futures_util::StreamExt;
use tinyagents::prelude::*;
use tinyagents::{RunHandle, harness::DEFAULT_EVENT_BUFFER};

use super::*;

/// Reads a handle's events until `None`.
async fn drain(handle: &mut RunHandle<'_>) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    while let Some(event) = handle.next_event().await {
        events.push(event);
    }
    events
}

#[tokio::test]
async fn issue10_item8_awaiting_a_handle_before_reading_completes_and_keeps_the_newest_events() {
    let harness = busy_harness(|b| b.event_buffer(8));
    let mut handle = harness.start(RunRequest::new("go"));
    let run = hang_guard("wait before reading", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    let kept = drain(&mut handle).await;
    assert_eq!(kept.len(), 8, "the handle keeps its buffer's worth");
    assert_eq!(
        handle.dropped_events(),
        (EVENTS - 8) as u64,
        "the oldest events were dropped and counted"
    );
    assert_stream_tail(&kept, RunStatus::Completed);
    assert!(
        handle.next_event().await.is_none(),
        "the stream stays ended"
    );
}

#[tokio::test]
async fn issue10_item8_awaiting_before_reading_with_room_for_every_event_loses_none() {
    let harness = busy_harness(|b| b);
    assert_eq!(harness.event_buffer(), DEFAULT_EVENT_BUFFER);
    const { assert!(EVENTS <= DEFAULT_EVENT_BUFFER) };
    let mut handle = harness.start(RunRequest::new("go"));
    let run = hang_guard("wait before reading", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    let events = drain(&mut handle).await;
    assert_eq!(handle.dropped_events(), 0);
    assert_eq!(events.len(), EVENTS);
    assert_complete_stream(&events, RunStatus::Completed);
}

#[tokio::test]
async fn issue10_item8_reading_a_handle_before_awaiting_gets_every_event_through_a_buffer_of_one() {
    let harness = busy_harness(|b| b.event_buffer(1));
    let mut handle = harness.start(RunRequest::new("go"));
    let events = hang_guard("read before waiting", drain(&mut handle)).await;
    assert!(handle.is_finished());
    let run = hang_guard("wait after reading", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    assert_eq!(handle.dropped_events(), 0);
    assert_eq!(events.len(), EVENTS);
    assert_complete_stream(&events, RunStatus::Completed);
}

#[tokio::test]
async fn issue10_item8_a_handle_is_a_stream_of_the_runs_events() {
    let harness = busy_harness(|b| b.event_buffer(4));
    let mut handle = harness.start(RunRequest::new("go"));
    let events: Vec<AgentEvent> = hang_guard("the stream", handle.by_ref().collect()).await;
    let run = handle.wait().await.unwrap();
    assert_busy_run_completed(&run);
    assert_eq!(events.len(), EVENTS);
    assert_complete_stream(&events, RunStatus::Completed);
}

#[tokio::test]
async fn issue10_item8_reading_some_events_then_waiting_keeps_the_unread_ones() {
    let harness = busy_harness(|b| b.event_buffer(DEFAULT_EVENT_BUFFER));
    let mut handle = harness.start(RunRequest::new("go"));
    let mut events = Vec::new();
    for _ in 0..5 {
        events.push(handle.next_event().await.unwrap());
    }
    let run = hang_guard("wait after reading some", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    events.extend(drain(&mut handle).await);
    assert_eq!(handle.dropped_events(), 0);
    assert_eq!(events.len(), EVENTS);
    assert_complete_stream(&events, RunStatus::Completed);
}

#[tokio::test]
async fn issue10_item8_a_handle_never_read_completes_under_wait() {
    let harness = busy_harness(|b| b.event_buffer(1));
    let mut handle = harness.start(RunRequest::new("go"));
    let run = hang_guard("wait, never reading", handle.wait())
        .await
        .unwrap();
    assert_busy_run_completed(&run);
    assert_eq!(handle.dropped_events(), (EVENTS - 1) as u64);
    let kept = drain(&mut handle).await;
    assert_eq!(kept.len(), 1);
    assert_stream_tail(&kept, RunStatus::Completed);
}

#[tokio::test]
async fn issue10_item8_awaiting_a_handle_directly_completes_and_discards_its_events() {
    let harness = busy_harness(|b| b.event_buffer(1));
    let run = hang_guard("awaiting the handle", harness.start(RunRequest::new("go")))
        .await
        .unwrap();
    assert_busy_run_completed(&run);
}

#[tokio::test]
async fn issue10_item8_cancelling_through_a_handle_ends_the_run_with_a_well_formed_stream() {
    // A buffer of one holds the run back while the first call starts.
    let harness = busy_harness(|b| b.event_buffer(1));
    let mut handle = harness.start(RunRequest::new("go"));
    let mut events = Vec::new();
    loop {
        let event = handle.next_event().await.unwrap();
        let started = matches!(event, AgentEvent::ToolStarted { .. });
        events.push(event);
        if started {
            break;
        }
    }
    handle.cancellation().cancel();
    events.extend(hang_guard("read after cancelling", drain(&mut handle)).await);
    let run = handle.wait().await.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_transcript_paired(&run.messages);
    assert_eq!(handle.dropped_events(), 0);
    assert_complete_stream(&events, RunStatus::Cancelled);
}

#[tokio::test]
async fn issue10_item8_a_handles_result_is_returned_once() {
    let harness = busy_harness(|b| b);
    let mut handle = harness.start(RunRequest::new("go"));
    assert_busy_run_completed(&handle.wait().await.unwrap());
    assert!(matches!(
        handle.wait().await,
        Err(TinyAgentsError::State(_))
    ));
}
