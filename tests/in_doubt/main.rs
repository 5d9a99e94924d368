//! Issue 18: calls in doubt after a crash are never dropped from view, and
//! are resolved where the tool can tell (`Tool::reconcile`), on every
//! origin: model-issued calls, nested calls under a parent that runs again
//! and under one that does not, and a finished run reconciled later. Through
//! the facade only.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod bank;
mod durable;
mod model_issued;
mod nested;
mod seams;
mod view;

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::RunId, harness::ResumeOptions, ledger::EffectLedger, ledger::LedgerRow,
};
use tinyagents_tests::collector;

/// A model turn paying `to`.
pub(crate) fn pay_turn(to: &str) -> ChatResponse {
    ScriptedModel::tool_calls([("pay", json!({ "to": to }))])
}

/// A model turn paying each of `to` in one nested batch.
pub(crate) fn batch_turn(to: &[&str]) -> ChatResponse {
    ScriptedModel::tool_calls([("batch", json!({ "to": to }))])
}

/// Recovers `run` with `harness`, with its events.
pub(crate) async fn recover(harness: &AgentHarness, run: &str) -> (AgentRun, Vec<AgentEvent>) {
    let (sink, collected) = collector();
    let result = harness
        .recover(&RunId::from(run), ResumeOptions::default(), &sink)
        .await;
    drop(sink);
    let events = collected.await.unwrap();
    (result.unwrap(), events)
}

/// The row of `call` in `run`.
pub(crate) async fn row(ledger: &Arc<dyn EffectLedger>, run: &str, call: &str) -> LedgerRow {
    ledger
        .get(&RunId::from(run), &CallId::new(call))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no row for {call}"))
}

/// The (run, call) pairs `in_doubt` lists for `run`.
pub(crate) async fn in_doubt(ledger: &Arc<dyn EffectLedger>, run: &str) -> Vec<String> {
    ledger
        .in_doubt()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.row.run_id.as_str() == run)
        .map(|d| d.row.call_id.to_string())
        .collect()
}

/// Whether `unfinished_runs` lists `run`.
pub(crate) async fn listed(ledger: &Arc<dyn EffectLedger>, run: &str) -> bool {
    ledger
        .unfinished_runs()
        .await
        .unwrap()
        .contains(&RunId::from(run))
}
