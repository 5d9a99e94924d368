//! NT-39..NT-42: the runner and the concurrency gate.

use super::*;

/// rule NT-39: the runner is installed for exactly the calling call id, in
/// the task the loop polls: a context for another id, or a context built in
/// a spawned task, has no runner; a context for the calling id built in the
/// tool's own future has one; nested calls nest again.
#[tokio::test]
async fn nt_39_the_runner_is_scoped_to_the_calling_call_and_its_task() {
    let probe = scripted(spec("probe"), |call| async move {
        let run_id = call.run.run_id().clone();
        let cancel = call.run.cancellation().clone();
        let other = ToolRunContext::new(run_id.clone(), CallId::new("p9"), cancel.clone());
        let foreign = ToolExecutionContext::from_run_context(&other)
            .call_tool("leaf", json!({}))
            .await;
        let own = ToolRunContext::new(run_id.clone(), call.run.call_id().clone(), cancel.clone());
        let local = ToolExecutionContext::from_run_context(&own)
            .call_tool("leaf", json!({}))
            .await;
        let own_id = call.run.call_id().clone();
        let spawned = tokio::spawn(async move {
            let own = ToolRunContext::new(run_id, own_id, cancel);
            ToolExecutionContext::from_run_context(&own)
                .call_tool("leaf", json!({}))
                .await
        })
        .await
        .unwrap();
        let nested = call
            .harness
            .call_tool("node", plan(vec![child("leaf", json!({}))]))
            .await;
        Ok(ToolResult::text(
            json!([
                label(&Some(foreign)),
                label(&Some(local)),
                label(&Some(spawned)),
                label(&Some(nested))
            ])
            .to_string(),
        ))
    });
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("probe", json!({}))]),
        vec![t(&probe), node.tool(), t(&leaf)],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    let labels: Vec<Value> = serde_json::from_str(&answer(&run, "p1").0).unwrap();
    let outside =
        "nested tool calls are only available while the agent loop executes the calling tool";
    assert!(
        labels[0]["err"].as_str().unwrap().ends_with(outside),
        "another call id: {}",
        labels[0]
    );
    assert_eq!(
        labels[1]["ok"], "leaf {}",
        "the task-local runner of the calling id"
    );
    assert!(
        labels[2]["err"].as_str().unwrap().ends_with(outside),
        "a spawned task: {}",
        labels[2]
    );
    assert!(labels[3]["ok"].is_string(), "nests again: {}", labels[3]);
    assert_eq!(leaf.ids(), ["p1/1", "p1/2/1"]);
}

/// rule NT-40: concurrency-safe nested calls of one parent run together
/// under the shared side of the gate.
#[tokio::test(start_paused = true)]
async fn nt_40_safe_nested_calls_of_one_parent_overlap() {
    let node = Node::plain();
    let meet = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(3))),
    )
    .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let fan = with(
        plan(
            (0..3)
                .map(|i| child("meet", json!({"tag": i.to_string()})))
                .collect(),
        ),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", fan)]),
        vec![node.tool(), meet.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    for index in 0..3 {
        assert!(node.ok("p1", index).content.starts_with("met"), "{index}");
    }
    assert_eq!(meet.max_active.load(Ordering::SeqCst), 3);
}

/// rule NT-40: a `ToolMiddleware` that is not `concurrent_safe` makes every
/// nested call exclusive.
#[tokio::test(start_paused = true)]
async fn nt_40_an_exclusive_wrap_makes_nested_calls_exclusive() {
    for exclusive in [false, true] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let read = ProbeTool::new("read", true, Behaviour::Yield(5));
        let fan = with(
            plan(
                (0..3)
                    .map(|i| child("read", json!({"tag": i.to_string()})))
                    .collect(),
            ),
            "parallel",
            json!(true),
        );
        let mut wrap = Wrap::new("none", WrapMode::Observe, &log);
        Arc::get_mut(&mut wrap).unwrap().exclusive = exclusive;
        let (harness, _) = build(
            one_turn(&[("node", fan)]),
            vec![node.tool(), read.clone()],
            |b| b.tool_middleware(wrap),
        );
        run_checked(&harness).await;
        let expected = if exclusive { 1 } else { 3 };
        assert_eq!(
            read.max_active.load(Ordering::SeqCst),
            expected,
            "exclusive wrap: {exclusive}"
        );
    }
}

/// rule NT-40: unsafe nested calls are exclusive across the fan-outs of
/// concurrent parents, while their safe calls overlap.
#[tokio::test(start_paused = true)]
async fn nt_40_unsafe_nested_calls_of_concurrent_parents_do_not_overlap() {
    // Two concurrent parents (safe, model-issued) each fan out two writes.
    let snode = Node::new(safe("snode"));
    let write = ProbeTool::new("write", false, Behaviour::Yield(3));
    let fan = |p: &str| {
        let children = vec![
            child("write", json!({"tag": format!("{p}a")})),
            child("write", json!({"tag": format!("{p}b")})),
        ];
        with(plan(children), "parallel", json!(true))
    };
    let (harness, _) = build(
        one_turn(&[("snode", fan("1")), ("snode", fan("2"))]),
        vec![snode.tool(), write.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    for parent in ["p1", "p2"] {
        snode.ok(parent, 0);
        snode.ok(parent, 1);
    }
    assert_eq!(write.calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        write.max_active.load(Ordering::SeqCst),
        1,
        "{:?}",
        write.order.entries()
    );

    // Their safe nested calls share the gate: they meet at a barrier of 2.
    let snode = Node::new(safe("snode"));
    let meet = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(2))),
    )
    .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let (harness, _) = build(
        one_turn(&[
            ("snode", plan(vec![child("meet", json!({"tag": "1"}))])),
            ("snode", plan(vec![child("meet", json!({"tag": "2"}))])),
        ]),
        vec![snode.tool(), meet.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    assert_eq!(snode.ok("p1", 0).content, "met 1");
    assert_eq!(snode.ok("p2", 0).content, "met 2");
}

/// rule NT-40: unsafe nested calls are exclusive among themselves even when
/// their common parent is itself an unsafe nested call (its fan-out shares
/// the gate too).
#[tokio::test(start_paused = true)]
async fn nt_40_unsafe_children_of_an_exclusive_nested_parent_do_not_overlap() {
    let node = Node::plain();
    let write = ProbeTool::new("write", false, Behaviour::Yield(3));
    let inner = with(
        plan(vec![
            child("write", json!({"tag": "a"})),
            child("write", json!({"tag": "b"})),
        ]),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("node", inner)]))]),
        vec![node.tool(), write.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    node.ok("p1/1", 0);
    node.ok("p1/1", 1);
    assert_eq!(
        write.max_active.load(Ordering::SeqCst),
        1,
        "{:?}",
        write.order.entries()
    );
}

/// rule NT-40: an exclusive nested holder's own nested call completes while
/// another writer waits for the gate (it runs under its parent's hold: no
/// deadlock); so does a shared holder's safe child.
#[tokio::test(start_paused = true)]
async fn nt_40_a_holders_child_completes_while_a_writer_waits() {
    for holder in ["node", "snode"] {
        let node = Node::plain();
        let snode = Node::new(safe("snode"));
        let write = ProbeTool::new("write", false, Behaviour::Yield(1));
        let leaf = new_leaf();
        // p1 -> holder p1/1 (exclusive or shared hold) -> after 10 ms, leaf p1/1/1
        // p2 -> after 5 ms, write p2/1 (waits for the gate)
        let held = with(plan(vec![child("leaf", json!({}))]), "sleep_ms", json!(10));
        let model = one_turn(&[
            ("snode", plan(vec![child(holder, held)])),
            (
                "snode",
                with(
                    plan(vec![child("write", json!({"tag": "w"}))]),
                    "sleep_ms",
                    json!(5),
                ),
            ),
        ]);
        let (harness, _) = build(
            model,
            vec![node.tool(), snode.tool(), write.clone(), t(&leaf)],
            |b| b.limits(nesting(3).with_tool_timeout(Some(Duration::from_secs(30)))),
        );
        let (run, _) = tokio::time::timeout(Duration::from_secs(60), run_checked(&harness))
            .await
            .expect("no deadlock");
        let outer = if holder == "node" { &node } else { &snode };
        assert_eq!(
            outer.ok("p1/1", 0).content,
            "leaf {}",
            "{holder}: the holder's child ran"
        );
        snode.ok("p1", 0);
        assert_eq!(
            snode.ok("p2", 0).content,
            "ok w",
            "{holder}: the waiting writer ran after"
        );
        assert_eq!(leaf.ids(), ["p1/1/1"]);
        assert!(run.status == RunStatus::Completed);
    }
}

/// rule NT-41: a concurrency-safe nested call that calls an unsafe tool is
/// refused (a shared hold cannot be upgraded); a safe model-issued parent
/// is not a nested call and may.
#[tokio::test]
async fn nt_41_a_safe_nested_call_cannot_call_an_unsafe_tool() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = one_turn(&[
        (
            "node",
            plan(vec![child(
                "snode",
                plan(vec![child("write", json!({})), child("leaf", json!({}))]),
            )]),
        ),
        ("snode", plan(vec![child("write", json!({}))])),
    ]);
    let (harness, _) = build(
        model,
        vec![node.tool(), snode.tool(), t(&write), t(&new_leaf())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let error = snode.err("p1/1", 0);
    let TinyAgentsError::ToolFailed { tool, message, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(tool, "write");
    assert!(
        message.contains("'write'") && message.contains("shared hold cannot be upgraded"),
        "{message}"
    );
    assert_eq!(failed_error(&events, "p1/1/1"), error.to_string());
    snode.ok("p1/1", 1);
    assert_eq!(snode.ok("p2", 0).content, "written");
    assert_eq!(write.ids(), ["p2/1"]);
    assert_eq!(
        run.budget.nested_tool_calls, 3,
        "snode, leaf and p2's write: the refused write released its slot"
    );
}

/// rule NT-42: the gate covers nested calls only: a nested unsafe call may
/// overlap a model-issued sibling of its parent's batch.
#[tokio::test(start_paused = true)]
async fn nt_42_the_gate_does_not_serialise_against_model_issued_siblings() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let snode = Node::new(safe("snode"));
    let nested_write = ProbeTool::new("nested_write", false, Behaviour::Barrier(barrier.clone()))
        .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let sibling = ProbeTool::new("sibling", true, Behaviour::Barrier(barrier))
        .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let model = one_turn(&[
        (
            "snode",
            plan(vec![child("nested_write", json!({"tag": "n"}))]),
        ),
        ("sibling", json!({"tag": "s"})),
    ]);
    let (harness, _) = build(
        model,
        vec![snode.tool(), nested_write.clone(), sibling],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(
        snode.ok("p1", 0).content,
        "met n",
        "the nested write overlapped the model-issued sibling"
    );
    assert_eq!(answer(&run, "p2"), ("met s".to_owned(), false));
}
