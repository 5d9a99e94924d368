//! Issue 30, the run's page: the whole tree (segments, model turns,
//! model-issued, nested and delegated calls, refusals with the rule's
//! words, calls only the ledger knows, unreadable journal entries) and
//! its live stream.

use std::time::Duration;

use tinyagents::console::{CallTree, NodeKind, NodeState};
use tinyagents::ledger::{LedgerRow, StartedRow, Timestamp};
use tinyagents::prelude::*;
use tinyagents::runs::{Ending, JournalEntry, NewRun, RecordStatus, RunStore as _};

use crate::fixture::{Fixture, hold};

fn entries(events: Vec<Result<AgentEvent, String>>) -> Vec<JournalEntry> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| JournalEntry {
            seq: i as u64 + 1,
            at: Timestamp::from_millis(1_000 + i as u64 * 10),
            event,
        })
        .collect()
}

fn started(call: &str, parent: Option<&str>, tool: &str) -> AgentEvent {
    AgentEvent::ToolStarted {
        call_id: CallId::new(call),
        parent_call_id: parent.map(CallId::new),
        name: tool.into(),
        arguments: None,
    }
}

fn completed(call: &str, tool: &str) -> AgentEvent {
    AgentEvent::ToolCompleted {
        call_id: CallId::new(call),
        parent_call_id: None,
        name: tool.into(),
        duration_ms: 7,
        is_error: false,
        result: None,
        metadata: None,
    }
}

#[test]
fn the_tree_holds_turns_nested_and_delegated_calls_refusals_and_calls_only_the_ledger_knows() {
    let run = RunId::new("r1");
    let child = tinyagents::orchestrator::child_run_id(&run, &CallId::new("p2"));
    let delegated = |event| AgentEvent::Delegated {
        parent_call_id: CallId::new("p2"),
        agent_id: AgentId::new("researcher"),
        depth: 1,
        event: Box::new(event),
    };
    let journal = entries(vec![
        Ok(AgentEvent::RunStarted {
            run_id: run.clone(),
            agent_id: None,
        }),
        Ok(AgentEvent::ModelStarted { turn: 1 }),
        Ok(started("p1", None, "lookup")),
        Ok(started("p1/1", Some("p1"), "fetch")),
        Ok(started("p1/1/1", Some("p1/1"), "resolve")),
        Ok(completed("p1/1/1", "resolve")),
        Ok(completed("p1/1", "fetch")),
        Ok(completed("p1", "lookup")),
        Ok(started("p2", None, "researcher")),
        Ok(delegated(AgentEvent::RunStarted {
            run_id: child.clone(),
            agent_id: None,
        })),
        Ok(delegated(AgentEvent::ModelStarted { turn: 1 })),
        Ok(delegated(started("q1", None, "search"))),
        Ok(delegated(completed("q1", "search"))),
        // The researcher delegates in turn (call q2, agent scout).
        Ok(delegated(started("q2", None, "scout"))),
        Ok(delegated(AgentEvent::Delegated {
            parent_call_id: CallId::new("q2"),
            agent_id: AgentId::new("scout"),
            depth: 2,
            event: Box::new(started("s1", None, "peek")),
        })),
        Err("journal entry 17 is not an event: unknown variant".to_owned()),
        Ok(AgentEvent::ToolFailed {
            call_id: CallId::new("p3"),
            parent_call_id: None,
            name: "wire".into(),
            duration_ms: 0,
            error: "refused by policy 'no-wires': tool 'wire' is denied".into(),
        }),
    ]);
    let row = |run: &RunId, call: &str, tool: &str| {
        LedgerRow::started(
            StartedRow::new(run.clone(), CallId::new(call), tool, "h", ToolReplay::Never),
            Timestamp::from_millis(1_050),
        )
    };
    let rows = vec![
        row(&run, "p1", "lookup"),
        row(&run, "p9", "pay"),
        row(&child, "q1", "search"),
    ];
    let tree = CallTree::build(&run, "planner", &journal, &rows, false);
    let find = |id: &str| {
        tree.nodes
            .iter()
            .position(
                |n| matches!(&n.kind, NodeKind::Call { call_id, .. } if call_id.as_str() == id),
            )
            .unwrap_or_else(|| panic!("no node for {id}: {tree:#?}"))
    };
    let parent_of = |id: usize| {
        tree.nodes
            .iter()
            .position(|n| n.children.contains(&id))
            .unwrap()
    };
    assert_eq!(
        parent_of(find("p1/1")),
        find("p1"),
        "a nested call under its parent"
    );
    assert!(matches!(
        tree.nodes[find("p1/1")].kind,
        NodeKind::Call { nested: true, .. }
    ));
    assert!(matches!(
        tree.nodes[parent_of(find("p1"))].kind,
        NodeKind::Turn { turn: 1 }
    ));
    let child_run = parent_of(parent_of(parent_of(find("q1"))));
    assert!(
        matches!(&tree.nodes[child_run].kind, NodeKind::Run { run_id, agent: Some(a) } if *run_id == child && a == "researcher")
    );
    assert_eq!(
        parent_of(child_run),
        find("p2"),
        "the delegated run under its call"
    );
    assert!(
        tree.nodes[find("q1")].ledger.is_some(),
        "the child run's rows reach its calls"
    );
    assert_eq!(
        parent_of(find("p1/1/1")),
        find("p1/1"),
        "a nested call of a nested call"
    );
    // The researcher delegated in turn: the scout's run under q2, q2 in
    // the researcher's run, under p2.
    let grandchild = parent_of(parent_of(find("s1")));
    let scout = tinyagents::orchestrator::child_run_id(&child, &CallId::new("q2"));
    assert!(matches!(&tree.nodes[grandchild].kind,
        NodeKind::Run { run_id, agent: Some(a) } if *run_id == scout && a == "scout"));
    assert_eq!(parent_of(grandchild), find("q2"));
    assert_eq!(parent_of(parent_of(parent_of(find("q2")))), child_run);
    assert_eq!(
        tree.nodes[find("p3")].state,
        NodeState::Failed("refused by policy 'no-wires': tool 'wire' is denied".into())
    );
    // p9: only the ledger knows it; it started and never settled.
    let p9 = find("p9");
    assert!(matches!(
        tree.nodes[parent_of(p9)].kind,
        NodeKind::Segment { number: 0 }
    ));
    assert_eq!(tree.nodes[p9].state, NodeState::InDoubt);
    assert_eq!(
        tree.nodes[find("p1")].state,
        NodeState::InDoubt,
        "its row never settled"
    );
    assert_eq!(
        tree.nodes[find("p2")].state,
        NodeState::Interrupted,
        "the run ended without it"
    );
    assert_eq!(
        tree.unreadable,
        ["journal entry 17 is not an event: unknown variant"]
    );
    assert_eq!(tree.calls(), 9);
    // While the run runs, a started row is a call in flight.
    let live = CallTree::build(&run, "planner", &journal, &rows, true);
    assert_eq!(live.nodes[find("p9")].state, NodeState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stream_says_when_a_running_run_changed_and_when_it_settled() {
    let fx = Fixture::new().await;
    let request = RunRequest::new("go");
    let run = NewRun::new("payer", &request);
    let id = run.run_id.clone();
    fx.runs.create(run, Some(&hold())).await.unwrap();
    let page = fx.get(&format!("/runs/{id}")).await;
    assert!(
        page.body.contains("data-live=\"on\""),
        "a running run's page is live"
    );
    let (addr, bearer, path) = (fx.addr, fx.bearer(), format!("/runs/{id}/live"));
    let stream = tokio::spawn(async move {
        crate::http::send(addr, "GET", &path, &[("Authorization", &bearer)], "").await
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let event = (Timestamp::now(), AgentEvent::ModelStarted { turn: 1 });
    assert!(fx.runs.append_journal(&id, 1, &[event]).await.unwrap());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let done = Ending::Failed {
        error: "stopped".into(),
    };
    assert!(fx.runs.end(&id, 1, &done).await.unwrap());
    let answer = tokio::time::timeout(Duration::from_secs(10), stream)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("text/event-stream"));
    let change = answer.body.find("event: change").expect(&answer.body);
    let settled = answer.body.find("event: settled").expect(&answer.body);
    assert!(change < settled, "{}", answer.body);
    let fragment = fx.get(&format!("/runs/{id}/tree")).await;
    assert!(fragment.body.contains("model turn 1") && !fragment.body.contains("<html"));
    let page = fx.get(&format!("/runs/{id}")).await;
    assert!(
        !page.body.contains("data-live=\"on\""),
        "an ended run's page is not live"
    );
}

/// The page finds a delegated run's ledger rows under the call the journal
/// says delegated, and under a call whose end the journal lost (a crash):
/// both child runs' calls are drawn, each under its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_draws_delegated_runs_from_the_journal_and_from_the_ledger_alone() {
    use tinyagents::ledger::{EffectLedger as _, Outcome};
    let fx = Fixture::new().await;
    let request = RunRequest::new("research");
    let run = NewRun::new("planner", &request);
    let id = run.run_id.clone();
    fx.runs.create(run, Some(&hold())).await.unwrap();
    let child = |call: &str| tinyagents::orchestrator::child_run_id(&id, &CallId::new(call));
    let settle = |run: RunId, call: &'static str, tool: &'static str| {
        let ledger = std::sync::Arc::clone(&fx.ledger);
        async move {
            let started =
                StartedRow::new(run.clone(), CallId::new(call), tool, "h", ToolReplay::Never);
            ledger.record_started(started).await.unwrap();
            let done = Outcome::Completed(ToolResult::text("ok"));
            ledger
                .record_settled(&run, &CallId::new(call), &done)
                .await
                .unwrap();
        }
    };
    settle(id.clone(), "p2", "researcher").await;
    settle(child("p2"), "q1", "search").await;
    settle(id.clone(), "p3", "auditor").await;
    settle(child("p3"), "a1", "audit_lookup").await;
    let delegated = |event| AgentEvent::Delegated {
        parent_call_id: CallId::new("p2"),
        agent_id: AgentId::new("researcher"),
        depth: 1,
        event: Box::new(event),
    };
    let now = Timestamp::now();
    let events = vec![
        AgentEvent::RunStarted {
            run_id: id.clone(),
            agent_id: None,
        },
        started("p2", None, "researcher"),
        delegated(AgentEvent::RunStarted {
            run_id: child("p2"),
            agent_id: None,
        }),
        delegated(started("q1", None, "search")),
        delegated(completed("q1", "search")),
        completed("p2", "researcher"),
        // p3's start only: its end and its child's events were lost.
        started("p3", None, "auditor"),
    ];
    let events: Vec<_> = events.into_iter().map(|e| (now, e)).collect();
    assert!(fx.runs.append_journal(&id, 1, &events).await.unwrap());
    let done = Ending::Failed {
        error: "the process died".into(),
    };
    assert!(fx.runs.end(&id, 1, &done).await.unwrap());
    let page = fx.get(&format!("/runs/{id}")).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    let at = |needle: &str| {
        body.find(needle)
            .unwrap_or_else(|| panic!("no {needle} in {body}"))
    };
    assert!(
        at(r#"data-call="p2""#) < at(r#"data-call="q1""#),
        "q1 under p2"
    );
    assert!(
        at(r#"data-call="p3""#) < at(r#"data-call="a1""#),
        "a1 under p3, from the ledger alone"
    );
    assert!(
        body.contains(&format!(r#"data-run="{}""#, child("p3"))),
        "p3's delegated run drawn"
    );
    assert!(body.contains("audit_lookup") && body.contains("agent researcher"));
}

/// Issue 33: a priced run's page shows each turn's cost beside its tokens,
/// a run's own cost and, when it delegated, its tree's tokens and cost, and
/// the record the tree's total with the calls left unpriced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_shows_each_turns_and_runs_cost_and_the_trees_total() {
    let fx = Fixture::new().await;
    let request = RunRequest::new("research");
    let run = NewRun::new("planner", &request);
    let id = run.run_id.clone();
    fx.runs.create(run, Some(&hold())).await.unwrap();
    let child = tinyagents::orchestrator::child_run_id(&id, &CallId::new("p1"));
    let delegated = |event| AgentEvent::Delegated {
        parent_call_id: CallId::new("p1"),
        agent_id: AgentId::new("researcher"),
        depth: 1,
        event: Box::new(event),
    };
    let turn = |turn: u32, input: u64, cost: Option<&str>| AgentEvent::ModelCompleted {
        turn,
        usage: Usage::new(input, 100),
        cost: cost.map(|c| c.parse().unwrap()),
        duration_ms: 5,
        tool_calls: 0,
        content: None,
    };
    let spent = |input: u64, cost: &str, calls: u32, unpriced: u32| Spent {
        usage: Usage::new(input, 100 * u64::from(calls)),
        cost: cost.parse().unwrap(),
        model_calls: calls,
        unpriced_calls: unpriced,
    };
    let now = Timestamp::now();
    let events = vec![
        AgentEvent::RunStarted {
            run_id: id.clone(),
            agent_id: None,
        },
        AgentEvent::ModelStarted { turn: 1 },
        turn(1, 900, Some("0.325")),
        started("p1", None, "researcher"),
        delegated(AgentEvent::RunStarted {
            run_id: child.clone(),
            agent_id: None,
        }),
        delegated(AgentEvent::ModelStarted { turn: 1 }),
        delegated(turn(1, 400, None)),
        delegated(AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            usage: Usage::new(400, 100),
            spent: spent(400, "0", 1, 1),
        }),
        completed("p1", "researcher"),
        AgentEvent::ModelStarted { turn: 2 },
        turn(2, 1_000, Some("0.35")),
        AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            usage: Usage::new(1_900, 200),
            spent: spent(2_300, "0.675", 3, 1),
        },
    ];
    let events: Vec<_> = events.into_iter().map(|e| (now, e)).collect();
    assert!(fx.runs.append_journal(&id, 1, &events).await.unwrap());
    let done = Ending::Ended {
        status: RecordStatus::Completed,
        final_text: "done".into(),
        usage: Usage::new(1_900, 200),
    };
    assert!(fx.runs.end(&id, 1, &done).await.unwrap());

    let journal = fx.runs.journal(&id, 0, 100).await.unwrap();
    let tree = CallTree::build(&id, "planner", &journal, &[], false);
    let top = &tree.nodes[0];
    assert_eq!(top.cost, Some("0.675".parse().unwrap()), "its own turns");
    assert_eq!(top.spent.unwrap().unpriced_calls, 1);
    let researcher = tree
        .nodes
        .iter()
        .find(|n| matches!(&n.kind, NodeKind::Run { run_id, .. } if *run_id == child))
        .unwrap();
    assert_eq!(researcher.cost, None, "nothing of it was priced");

    let page = fx.get(&format!("/runs/{id}")).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    for expected in [
        r#"<dt>Cost</dt><dd><span class="cost" id="run-cost">0.675</span> (in the smallest unit of the price table's currency, with every run it delegated to; 1 model call(s) unpriced)</dd>"#,
        r#"<span class="tokens">1000 tokens</span> <span class="cost" title="in the smallest unit of the price table's currency">cost 0.325</span>"#,
        r#"<span class="tokens">2100 tokens</span> <span class="cost" title="in the smallest unit of the price table's currency">cost 0.675</span> <span class="tokens">tree 2600 tokens</span> <span class="cost" title="in the smallest unit of the price table's currency">tree cost 0.675</span>"#,
    ] {
        assert!(body.contains(expected), "no {expected} in {body}");
    }
}
