//! NT-14..NT-18: timeouts, the wall clock and the shared tool-call budget.

use super::*;

/// rule NT-14: a nested call is bounded by its tool's own timeout, by the
/// run's default tool timeout, and by the run's remaining wall-clock budget.
#[tokio::test(start_paused = true)]
async fn nt_14_nested_calls_get_the_tool_timeout_and_the_remaining_wall_clock() {
    let node = Node::new(spec("node").timeout(Duration::from_secs(60)));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)))
        .with_spec(|s| s.timeout(Duration::from_secs(1)));
    let slower = ProbeTool::new("slower", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[(
            "node",
            plan(vec![child("slow", json!({})), child("slower", json!({}))]),
        )]),
        vec![node.tool(), slow, slower],
        |b| b.limits(nesting(3).with_tool_timeout(Some(Duration::from_secs(2)))),
    );
    let (_, events) = run_checked(&harness).await;
    assert_eq!(
        node.err("p1", 0),
        TinyAgentsError::Timeout {
            what: "slow".into(),
            after_ms: 1000
        }
    );
    assert_eq!(
        node.err("p1", 0).to_string(),
        "'slow' timed out after 1000 ms"
    );
    assert_eq!(
        node.err("p1", 1),
        TinyAgentsError::Timeout {
            what: "slower".into(),
            after_ms: 2000
        }
    );
    assert_eq!(
        failed_error(&events, "p1/2"),
        "'slower' timed out after 2000 ms"
    );

    // The wall clock: 10 s for the run; the parent calls after 4 s, so its
    // nested call may take at most the 6 s left.
    let node = Node::plain();
    let clock = scripted(safe("clock"), |call| async move {
        Ok(ToolResult::text(format!("{:?}", call.opts.timeout)))
    });
    let tree = with(
        plan(vec![child("clock", json!({}))]),
        "sleep_ms",
        json!(4000),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&clock)],
        |b| {
            b.limits(
                nesting(3)
                    .with_tool_timeout(None)
                    .with_wall_clock(Some(Duration::from_secs(10))),
            )
        },
    );
    run_checked(&harness).await;
    assert_eq!(
        node.ok("p1", 0).content,
        format!("{:?}", Some(Duration::from_secs(6)))
    );
}

/// rule NT-15: nested and model-issued calls draw on one `max_tool_calls`
/// pool; `tool_calls` counts the model-issued calls only.
#[tokio::test]
async fn nt_15_one_pool_and_tool_calls_counts_model_issued_calls_only() {
    let node = Node::plain();
    let leaf = new_leaf();
    let model = vec![
        ScriptedModel::tool_call(
            "node",
            plan(vec![
                child("leaf", json!({})),
                child("leaf", json!({})),
                child("leaf", json!({})),
            ]),
        ),
        ScriptedModel::tool_call("leaf", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| b);
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.budget.tool_calls, 2, "model-issued: node and leaf");
    assert_eq!(run.budget.nested_tool_calls, 3);

    // The tracker a host passes in sees the same split, against one cap.
    let tracker = Arc::new(LimitTracker::new(
        &RunLimits::default().with_max_tool_calls(4),
    ));
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b.limits(nesting(3).with_max_tool_calls(4)),
    );
    let mut request = RunRequest::new("go");
    request.tracker = Some(Arc::clone(&tracker));
    harness.run_with(request, &EventSink::none()).await.unwrap();
    assert_eq!(
        (
            tracker.tool_calls(),
            tracker.nested_tool_calls(),
            tracker.total_tool_calls()
        ),
        (1, 3, 4)
    );
    assert!(matches!(
        node.err("p1", 3),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::ToolCalls,
            limit: 4,
            used: 4
        }
    ));

    // Reserving a nested slot needs only `&LimitTracker` (what a tool future
    // holds), and counts against the same cap as model-issued calls.
    let shared: &LimitTracker = &LimitTracker::new(&RunLimits::default().with_max_tool_calls(2));
    shared.try_reserve_nested_tool_call().unwrap();
    shared.try_reserve_tool_call().unwrap();
    assert!(shared.try_reserve_nested_tool_call().is_err());
    assert!(shared.try_reserve_tool_call().is_err());
    assert_eq!((shared.tool_calls(), shared.nested_tool_calls()), (1, 1));
}

/// rule NT-16: concurrent parents cannot overspend the cap.
#[tokio::test(start_paused = true)]
async fn nt_16_concurrent_parents_cannot_overspend_the_cap() {
    let node = Node::new(safe("node"));
    let leaf = ProbeTool::new("leaf", true, Behaviour::Yield(2));
    let fan = with(
        plan((0..5).map(|_| child("leaf", json!({}))).collect()),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", fan.clone()), ("node", fan)]),
        vec![node.tool(), leaf.clone()],
        |b| b.limits(nesting(3).with_max_tool_calls(6)),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        (run.budget.tool_calls, run.budget.nested_tool_calls),
        (2, 4)
    );
    let outcomes: Vec<Outcome> = node
        .outcomes("p1")
        .into_iter()
        .chain(node.outcomes("p2"))
        .collect();
    let ok = outcomes.iter().filter(|o| matches!(o, Some(Ok(_)))).count();
    let refused = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Some(Err(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::ToolCalls,
                    limit: 6,
                    used: 6
                }))
            )
        })
        .count();
    assert_eq!((ok, refused), (4, 6), "{outcomes:?}");
    assert_eq!(leaf.calls.load(Ordering::SeqCst), 4);
    assert!(
        leaf.max_active.load(Ordering::SeqCst) >= 2,
        "the fan-outs ran together"
    );
    assert_eq!(nested_starts(&events).len(), 10);
}

/// rule NT-16: a cap spent by nested calls trips the next model-issued call.
#[tokio::test]
async fn nt_16_a_cap_spent_by_nested_calls_trips_the_next_model_issued_call() {
    for behavior in [LimitBehavior::Error, LimitBehavior::Stop] {
        let node = Node::plain();
        let leaf = new_leaf();
        let model = vec![
            ScriptedModel::tool_call(
                "node",
                plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
            ),
            ScriptedModel::tool_call("leaf", json!({})),
            ChatResponse::text("unreachable"),
        ];
        let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| {
            b.limits(nesting(3).with_max_tool_calls(3).with_behavior(behavior))
        });
        let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
        assert_one_terminal_per_start(&events);
        let expected = TinyAgentsError::LimitExceeded {
            kind: LimitKind::ToolCalls,
            limit: 3,
            used: 3,
        };
        match behavior {
            LimitBehavior::Error => assert_eq!(run.unwrap_err(), expected),
            LimitBehavior::Stop => {
                let run = run.unwrap();
                assert_eq!(run.status, RunStatus::LimitReached(LimitKind::ToolCalls));
                assert_eq!(
                    (run.budget.tool_calls, run.budget.nested_tool_calls),
                    (1, 2)
                );
                assert!(answer(&run, "p2").1, "the model-issued call was refused");
            }
        }
        assert_eq!(leaf.ids(), ["p1/1", "p1/2"], "the model's leaf never ran");
    }
}

/// rule NT-17: a refused nested call releases its slot (refusals at any
/// stage, the concurrency gate included); one that ran keeps it, whatever
/// its outcome.
#[tokio::test]
async fn nt_17_refused_calls_release_their_slot_and_calls_that_ran_keep_it() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let leaf = new_leaf();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let tree = plan(vec![
        child("ghost", json!({})),
        child("ghost", json!({})),
        child("ghost", json!({})),
        child("snode", plan(vec![child("write", json!({}))])),
        child("raises", json!({})),
        child("reports", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
    ]);
    // 1 model-issued + snode, raises, reports, leaf = 5 = the cap; the
    // refused ghosts and the refused write hold nothing.
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            snode.tool(),
            t(&leaf),
            t(&write),
            t(&raises()),
            t(&reports()),
        ],
        |b| {
            b.limits(nesting(3).with_max_tool_calls(5))
                .include_detailed_errors(true)
        },
    );
    let (run, _) = run_checked(&harness).await;
    assert!(
        matches!(snode.err("p1/4", 0), TinyAgentsError::ToolFailed { .. }),
        "a safe call cannot nest an unsafe one"
    );
    assert_eq!(node.err("p1", 4).to_string(), "disk full");
    assert!(node.ok("p1", 5).is_error);
    node.ok("p1", 6);
    assert!(
        matches!(
            node.err("p1", 7),
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::ToolCalls,
                limit: 5,
                used: 5
            }
        ),
        "calls that ran (raised, reported an error, or succeeded) keep their slot"
    );
    assert_eq!(
        (run.budget.tool_calls, run.budget.nested_tool_calls),
        (1, 4)
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-17: a nested call that never ran (dropped with its parent while
/// it waited in admission for the concurrency gate) does not keep a slot.
#[tokio::test(start_paused = true)]
async fn nt_17_a_call_dropped_while_waiting_for_the_gate_gives_its_slot_back() {
    let node = Node::plain();
    let outer = Node::new(safe("outer").timeout(Duration::from_millis(30)));
    let quick = Node::new(safe("quick").timeout(Duration::from_millis(20)));
    let leaf = new_leaf();
    let model = one_turn(&[
        // p1/1 takes the exclusive side of the gate for 100 ms; p1 times out at 30 ms.
        (
            "outer",
            plan(vec![child(
                "node",
                with(plan(vec![]), "sleep_ms", json!(100)),
            )]),
        ),
        // p2/1 waits for the gate from 10 ms; p2 times out at 20 ms.
        (
            "quick",
            with(plan(vec![child("leaf", json!({}))]), "sleep_ms", json!(10)),
        ),
    ]);
    let (harness, _) = build(
        model,
        vec![node.tool(), outer.tool(), quick.tool(), t(&leaf)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(leaf.calls(), 0, "p2/1 never ran");
    // Every request that reaches the loop has its pair of events: p2/1 ends,
    // abandoned while it waited for the gate, when its parent settled.
    assert_eq!(nested_starts(&events), ["p1/1", "p2/1"]);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolFailed { call_id, error, .. }
            if call_id.as_str() == "p2/1" && error.starts_with("parent settled: ")
    )));
    assert_eq!(
        run.budget.nested_tool_calls, 1,
        "only p1/1 ran; p2/1 gave its slot back"
    );
}

/// rule NT-18: a spent cap is an error for the nested caller
/// (`LimitExceeded` plus `LimitReached { ToolCalls }`) whatever
/// `LimitBehavior` says.
#[tokio::test]
async fn nt_18_a_spent_cap_is_an_error_for_the_nested_caller_under_either_behavior() {
    for behavior in [LimitBehavior::Stop, LimitBehavior::Error] {
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, model) = build(
            one_turn(&[(
                "node",
                plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
            )]),
            vec![node.tool(), t(&leaf)],
            |b| b.limits(nesting(3).with_max_tool_calls(2).with_behavior(behavior)),
        );
        let (run, events) = run_checked(&harness).await;
        node.ok("p1", 0);
        let error = node.err("p1", 1);
        assert_eq!(
            error,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::ToolCalls,
                limit: 2,
                used: 2
            },
            "{behavior:?}"
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                AgentEvent::LimitReached {
                    kind: LimitKind::ToolCalls,
                    limit: 2,
                    used: 2
                }
            )),
            "{behavior:?}"
        );
        assert_eq!(failed_error(&events, "p1/2"), error.to_string());
        assert_eq!(leaf.calls(), 1);
        assert_eq!(
            model.calls(),
            2,
            "the parent's result went back to the model ({behavior:?})"
        );
        assert_eq!(run.final_text, "done");
    }
}
