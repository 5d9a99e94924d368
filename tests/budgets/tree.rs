//! One budget for the whole tree: the coordinator, the agents it delegates
//! to from every origin, and their concurrent runs.

use tinyagents::core::LimitKind;

use super::*;

/// The `RunFailed` errors of the delegated runs, in order.
fn delegated_failures(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delegated { event, .. } => match &**event {
                AgentEvent::RunFailed { error } => Some(error.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The coordinator delegates three times (from `origin`) and then answers;
/// each of its calls costs 0.02 cents (10 output tokens) and each helper
/// call 0.1 (50). Under a `max_cost` of 0.31 the third helper call, which
/// would bring the tree from 0.26 to 0.36, is refused before it is made;
/// the coordinator's answer (0.28) still fits.
async fn stops_before_the_crossing_call(origin: Origin) {
    let root_script = vec![
        origin.delegation(0, 10),
        origin.delegation(0, 10),
        origin.delegation(0, 10),
        answer("done", 0, 10),
    ];
    let helper_script = vec![
        answer("helped", 0, 50),
        answer("helped", 0, 50),
        answer("never asked", 0, 50),
    ];
    let limits = RunLimits::default().with_max_cost("0.31".parse().unwrap());
    let (root, helper) = team(
        root_script,
        helper_script,
        limits,
        SpendCaps::default(),
        false,
    )
    .await;
    let (result, events) = run_team(&root).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{origin:?}");
    assert_eq!(run.final_text, "done");
    // The third helper call was never made.
    assert_eq!(helper.calls(), 2, "{origin:?}");
    assert_eq!(
        delegated_failures(&events),
        ["limit exceeded: max_cost (limit 0.31, used 0.26)"],
        "{origin:?}"
    );
    // Exactly what the six calls made cost: 4 × 0.02 + 2 × 0.1.
    let spent = run.budget.spent;
    assert_eq!(spent.cost, cost_of(0, 4 * 10 + 2 * 50), "{origin:?}");
    assert_eq!(spent.cost, "0.28".parse().unwrap());
    assert_eq!(spent.usage, Usage::new(0, 140));
    assert_eq!((spent.model_calls, spent.unpriced_calls), (6, 0));
    assert_eq!(run.budget.tokens, 140);
    // The report: the coordinator's own four calls, then each helper run.
    let report = &run.spend_report();
    assert_eq!(report.len(), 4, "{report:#?}");
    assert_eq!(report[0].run_id, run.run_id);
    assert_eq!(report[0].own.cost, cost_of(0, 40));
    assert_eq!(report[0].total, spent);
    let helpers: Vec<Cost> = report[1..].iter().map(|line| line.total.cost).collect();
    assert_eq!(helpers, [cost_of(0, 50), cost_of(0, 50), Cost::ZERO]);
    for line in &report[1..] {
        assert_eq!(line.agent.as_ref().map(|a| a.as_str()), Some("helper"));
        assert_eq!(line.parent.as_ref(), Some(&run.run_id));
    }
}

#[tokio::test]
async fn a_tree_stops_before_the_delegated_call_that_would_cross_max_cost_model_issued() {
    stops_before_the_crossing_call(Origin::Model).await;
}

#[tokio::test]
async fn a_tree_stops_before_the_delegated_call_that_would_cross_max_cost_nested() {
    stops_before_the_crossing_call(Origin::Nested).await;
}

#[tokio::test]
async fn a_tree_stops_before_the_delegated_call_that_would_cross_max_cost_nested_of_nested() {
    stops_before_the_crossing_call(Origin::NestedOfNested).await;
}

/// Four delegations in one turn, run at once on two threads, against a
/// `max_cost` with room for the coordinator's two calls and two helper
/// calls only (0.24 of 0.27): whatever the interleaving, exactly two
/// helper calls are made and the tree spends exactly 0.24.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_delegated_runs_never_spend_past_max_cost() {
    for round in 0..16 {
        let fan_out = ScriptedModel::tool_calls((0..4).map(|_| ("Helper", json!({"query": "go"}))))
            .with_usage(Usage::new(0, 10));
        let limits = RunLimits::default().with_max_cost("0.27".parse().unwrap());
        let (root, helper) = team(
            vec![fan_out, answer("done", 0, 10)],
            (0..4).map(|_| answer("helped", 0, 50)).collect(),
            limits,
            SpendCaps::default(),
            true,
        )
        .await;
        let (result, events) = run_team(&root).await;
        let run = result.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "round {round}");
        assert_eq!(helper.calls(), 2, "round {round}");
        assert_eq!(
            run.budget.spent.cost,
            "0.24".parse().unwrap(),
            "round {round}"
        );
        let refused = delegated_failures(&events);
        assert_eq!(refused.len(), 2, "round {round}: {refused:?}");
        for error in refused {
            assert!(
                error.starts_with("limit exceeded: max_cost (limit 0.27, used "),
                "{error}"
            );
        }
    }
}

/// A helper whose share is 0.15 may make one call of 0.1 per run: its
/// second is refused by its share while the tree has plenty left, and the
/// coordinator goes on.
#[tokio::test]
async fn a_childs_smaller_share_binds_it_alone() {
    let share = SpendCaps {
        max_tokens: None,
        max_cost: Some("0.15".parse().unwrap()),
    };
    let limits = RunLimits::default().with_max_cost("10".parse().unwrap());
    let (root, helper) = team(
        vec![Origin::Model.delegation(0, 10), answer("done", 0, 10)],
        vec![
            calling("add", json!({"a": 1, "b": 2}), 0, 50),
            answer("never asked", 0, 50),
        ],
        limits,
        share,
        false,
    )
    .await;
    let (result, events) = run_team(&root).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(helper.calls(), 1);
    assert_eq!(
        delegated_failures(&events),
        ["limit exceeded: max_cost (limit 0.15, used 0.1)"]
    );
    assert_eq!(run.budget.spent.cost, "0.14".parse().unwrap());
}

/// Every call reserves its worst case, 10 tokens (no prompt, at most 10
/// of answer): under a `max_tokens` of 25 the third call (20 spent, 10
/// asked) is refused before it is made, and the run stops with what it
/// spent, reporting what was left.
#[tokio::test]
async fn max_tokens_refuses_the_call_whose_worst_case_would_not_fit_before_it_is_made() {
    let model = ScriptedModel::new([
        calling("add", json!({"a": 1, "b": 2}), 5, 5),
        calling("add", json!({"a": 1, "b": 2}), 5, 5),
        answer("never asked", 5, 5),
    ]);
    let model = Arc::new(model.named(MODEL));
    let harness = AgentHarness::builder(Arc::clone(&model))
        .prices(prices())
        .prompt_estimator(|_| 0)
        .model_options(output_cap(10))
        .tool(tinyagents_tests::add_tool())
        .limits(
            RunLimits::default()
                .with_max_tokens(25)
                .with_behavior(LimitBehavior::Stop),
        )
        .build()
        .unwrap();
    let (result, events) = tinyagents_tests::run_collecting(&harness, RunRequest::new("go")).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::Tokens));
    assert_eq!(model.calls(), 2);
    assert_eq!(run.budget.spent.usage, Usage::new(10, 10));
    assert_eq!(run.budget.spent.cost, cost_of(10, 10));
    let reached: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::LimitReached { kind, limit, used } => Some((*kind, *limit, *used)),
            _ => None,
        })
        .collect();
    // 25 - 20: 5 tokens were left, less than the call's worst case.
    assert_eq!(reached, [(LimitKind::Tokens, 25, 20)]);
    tinyagents_tests::assert_transcript_paired(&run.messages);
}
