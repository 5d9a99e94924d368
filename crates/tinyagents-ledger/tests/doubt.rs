//! Calls in doubt on a manual clock: `in_doubt` lists them oldest first with
//! their age, and a resolution is stamped with the ledger's time, on both
//! backends (the conformance suite checks the rules; this checks the time).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::time::Duration;

use serde_json::json;
use tinyagents_core::{CallId, RunId, ToolReplay};
use tinyagents_ledger::{
    EffectLedger, Found, ManualClock, MemoryLedger, Resolve, StartedRow, Timestamp, args_hash,
};
#[cfg(feature = "sqlite")]
use tinyagents_ledger::{SqliteLedger, SqliteOptions};

async fn ages_and_order(ledger: &dyn EffectLedger, clock: &ManualClock) {
    let start = |run: &str, call: &str| {
        StartedRow::new(
            RunId::from(run),
            CallId::new(call),
            "pay",
            args_hash(&json!({"call": call})),
            ToolReplay::Never,
        )
    };
    ledger.record_started(start("r2", "p1")).await.unwrap();
    clock.advance(Duration::from_millis(500));
    ledger.record_started(start("r1", "p7")).await.unwrap();
    clock.advance(Duration::from_millis(250));
    let listed: Vec<(String, String, Duration)> = ledger
        .in_doubt()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.row.run_id.to_string(), d.row.call_id.to_string(), d.age))
        .collect();
    assert_eq!(
        listed,
        [
            ("r2".into(), "p1".into(), Duration::from_millis(750)),
            ("r1".into(), "p7".into(), Duration::from_millis(250)),
        ],
        "oldest first, whatever the run ids"
    );
    let person = Resolve::by_person("carol", Found::NotHappened);
    ledger
        .resolve(&RunId::from("r2"), &CallId::new("p1"), &person)
        .await
        .unwrap();
    let row = ledger
        .get(&RunId::from("r2"), &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.resolution.unwrap().at,
        Timestamp::from_millis(1_000 + 750)
    );
}

#[tokio::test]
async fn memory_ledger_lists_calls_in_doubt_oldest_first_with_their_age() {
    let clock = ManualClock::new(Timestamp::from_millis(1_000));
    let ledger = MemoryLedger::new().with_clock(clock.clone());
    ages_and_order(&ledger, &clock).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_ledger_lists_calls_in_doubt_oldest_first_with_their_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_millis(1_000));
    let options = SqliteOptions::default().clock(clock.clone());
    let ledger = SqliteLedger::open_with(dir.path().join("l.db"), options)
        .await
        .unwrap();
    ages_and_order(&ledger, &clock).await;
    // A resolution is durable when `resolve` returns: a second handle on
    // the file reads it.
    let other = SqliteLedger::open(dir.path().join("l.db")).await.unwrap();
    let row = other
        .get(&RunId::from("r2"), &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert!(row.resolution.is_some());
    other.shutdown().await.unwrap();
    ledger.shutdown().await.unwrap();
}
