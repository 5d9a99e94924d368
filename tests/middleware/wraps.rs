//! Wraps and parallel execution: overlap, exclusive wraps, retry and timeout
//! wraps.

use super::*;

/// A concurrency-safe wrap does not serialise parallel calls: 100
/// concurrency-safe calls of one turn all meet at a barrier of 100 inside
/// the tool (a timeout turns a regression into a failure), and the wrap
/// itself holds all 100 at once.
#[tokio::test(start_paused = true)]
async fn a_wrap_lets_100_concurrency_safe_calls_overlap() {
    const N: usize = 100;
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let probe = ProbeTool::new("meet", true, Behaviour::Barrier(barrier));
    let calls: Vec<_> = (0..N).map(|i| probe_call("meet", &i.to_string())).collect();
    let model = script(vec![turn(&calls), done()]);
    let layer = Arc::new(Layer::new("counting"));
    let limits = RunLimits::default()
        .with_max_parallel_calls(N as u32)
        .with_tool_timeout(Some(Duration::from_secs(5)));
    let harness = build(&model, &[probe.clone()], |b| {
        b.limits(limits).tool_middleware(layer.clone())
    });
    let run = harness.run("go").await.unwrap();
    let results = tool_results(&run.messages);
    assert_eq!(results.len(), N);
    assert!(
        results.iter().all(|(_, c, e)| c.starts_with("met ") && !e),
        "{:?}",
        results.iter().find(|r| r.2)
    );
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        N,
        "every call ran at once"
    );
    assert_eq!(
        layer.max_active.load(Ordering::SeqCst),
        N,
        "the wrap held every call at once"
    );
    assert_eq!(layer.seen.load(Ordering::SeqCst), N);
}

/// A wrap whose concurrent_safe() is false makes concurrency-safe calls run
/// one at a time, in call order.
#[tokio::test(start_paused = true)]
async fn an_exclusive_wrap_makes_concurrency_safe_calls_run_one_at_a_time() {
    const N: usize = 100;
    let probe = ProbeTool::new("read", true, Behaviour::Yield(3));
    let calls: Vec<_> = (0..N).map(|i| probe_call("read", &i.to_string())).collect();
    let model = script(vec![turn(&calls), done()]);
    let layer = Arc::new(Layer::new("exclusive").exclusive());
    let limits = RunLimits::default().with_max_parallel_calls(N as u32);
    let harness = build(&model, &[probe.clone()], |b| {
        b.limits(limits).tool_middleware(layer.clone())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(tool_results(&run.messages).len(), N);
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 1);
    assert_eq!(layer.max_active.load(Ordering::SeqCst), 1);
    let expected: Vec<String> = (0..N)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(probe.order.entries(), expected);
}

/// RetryWrap: a replay-safe tool that fails once is retried and succeeds;
/// the host sees one start and one completion.
#[tokio::test(start_paused = true)]
async fn retry_wrap_retries_a_replay_safe_tool_that_fails_once() {
    let tool = StepTool::new(
        plain_spec("lookup").replay(ToolReplay::Safe),
        vec![Step::Fail, Step::Ok],
    );
    let model = script(vec![call("lookup", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(3)))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("lookup".into(), "ok".into(), false)]
    );
    assert_eq!(tool.attempts(), [0, 1]);
    assert_one_terminal_per_start(&events);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolCompleted {
            is_error: false,
            ..
        }
    )));
}

/// RetryWrap: a `ToolReplay::Never` tool that fails is not retried; its
/// failure goes to the model.
#[tokio::test(start_paused = true)]
async fn retry_wrap_does_not_retry_a_tool_that_must_not_replay() {
    let tool = StepTool::new(
        plain_spec("pay").replay(ToolReplay::Never),
        vec![Step::Fail, Step::Ok],
    );
    let model = script(vec![call("pay", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(3)))
            .include_detailed_errors(true)
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("pay".into(), "flaky backend".into(), true)]
    );
    assert_eq!(tool.attempts(), [0]);
}

/// RetryWrap registered outside TimeoutWrap retries a replay-safe call that
/// timed out.
#[tokio::test(start_paused = true)]
async fn retry_wrap_outside_timeout_wrap_retries_a_timeout() {
    let tool = StepTool::new(
        plain_spec("lookup").replay(ToolReplay::Safe),
        vec![Step::Sleep(Duration::from_secs(30)), Step::Ok],
    );
    let model = script(vec![call("lookup", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(2)))
            .tool_middleware(Arc::new(TimeoutWrap::new(Duration::from_secs(1))))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("lookup".into(), "ok".into(), false)]
    );
    assert_eq!(tool.attempts(), [0, 1]);
}

/// TimeoutWrap: a call slower than its bound fails with a timeout result the
/// model reads, and the run goes on.
#[tokio::test(start_paused = true)]
async fn timeout_wrap_fails_a_slow_call_and_the_run_goes_on() {
    let slow = ProbeTool::new("slow", false, Behaviour::Sleep(Duration::from_secs(60)));
    let model = script(vec![call("slow", "a"), done()]);
    let harness = build(&model, &[slow], |b| {
        b.tool_middleware(Arc::new(TimeoutWrap::new(Duration::from_secs(1))))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        read_by_model(&model),
        vec![("slow".into(), "'slow' timed out after 1000 ms".into(), true)]
    );
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolFailed { error, .. } if error == "'slow' timed out after 1000 ms")));
    assert_one_terminal_per_start(&events);
}

/// TimeoutWrap: a per-tool bound overrides the default, a fast call passes,
/// and each tool is told its bound in `ToolCallOptions::timeout`.
#[tokio::test(start_paused = true)]
async fn timeout_wrap_per_tool_bounds_override_the_default_and_reach_the_tool() {
    let quick = StepTool::new(
        plain_spec("quick"),
        vec![Step::Sleep(Duration::from_millis(500))],
    );
    let other = StepTool::new(
        plain_spec("other"),
        vec![Step::Sleep(Duration::from_secs(2))],
    );
    let model = script(vec![
        turn(&[probe_call("quick", "a"), probe_call("other", "b")]),
        done(),
    ]);
    let wrap = TimeoutWrap::new(Duration::from_secs(5)).with_tool("quick", Duration::from_secs(1));
    let harness = build(&model, &[quick.clone(), other.clone()], |b| {
        b.tool_middleware(Arc::new(wrap))
    });
    let run = harness.run("go").await.unwrap();
    assert!(
        tool_results(&run.messages)
            .iter()
            .all(|(_, c, e)| c == "ok" && !e)
    );
    assert_eq!(quick.timeouts(), [Some(Duration::from_secs(1))]);
    assert_eq!(other.timeouts(), [Some(Duration::from_secs(5))]);
}

/// A layer that records the arguments it is lent, under its name, and runs
/// them as they are; with `rewrite`, calls whose `n` is even run a changed
/// copy that says so.
struct Recording {
    name: &'static str,
    rewrite: bool,
    seen: Arc<Log>,
}

#[async_trait]
impl ToolMiddleware for Recording {
    fn name(&self) -> &str {
        self.name
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        self.seen.push(format!("{} {}", self.name, call.arguments));
        if self.rewrite && call.arguments["n"].as_u64().is_some_and(|n| n % 2 == 0) {
            let mut changed = call.clone();
            changed.arguments["by"] = json!("wrap");
            return next.run(ctx, &changed).await;
        }
        next.run(ctx, call).await
    }
}

/// Issue 32 (wrap layers are lent the call): a layer that rewrites runs
/// its changed copy, which the layers inside it and the tool receive; a
/// layer that only looks runs the call as it was lent. The transcript's
/// assistant message keeps what the model sent for every call of a
/// parallel turn (nothing reads the transcript during it, so its
/// arguments are lent to the calls and given back).
#[tokio::test]
async fn a_wrap_layer_is_lent_the_call_and_runs_a_changed_copy_when_it_rewrites() {
    let echo = FnTool::new("echo", "Echoes its arguments.", |args: Value| async move {
        anyhow::Ok(args.to_string())
    })
    .map_spec(ToolSpec::read_only);
    let sent: Vec<(String, Value)> = (0..4)
        .map(|n| ("echo".to_owned(), json!({"n": n})))
        .collect();
    let model = script(vec![turn(&sent), done()]);
    let seen = Arc::new(Log::default());
    let harness = AgentHarness::builder(model.clone())
        .limits(RunLimits::default().with_max_parallel_calls(4))
        .tool_middleware(Arc::new(Recording {
            name: "outer",
            rewrite: true,
            seen: seen.clone(),
        }))
        .tool_middleware(Arc::new(Recording {
            name: "inner",
            rewrite: false,
            seen: seen.clone(),
        }))
        .tool(echo)
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    let results: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, content, is_error)| {
            assert!(!is_error, "{content}");
            content
        })
        .collect();
    assert_eq!(
        results,
        [
            r#"{"by":"wrap","n":0}"#,
            r#"{"n":1}"#,
            r#"{"by":"wrap","n":2}"#,
            r#"{"n":3}"#
        ]
    );
    let mut seen = seen.entries();
    seen.sort();
    assert_eq!(
        seen,
        [
            r#"inner {"by":"wrap","n":0}"#,
            r#"inner {"by":"wrap","n":2}"#,
            r#"inner {"n":1}"#,
            r#"inner {"n":3}"#,
            r#"outer {"n":0}"#,
            r#"outer {"n":1}"#,
            r#"outer {"n":2}"#,
            r#"outer {"n":3}"#,
        ]
    );
    let assistant: Vec<Value> = run
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                Some(tool_calls.iter().map(|c| c.arguments.clone()).collect())
            }
            _ => None,
        })
        .expect("the turn's assistant message");
    assert_eq!(
        assistant,
        (0..4).map(|n| json!({"n": n})).collect::<Vec<_>>()
    );
}
