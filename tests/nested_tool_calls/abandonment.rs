//! NT-24, NT-25: dropped and abandoned calls, one terminal event per start.

use super::*;

/// rule NT-24: a tool that drops the `call_tool` future ends the nested call
/// with `ToolFailed("parent settled: ...")`, status `abandoned` in the
/// summary with its error even without `tool_io` capture; the nested tool
/// is dropped.
#[tokio::test(start_paused = true)]
async fn nt_24_a_dropped_call_tool_future_abandons_the_nested_call() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let tree = with(
        with(
            plan(vec![child("slow", json!({"tag": "x"}))]),
            "drop_after_ms",
            json!(100),
        ),
        "after_ms",
        json!(50),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert!(
        node.outcome("p1", 0).is_none(),
        "the parent stopped waiting"
    );
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    let abandoned = entry(&run, "p1", "p1/1");
    assert_eq!(abandoned["status"], "abandoned");
    assert!(
        abandoned["error"]
            .as_str()
            .unwrap()
            .starts_with("parent settled: "),
        "{abandoned}"
    );
    assert!(abandoned.get("args").is_none(), "no capture, no args");
    assert_eq!(
        slow.order.entries(),
        ["start x"],
        "the nested tool was dropped"
    );
    assert!(!answer(&run, "p1").1, "the parent itself succeeded");
}

/// rule NT-24: a parent that times out while its nested call is in flight
/// ends that call with `ToolFailed("parent settled: ...")`.
#[tokio::test(start_paused = true)]
async fn nt_24_a_parent_that_times_out_abandons_its_nested_call() {
    let node = Node::new(spec("node").timeout(Duration::from_secs(1)));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("slow", json!({"tag": "x"}))]))]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("'node' timed out after 1000 ms".to_owned(), true)
    );
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    assert_eq!(slow.order.entries(), ["start x"]);
}

/// rule NT-24: a parent that settles (returns) while a nested call it
/// started from a spawned task is still in flight ends that call with
/// `ToolFailed("parent settled: ...")`, and the waiting task gets that error.
#[tokio::test(start_paused = true)]
async fn nt_24_a_parent_that_settles_abandons_its_nested_call() {
    type Handle = tokio::task::JoinHandle<Result<ToolResult, TinyAgentsError>>;
    let detached: Arc<Mutex<Option<Handle>>> = Arc::default();
    let slot = Arc::clone(&detached);
    let spawner = scripted(spec("spawner"), move |call| {
        let slot = Arc::clone(&slot);
        async move {
            let harness = call.harness.clone();
            *slot.lock().unwrap() = Some(tokio::spawn(async move {
                harness.call_tool("slow", json!({"tag": "x"})).await
            }));
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(ToolResult::text("left early"))
        }
    });
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[("spawner", json!({}))]),
        vec![t(&spawner), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(answer(&run, "p1"), ("left early".to_owned(), false));
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    assert_eq!(entry(&run, "p1", "p1/1")["status"], "abandoned");
    let handle = detached.lock().unwrap().take().unwrap();
    let waited = handle.await.unwrap().unwrap_err();
    assert!(
        waited.to_string().starts_with("parent settled: "),
        "{waited}"
    );
    assert_eq!(slow.order.entries(), ["start x"]);
}

/// rule NT-24: a nested call still waiting in admission (here for the
/// concurrency gate) when its parent stops waiting and settles is dropped
/// with it: it never runs, and it ends with "parent settled: ..." and the
/// abandoned status in the parent's summary.
#[tokio::test(start_paused = true)]
async fn nt_24_a_nested_call_waiting_for_the_gate_is_dropped_with_its_parent() {
    let holder = Node::new(safe("holder"));
    let quitter = Node::new(safe("quitter"));
    let hold = ProbeTool::new("hold", false, Behaviour::Sleep(Duration::from_millis(100)));
    let late = ProbeTool::new("late", false, Behaviour::Yield(0));
    let model = one_turn(&[
        (
            "holder",
            with(
                plan(vec![child("hold", json!({"tag": "h"}))]),
                "after_ms",
                json!(500),
            ),
        ),
        (
            "quitter",
            with(
                with(
                    plan(vec![child("late", json!({"tag": "l"}))]),
                    "sleep_ms",
                    json!(10),
                ),
                "drop_after_ms",
                json!(10),
            ),
        ),
    ]);
    let (harness, _) = build(
        model,
        vec![holder.tool(), quitter.tool(), hold.clone(), late.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    holder.ok("p1", 0);
    assert!(
        quitter.outcome("p2", 0).is_none(),
        "the quitter stopped waiting"
    );
    assert_eq!(
        late.calls.load(Ordering::SeqCst),
        0,
        "a call whose parent settled must not run"
    );
    let abandoned = entry(&run, "p2", "p2/1");
    assert_eq!(abandoned["status"], "abandoned", "{abandoned}");
    assert!(failed_error(&events, "p2/1").starts_with("parent settled: "));
}

/// rule NT-25: every nested `ToolStarted` has exactly one terminal event,
/// whatever way the call ends (ok, reported error, refusal, raise, timeout,
/// depth, abandonment), at every level.
#[tokio::test(start_paused = true)]
async fn nt_25_every_nested_start_has_exactly_one_terminal_event() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)))
        .with_spec(|s| s.timeout(Duration::from_millis(500)));
    let write = ProbeTool::new("write", false, Behaviour::Yield(1));
    let deep = plan(vec![child(
        "node",
        plan(vec![child("node", plan(vec![child("leaf", json!({}))]))]),
    )]);
    let dropper = with(
        plan(vec![child("slow", json!({})), child("leaf", json!({}))]),
        "drop_after_ms",
        json!(100),
    );
    let tree = with(
        plan(vec![
            child("leaf", json!({})),
            child("reports", json!({})),
            child("ghost", json!({})),
            child("raises", json!({})),
            child("slow", json!({})),
            child("node", deep),
            child("node", dropper),
            child(
                "snode",
                plan(vec![child("write", json!({})), child("leaf", json!({}))]),
            ),
        ]),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            snode.tool(),
            t(&new_leaf()),
            t(&reports()),
            t(&raises()),
            slow,
            write,
        ],
        |b| b.limits(nesting(3)),
    );
    let (_, events) = run_checked(&harness).await;
    let starts = nested_starts(&events);
    assert!(starts.len() >= 14, "{starts:?}");
    for id in &starts {
        let ends = events
            .iter()
            .filter(|e| e.is_tool_terminal() && e.call_id().is_some_and(|c| c.as_str() == id))
            .count();
        assert_eq!(ends, 1, "{id}");
    }
}

/// rule NT-25: the pairing holds when the run is cancelled while a refused
/// nested call's events wait for a slow consumer (an event buffer of one):
/// a refused call's `ToolStarted` is never left without its `ToolFailed`.
#[tokio::test(start_paused = true)]
async fn nt_25_refused_calls_keep_their_terminal_event_when_cancelled_under_backpressure() {
    let mut broken = Vec::new();
    for cancel_at_ms in 0u64..20 {
        let node = Node::plain();
        let children: Vec<Value> = (0..5).map(|_| child("ghost", json!({}))).collect();
        let tree = with(plan(children), "parallel", json!(true));
        let (harness, _) = build(one_turn(&[("node", tree)]), vec![node.tool()], |b| b);
        let (sink, mut receiver) = event_channel(1);
        let consumer = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = receiver.recv().await {
                tokio::time::sleep(Duration::from_millis(1)).await;
                seen.push(event);
            }
            seen
        });
        let token = CancellationToken::new();
        let canceller = {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(cancel_at_ms)).await;
                token.cancel();
            })
        };
        let request = RunRequest::new("go").with_cancellation(token);
        let finished =
            tokio::time::timeout(Duration::from_secs(600), harness.run_with(request, &sink)).await;
        assert!(
            finished.is_ok(),
            "cancelled at {cancel_at_ms} ms: the run hung"
        );
        drop(sink);
        canceller.await.unwrap();
        let events = consumer.await.unwrap();
        for id in nested_starts(&events) {
            let ends = events
                .iter()
                .filter(|e| e.is_tool_terminal() && e.call_id().is_some_and(|c| c.as_str() == id))
                .count();
            if ends != 1 {
                broken.push(format!(
                    "cancelled at {cancel_at_ms} ms: {id} has {ends} terminal events"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}
