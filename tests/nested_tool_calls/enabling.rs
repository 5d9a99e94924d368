//! NT-01..NT-05: enabling, depth, the seam.

use super::*;

/// rule NT-01: nesting is off by default: `max_nested_depth` is 0 and
/// `call_tool` fails with "nested tool calls are disabled (max_nested_depth = 0)".
#[tokio::test]
async fn nt_01_nesting_is_off_by_default() {
    assert_eq!(RunLimits::default().max_nested_depth(), 0);
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("leaf", json!({}))]))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(RunLimits::default()),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    let error = node.err("p1", 0);
    assert_eq!(
        error,
        TinyAgentsError::NestedDisabled {
            tool: "leaf".into()
        }
    );
    assert!(
        error
            .to_string()
            .contains("nested tool calls are disabled (max_nested_depth = 0)"),
        "{error}"
    );
    assert!(
        error.to_string().contains("'leaf'"),
        "the error names the tool: {error}"
    );
    assert_eq!(leaf.calls(), 0);
    assert!(nested_starts(&events).is_empty());
    assert_eq!(run.budget.nested_tool_calls, 0);
}

/// rule NT-02: `with_max_nested_depth(n)` enables up to n levels; the
/// model's call is level 0, what its tool calls is level 1, and so on.
#[tokio::test]
async fn nt_02_with_max_nested_depth_enables_n_levels() {
    for depth in [1u32, 2, 3] {
        let node = Node::plain();
        let leaf = new_leaf();
        // p1 (level 0) -> leaf p1/1 (level 1), node p1/2 (level 1) -> leaf p1/2/1 (level 2)
        let tree = plan(vec![
            child("leaf", json!({})),
            child("node", plan(vec![child("leaf", json!({}))])),
        ]);
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&leaf)],
            |b| b.limits(nesting(depth)),
        );
        assert_eq!(harness.limits().max_nested_depth(), depth);
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(
            node.ok("p1", 0).content,
            "leaf {}",
            "level 1 runs with depth {depth}"
        );
        node.ok("p1", 1);
        let grandchild = node.outcome("p1/2", 0);
        if depth >= 2 {
            assert!(
                matches!(grandchild, Some(Ok(_))),
                "level 2 runs with depth {depth}: {grandchild:?}"
            );
            assert_eq!(leaf.ids(), ["p1/1", "p1/2/1"]);
        } else {
            assert!(
                matches!(
                    grandchild,
                    Some(Err(TinyAgentsError::NestedDepthExceeded { .. }))
                ),
                "{grandchild:?}"
            );
            assert_eq!(leaf.ids(), ["p1/1"]);
        }
    }
}

/// rule NT-03: a call whose level exceeds the cap fails with
/// "nested call '<name>' exceeds max_nested_depth (<n>)"; the cap is
/// distinct from `max_depth` (sub-agent recursion).
#[tokio::test]
async fn nt_03_a_call_past_the_cap_fails_with_the_depth_error() {
    let chain = |levels: usize| {
        let mut tree = plan(vec![child("leaf", json!({}))]);
        for _ in 1..levels {
            tree = plan(vec![child("node", tree)]);
        }
        tree
    };
    // max_nested_depth 2: p1 -> p1/1 -> p1/1/1 -> p1/1/1/1 (level 3) is refused.
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", chain(3))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(nesting(2).with_max_depth(10)),
    );
    let (_, events) = run_checked(&harness).await;
    let error = node.err("p1/1/1", 0);
    assert_eq!(
        error,
        TinyAgentsError::NestedDepthExceeded {
            tool: "leaf".into(),
            depth: 3,
            max: 2
        }
    );
    assert_eq!(
        error.to_string(),
        "nested call 'leaf' exceeds max_nested_depth (2)"
    );
    assert_eq!(
        failed_error(&events, "p1/1/1/1"),
        "nested call 'leaf' exceeds max_nested_depth (2)"
    );
    assert_eq!(leaf.calls(), 0);

    // max_depth does not bound nested calls: 3 levels run under max_depth 0.
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", chain(3))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(nesting(3).with_max_depth(0)),
    );
    run_checked(&harness).await;
    assert_eq!(leaf.ids(), ["p1/1/1/1"]);
}

/// The specification's sample tool, verbatim but for the imports,
/// `#[async_trait]`, the parameter types, and the body the sample elides
/// with `// ...`.
struct SampleTool {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for SampleTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    // The sample's own layout, kept as the specification prints it.
    #[rustfmt::skip]
    async fn execute_with_context(&self, args: Value, _opts: ToolCallOptions, context: Option<&ToolRunContext>) -> anyhow::Result<ToolResult> {
        let harness = context
            .and_then(tools::ToolRunContext::host_extension)
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .expect("installed by the agent loop");
        let found = harness.call_tool("search", json!({"q": "tinyagents"})).await?;
        // ...
        Ok(ToolResult::text(format!("{} (asked with {args})", found.content)))
    }
}

fn sample_tool() -> Arc<SampleTool> {
    Arc::new(SampleTool {
        spec: spec("sample"),
    })
}

fn search_tool() -> Arc<Scripted> {
    scripted(safe("search"), |call| async move {
        Ok(ToolResult::text(format!(
            "found: {}",
            call.args["q"].as_str().unwrap_or("?")
        )))
    })
}

/// rule NT-04: a tool reaches the harness through
/// `ToolRunContext::host_extension` downcast to `ToolExecutionContext`: the
/// specification's sample compiles and works through the facade.
#[tokio::test]
async fn nt_04_the_specs_sample_reaches_the_harness_through_the_host_extension() {
    let search = search_tool();
    let model = one_turn(&[("sample", json!({}))]);
    let (harness, _) = build(
        model,
        vec![sample_tool() as Arc<dyn Tool>, t(&search)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("found: tinyagents (asked with {})".to_owned(), false)
    );
    assert_eq!(search.ids(), ["p1/1"]);
    assert_eq!(nested_starts(&events), ["p1/1"]);

    // With nesting off the same sample forwards the refusal with `?`.
    let (harness, _) = build(
        one_turn(&[("sample", json!({}))]),
        vec![sample_tool() as Arc<dyn Tool>, t(&search)],
        |b| b.limits(RunLimits::default()),
    );
    let (run, _) = run_checked(&harness).await;
    let (content, is_error) = answer(&run, "p1");
    assert!(is_error);
    assert!(
        content.contains("nested tool calls are disabled (max_nested_depth = 0)"),
        "{content}"
    );
}

/// rule NT-05: outside the agent loop `call_tool` returns `ToolFailed`
/// "cannot call tool '<name>' ...: nested tool calls are only available
/// while the agent loop executes the calling tool".
#[tokio::test]
async fn nt_05_outside_the_loop_call_tool_fails_with_the_quoted_error() {
    const TAIL: &str =
        ": nested tool calls are only available while the agent loop executes the calling tool";
    let context = ToolRunContext::new(
        RunId::new("r1"),
        CallId::new("p1"),
        CancellationToken::new(),
    );
    let harness = ToolExecutionContext::from_run_context(&context);
    assert_eq!(harness.call_id(), &CallId::new("p1"));
    match harness.call_tool("search", json!({})).await.unwrap_err() {
        TinyAgentsError::ToolFailed { tool, message, .. } => {
            assert_eq!(tool, "search");
            assert!(
                message.starts_with("cannot call tool 'search' "),
                "{message}"
            );
            assert!(message.ends_with(TAIL), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }

    // The sample tool run by hand (no loop) with that context installed.
    let context = context.clone().with_host_extension(Arc::new(harness));
    let error = sample_tool()
        .execute_with_context(json!({}), ToolCallOptions::default(), Some(&context))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("cannot call tool 'search' ") && text.ends_with(TAIL),
        "{text}"
    );
}
