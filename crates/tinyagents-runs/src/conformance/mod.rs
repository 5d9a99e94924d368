//! The conformance suite every [`RunStore`] backend passes (feature
//! `conformance`). Each check panics with a message naming what broke.
//!
//! Records, queries and claims are in [`records`]; suspensions, decisions
//! and the approval history in [`approvals`]; leases and workers' claims in
//! [`leases`]; seals against edits made outside the store in [`tamper`]
//! (the backend supplies the edits, in its own SQL); journals in
//! [`journal`].
//!
//! Run [`run_all`] against a fresh store. The checks use their own run ids
//! (fresh per call), so a store shared with other tests still works,
//! except that [`leases`] claims every expired or queued run of its agent.

// A test suite: an unmet expectation is a panic by design.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod approvals;
pub mod journal;
pub mod leases;
pub mod records;
pub mod tamper;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tinyagents_core::{BudgetCounts, CallId, Message, RunId, State, ToolCall};
use tinyagents_harness::{RunRequest, SUSPENDED_RUN_FORMAT, SuspendedRun, TurnEntry};

use crate::{AgentsFile, Hold, Holder, NewRun, RunStore};

pub use tamper::Edit;

/// Runs every check but [`tamper`]'s (which need the backend's own edits),
/// in order.
pub async fn run_all(store: &dyn RunStore) {
    records::create_records_a_run_once_with_what_it_runs(store).await;
    records::a_run_held_at_creation_is_running_under_epoch_one(store).await;
    records::list_and_counts_select_by_status_and_agent(store).await;
    records::a_claim_takes_a_run_once_by_the_epoch_it_saw(store).await;
    records::end_writes_only_under_the_epoch_that_holds_the_run(store).await;
    records::accept_file_changes_the_hash_and_keeps_the_change_in_history(store).await;
    records::texts_with_a_nul_are_kept_alike_on_every_backend(store).await;
    approvals::a_suspension_records_its_waiting_calls_and_its_state(store).await;
    approvals::some_calls_are_decided_then_the_rest_and_the_run_is_queued_to_resume(store).await;
    approvals::a_decision_is_made_once_on_a_waiting_call_or_nothing_is_recorded(store).await;
    approvals::racing_deciders_decide_a_call_once(store).await;
    approvals::the_claim_that_resumes_takes_the_state_and_a_later_one_recovers(store).await;
    approvals::a_second_suspension_keeps_the_first_in_the_approval_history(store).await;
    leases::renew_extends_only_what_its_owner_still_holds(store).await;
    leases::claim_next_takes_expired_leases_then_queued_runs_each_once(store).await;
    leases::claim_next_takes_only_what_its_filter_admits(store).await;
    journal::a_journal_keeps_the_holders_events_in_order_and_pages(store).await;
}

/// A run id no other check uses.
pub fn fresh_run(prefix: &str) -> RunId {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RunId::from(format!("{prefix}-{nanos:x}-{n}"))
}

/// A new run of `agent` answering `input`, from `team.toml`.
pub fn new_run(agent: &str, input: &str) -> NewRun {
    NewRun::new(
        agent,
        &RunRequest::new(input).with_run_id(fresh_run("conformance")),
    )
    .with_file(AgentsFile::new("/srv/agents/team.toml", b"[agents.a]\n"))
}

/// A hold by `owner` for `lease`.
pub fn hold(owner: &str, lease: Duration) -> Hold {
    Hold {
        holder: Holder {
            owner: owner.to_owned(),
            host: "conformance-host".to_owned(),
            pid: 4242,
        },
        lease,
    }
}

/// A long lease: nothing expires during a check.
pub const LONG: Duration = Duration::from_secs(600);

/// A suspended state of `run` whose turn waits on `calls` (id, tool,
/// arguments), in order.
pub fn suspended_state(run: &RunId, calls: &[(&str, &str, Value)]) -> SuspendedRun {
    let tool_calls: Vec<ToolCall> = calls
        .iter()
        .map(|(id, tool, args)| ToolCall::new(CallId::new(id), *tool, args.clone()))
        .collect();
    let turn = tool_calls
        .iter()
        .map(|call| {
            let pending = serde_json::from_value(json!({
                "run_id": run,
                "call": call,
                "reason": format!("{} needs a person's approval", call.name),
            }))
            .expect("a pending call");
            TurnEntry::Pending { pending }
        })
        .collect();
    let messages = vec![
        Message::user("pay the invoices"),
        Message::Assistant {
            content: String::new(),
            tool_calls,
            reasoning: None,
        },
    ];
    SuspendedRun {
        format: SUSPENDED_RUN_FORMAT,
        run_id: run.clone(),
        state: State::new(messages),
        turn,
        budget: BudgetCounts::default(),
        active_ms: 12,
        properties: Map::new(),
        depth: 0,
        replay_blocked: Vec::new(),
    }
}
