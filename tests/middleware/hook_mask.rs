//! Issue 32: a middleware's provided (do-nothing) hooks are built once and
//! then skipped (the harness marks each as it notes itself), while a hook
//! a middleware implements runs on every call, on every run, also when it
//! awaits another middleware's provided hook, and redaction keeps
//! scrubbing through pass-through middlewares.

use super::*;

/// Counts how often the harness asks its name: it does so only around a
/// hook it builds, so a pass-through's count stops growing once its
/// provided hooks are marked.
struct PassThrough {
    names: AtomicUsize,
}

#[async_trait]
impl Middleware for PassThrough {
    fn name(&self) -> &str {
        self.names.fetch_add(1, Ordering::SeqCst);
        "pass-through"
    }
}

/// Implements `before_tool` only, by awaiting a pass-through's provided
/// `before_tool` and counting.
struct Counting {
    inner: PassThrough,
    before_tool: AtomicUsize,
}

#[async_trait]
impl Middleware for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.before_tool.fetch_add(1, Ordering::SeqCst);
        self.inner.before_tool(ctx, state, call).await
    }
}

fn two_calls() -> Vec<ChatResponse> {
    vec![
        turn(&[probe_call("echo", "a")]),
        turn(&[probe_call("echo", "b")]),
        ChatResponse::text("done"),
    ]
}

#[tokio::test]
async fn i32_provided_hooks_are_built_once_and_implemented_ones_on_every_call() {
    let pass = Arc::new(PassThrough {
        names: AtomicUsize::new(0),
    });
    let counting = Arc::new(Counting {
        inner: PassThrough {
            names: AtomicUsize::new(0),
        },
        before_tool: AtomicUsize::new(0),
    });
    let tool = read_tool("echo");
    // Three runs of one harness (the marks live with the harness), two
    // model-issued calls each.
    let model = script((0..3).flat_map(|_| two_calls()).collect());
    let harness = build(&model, &[tool.clone()], |b| {
        b.middleware(pass.clone()).middleware(counting.clone())
    });
    let mut names_after = Vec::new();
    for run in 1..=3 {
        let result = harness.run("go").await.unwrap();
        assert_eq!(result.status, RunStatus::Completed);
        names_after.push(pass.names.load(Ordering::SeqCst));
        // Implemented: once per model-issued call, every run, though it
        // awaits the provided hook of the middleware it holds.
        assert_eq!(counting.before_tool.load(Ordering::SeqCst), 2 * run);
    }
    // The pass-through's hooks were built in the first run only.
    assert!(names_after[0] > 0);
    assert_eq!(names_after, [names_after[0]; 3]);
    assert_eq!(tool.calls.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn i32_a_pass_through_costs_nothing_after_its_hooks_are_marked() {
    let pass = Arc::new(PassThrough {
        names: AtomicUsize::new(0),
    });
    let tool = read_tool("echo");
    let model = script(
        (0..6)
            .map(|i| turn(&[probe_call("echo", &i.to_string())]))
            .chain([ChatResponse::text("done")])
            .collect(),
    );
    let harness = build(&model, &[tool.clone()], |b| b.middleware(pass.clone()));
    let result = harness.run("go").await.unwrap();
    assert_eq!(result.status, RunStatus::Completed);
    assert_eq!(tool.calls.load(Ordering::SeqCst), 6);
    // before_model, after_model, before_tool, after_tool are each built
    // once (the first model call and the first tool call), then skipped:
    // four builds whatever the number of calls.
    assert_eq!(pass.names.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn i32_redaction_still_scrubs_through_pass_through_middlewares_on_every_call() {
    const SECRET: &str = "sk-hookmask-0123456789";
    let pass = Arc::new(PassThrough {
        names: AtomicUsize::new(0),
    });
    let tool = read_tool("echo");
    let model = script(
        (0..3)
            .map(|_| turn(&[probe_call("echo", SECRET)]))
            .chain([ChatResponse::text("done")])
            .collect(),
    );
    let harness = build(&model, &[tool.clone()], |b| {
        b.middleware(pass.clone())
            .middleware(Arc::new(RedactionMiddleware::with_redactor(
                Redactor::new().with_secret(SECRET),
            )))
            .middleware(pass.clone())
            .payload_capture(PayloadCapture::all())
    });
    let (result, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let result = result.unwrap();
    assert_eq!(tool.calls.load(Ordering::SeqCst), 3);
    assert!(!events_text(&events).contains(SECRET));
    let transcript = serde_json::to_string(&result.messages).unwrap();
    assert!(!transcript.contains(SECRET), "{transcript}");
}

/// Counts `after_tool` only, and marks each result it sees.
struct AfterToolOnly {
    after_tool: AtomicUsize,
}

#[async_trait]
impl Middleware for AfterToolOnly {
    fn name(&self) -> &str {
        "after-tool-only"
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _call: &ToolCall,
        result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.after_tool.fetch_add(1, Ordering::SeqCst);
        result.content.push_str(" [seen]");
        Ok(())
    }
}

/// The seams of the mask: the marks live with the harness, so a resumed
/// segment of the same harness skips the provided hooks its first segment
/// marked, while the one hook the middleware implements still runs on the
/// approved call (and rewrites what the model reads).
#[tokio::test]
async fn i32_an_implemented_hook_runs_after_a_resume_though_the_provided_ones_are_marked() {
    let counting = Arc::new(AfterToolOnly {
        after_tool: AtomicUsize::new(0),
    });
    let read = read_tool("echo");
    let deploy = deploy_tool();
    let model = script(vec![
        turn(&[probe_call("echo", "a")]),
        turn(&[probe_call("deploy", "prod")]),
        ChatResponse::text("done"),
    ]);
    let harness = build(&model, &[read.clone(), deploy.clone()], |b| {
        b.middleware(counting.clone())
    });
    let first = harness.run("go").await.unwrap();
    assert_eq!(first.status, RunStatus::AwaitingApproval);
    assert_eq!(counting.after_tool.load(Ordering::SeqCst), 1);
    let suspended = first.suspended.clone().expect("suspended");
    let decisions: Vec<ApprovalDecision> = suspended.pending().map(|p| p.approve()).collect();
    let resumed = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(calls_of(&deploy), 1);
    assert_eq!(counting.after_tool.load(Ordering::SeqCst), 2);
    let results = tool_results(&resumed.messages);
    assert!(
        results
            .iter()
            .all(|(_, content, _)| content.ends_with(" [seen]")),
        "{results:?}"
    );
}
