//! NT-19, NT-21..NT-23: observation, the refusal quota, cancellation and
//! reported failures.

use super::*;

/// rule NT-19: `observe_nested_result` runs on every middleware, in order,
/// after a nested call produced a result (including one reporting its own
/// failure); not for refused or raised calls, nor for model-issued ones; it
/// cannot rewrite the result.
#[tokio::test]
async fn nt_19_observe_nested_result_sees_every_result_and_nothing_else() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("reports", json!({})),
        child("ghost", json!({})),
        child("raises", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf()), t(&reports()), t(&raises())],
        |b| {
            b.middleware(Arc::new(Recorder::new("a", &log)))
                .middleware(Arc::new(Recorder::new("b", &log)))
        },
    );
    run_checked(&harness).await;
    let observed: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.contains(" observe "))
        .collect();
    assert_eq!(
        observed,
        [
            "a observe p1/1 leaf {} is_error=false",
            "b observe p1/1 leaf {} is_error=false",
            "a observe p1/2 no such file is_error=true",
            "b observe p1/2 no such file is_error=true",
        ]
    );
    assert_eq!(
        node.ok("p1", 0).content,
        "leaf {}",
        "the parent gets the result unchanged"
    );
}

/// A middleware that refuses every nested call of `blocked`, counting how
/// often it is asked.
fn counting_refuser(log: &Arc<Log>) -> Arc<Recorder> {
    Arc::new(Recorder::new("refuser", log).refusing("blocked"))
}

/// rule NT-21: a parent gets at most 8 refused nested calls; every later
/// call is refused without being evaluated; the quota is per immediate
/// parent.
#[tokio::test]
async fn nt_21_a_parent_gets_eight_refusals_then_calls_are_refused_unevaluated() {
    let log = Arc::new(Log::default());
    let refuser = counting_refuser(&log);
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let mut children: Vec<Value> = (0..10).map(|_| child("blocked", json!({}))).collect();
    children.push(child("leaf", json!({})));
    let model = vec![
        ScriptedModel::tool_call("node", plan(children)),
        ScriptedModel::tool_call(
            "node",
            plan(vec![child("blocked", json!({})), child("leaf", json!({}))]),
        ),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf), t(&blocked)], |b| {
        b.middleware(refuser.clone())
    });
    let (run, events) = run_checked(&harness).await;
    let outcomes = node.outcomes("p1");
    for (index, outcome) in outcomes.iter().enumerate().take(8) {
        assert!(
            matches!(outcome, Some(Err(TinyAgentsError::Denied { .. }))),
            "{index}: {outcome:?}"
        );
    }
    for (index, tool) in [(8, "blocked"), (9, "blocked"), (10, "leaf")] {
        let error = node.err("p1", index);
        assert_eq!(
            error,
            TinyAgentsError::NestedRefusalCap {
                tool: tool.into(),
                parent: CallId::new("p1"),
                cap: 8
            }
        );
        assert!(
            error.to_string().contains("refused without evaluation"),
            "{error}"
        );
    }
    // p1's calls were evaluated 8 times; p2 (another parent) is evaluated again.
    assert_eq!(refuser.checks(), 8 + 2);
    assert!(matches!(node.err("p2", 0), TinyAgentsError::Denied { .. }));
    node.ok("p2", 1);
    assert_eq!(leaf.ids(), ["p2/2"]);
    assert_eq!(
        nested_starts(&events).len(),
        13,
        "every refused call has its events"
    );
    assert_eq!(summary(&run, "p1").len(), 11);
    assert!(summary(&run, "p1").iter().all(|e| e["status"] == "failed"));
}

/// rule NT-21: the quota belongs to the immediate parent: a nested parent's
/// refusals do not count against its own parent.
#[tokio::test]
async fn nt_21_the_refusal_quota_is_per_immediate_parent() {
    let log = Arc::new(Log::default());
    let refuser = counting_refuser(&log);
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let eight = || {
        (0..8)
            .map(|_| child("blocked", json!({})))
            .collect::<Vec<_>>()
    };
    let mut children: Vec<Value> = vec![child("node", plan(eight())), child("node", plan(eight()))];
    children.push(child("leaf", json!({})));
    let (harness, _) = build(
        one_turn(&[("node", plan(children))]),
        vec![node.tool(), t(&leaf), t(&blocked)],
        |b| b.middleware(refuser.clone()),
    );
    run_checked(&harness).await;
    // p1's three calls, and eight refusals under each nested parent.
    assert_eq!(
        refuser.checks(),
        3 + 8 + 8,
        "each nested parent has its own quota"
    );
    node.ok("p1", 2);
    assert_eq!(leaf.ids(), ["p1/3"]);
}

/// rule NT-22: a cancelled run refuses the next nested call.
#[tokio::test]
async fn nt_22_a_cancelled_run_refuses_the_next_nested_call() {
    // The tool cancels the run, then calls: whether the loop services that
    // call before it stops the batch depends on the order it polls in, so
    // the scenario runs several times; when the call is serviced it is
    // refused, and it never runs.
    let mut observed = 0;
    for _ in 0..32 {
        let node = Node::plain();
        let leaf = new_leaf();
        let tree = with(plan(vec![child("leaf", json!({}))]), "cancel", json!(true));
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&leaf)],
            |b| b,
        );
        let token = CancellationToken::new();
        let (run, events) =
            run_collecting(&harness, RunRequest::new("go").with_cancellation(token)).await;
        let run = run.unwrap();
        assert_one_terminal_per_start(&events);
        assert_transcript_paired(&run.messages);
        assert_eq!(run.status, RunStatus::Cancelled);
        assert_eq!(leaf.calls(), 0, "the nested call never ran");
        if let Some(outcome) = node.outcomes("p1").first() {
            let Some(Err(error)) = outcome else {
                panic!("{outcome:?}")
            };
            assert!(error.to_string().contains("cancelled"), "{error}");
            observed += 1;
        }
        for id in nested_starts(&events) {
            assert!(failed_error(&events, &id).contains("cancelled"), "{id}");
        }
    }
    assert!(observed > 0, "the refusal was never observed");
}

/// rule NT-22: dropping the parent (the run is cancelled) drops its
/// in-flight nested calls, which end with "parent settled: ...".
#[tokio::test(start_paused = true)]
async fn nt_22_cancelling_the_run_drops_in_flight_nested_calls() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(60)));
    let tree = plan(vec![child(
        "node",
        plan(vec![child("slow", json!({"tag": "inner"}))]),
    )]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let token = CancellationToken::new();
    let canceller = {
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            token.cancel();
        }
    };
    let ((run, events), ()) = tokio::join!(
        run_collecting(&harness, RunRequest::new("go").with_cancellation(token)),
        canceller
    );
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_one_terminal_per_start(&events);
    assert_parent_ids_consistent(&events);
    assert_eq!(
        slow.order.entries(),
        ["start inner"],
        "the nested tool's future was dropped"
    );
    for id in ["p1/1", "p1/1/1"] {
        assert!(
            failed_error(&events, id).starts_with("parent settled: "),
            "{id}: {}",
            failed_error(&events, id)
        );
    }
}

/// rule NT-23: a tool that reports its own failure is an `Ok` result; a
/// refusal is an `Err`, and a tool that forwards it with `?` is answered to
/// the model as `ToolFailed`, with the message verbatim.
#[tokio::test]
async fn nt_23_reported_failures_are_ok_and_forwarded_refusals_reach_the_model_verbatim() {
    let node = Node::plain();
    let forwarder = scripted(spec("forwarder"), |call| async move {
        let found = call.harness.call_tool("ghost", json!({})).await?;
        Ok(found)
    });
    let model = one_turn(&[
        ("node", plan(vec![child("reports", json!({}))])),
        ("forwarder", json!({})),
    ]);
    let (harness, model) = build(
        model,
        vec![node.tool(), t(&forwarder), t(&reports())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let reported = node.ok("p1", 0);
    assert!(reported.is_error);
    assert_eq!(reported.content, "no such file");
    assert!(matches!(
        terminal(&events, "p1/1"),
        AgentEvent::ToolCompleted { is_error: true, .. }
    ));
    assert_eq!(
        answer(&run, "p2"),
        ("tool not found: ghost".to_owned(), true)
    );
    assert_eq!(failed_error(&events, "p2"), "tool not found: ghost");
    let read = tool_results(&model.requests().last().unwrap().messages);
    assert_eq!(
        read[1],
        (
            "forwarder".to_owned(),
            "tool not found: ghost".to_owned(),
            true
        )
    );
}
