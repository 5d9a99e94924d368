//! NT-11..NT-13: the built-in middlewares, the security gate and wraps
//! around nested calls.

use super::*;

/// rule NT-11: `ToolAllowlistMiddleware` refuses a nested call with the
/// same decision as its `before_tool`.
#[tokio::test]
async fn nt_11_allowlist_refuses_nested_calls_like_model_calls() {
    let node = Node::plain();
    let leaf = new_leaf();
    let write = named_leaf("write");
    let model = vec![
        ScriptedModel::tool_call(
            "node",
            plan(vec![child("leaf", json!({})), child("write", json!({}))]),
        ),
        ScriptedModel::tool_call("write", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf), t(&write)], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(["node", "leaf"])))
    });
    let (run, _) = run_checked(&harness).await;
    node.ok("p1", 0);
    let nested = node.err("p1", 1);
    assert_eq!(
        nested.to_string(),
        "denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: leaf, node"
    );
    assert_eq!(
        nested.to_string(),
        answer(&run, "p2").0,
        "the same decision on both paths"
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-11: `ToolPolicyMiddleware` (deny mask, sandbox, classification,
/// approval) refuses nested calls with the same decisions as `before_tool`;
/// an approval decision is the nested approval refusal, never a deferral.
#[tokio::test]
async fn nt_11_tool_policy_refuses_nested_calls_like_model_calls() {
    let node = Node::plain();
    let fetch = scripted(
        spec("fetch").side_effects(SideEffects::NETWORK_EGRESS),
        |_| async { Ok(ToolResult::text("fetched")) },
    );
    let shell = scripted(
        spec("shell")
            .side_effects(SideEffects::CODE_EXECUTION)
            .sandboxed(),
        |_| async { Ok(ToolResult::text("ran")) },
    );
    let read = named_leaf("read");
    let write = named_leaf("write");
    let calls = ["fetch", "shell", "read", "write"];
    let tree = plan(calls.iter().map(|n| child(n, json!({}))).collect());
    let mut model = vec![ScriptedModel::tool_call("node", tree)];
    model.push(ScriptedModel::tool_calls(
        calls[..3].iter().map(|n| (*n, json!({}))),
    ));
    model.push(ChatResponse::text("done"));
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT)
        .classify("read", SideEffects::PAYMENT)
        .require_approval("write");
    let (harness, _) = build(
        model,
        vec![node.tool(), t(&fetch), t(&shell), t(&read), t(&write)],
        |b| b.middleware(Arc::new(policy)),
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed, "never deferred");
    for (index, id) in [(0, "p2"), (1, "p3"), (2, "p4")] {
        let nested = node.err("p1", index).to_string();
        assert!(nested.starts_with("denied by tool_policy: "), "{nested}");
        assert_eq!(
            nested,
            answer(&run, id).0,
            "the same decision on both paths"
        );
    }
    assert_eq!(
        node.err("p1", 3).to_string(),
        "denied by tool_policy: nested call 'write' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(
        fetch.calls() + shell.calls() + read.calls() + write.calls(),
        0
    );
}

/// rule NT-11: `HumanApprovalMiddleware` fails a flagged nested call with
/// the approval error unless its callback allows it, and never interrupts
/// or defers the run.
#[tokio::test]
async fn nt_11_human_approval_fails_flagged_nested_calls_unless_the_callback_allows() {
    let node = Node::plain();
    let mail = named_leaf("mail");
    let (observe, outcomes) = outcome_recorder();
    let approve: ApprovalFn = Arc::new(|call: &ToolCall| call.arguments["to"] == "me@example.com");
    let approval = HumanApprovalMiddleware::new()
        .require("mail")
        .with_approval_fn(approve)
        .with_outcome_fn(observe);
    let tree = plan(vec![
        child("mail", json!({"to": "me@example.com"})),
        child("mail", json!({"to": "boss@example.com"})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&mail)],
        |b| b.middleware(Arc::new(approval)),
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(
        run.suspended.is_none(),
        "a nested call never suspends the run"
    );
    node.ok("p1", 0);
    assert_eq!(
        node.err("p1", 1).to_string(),
        "denied by human_approval: nested call 'mail' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(mail.ids(), ["p1/1"]);
    assert_eq!(
        *outcomes.lock().unwrap(),
        [
            ("p1/1".to_owned(), ApprovalOutcome::Approved),
            ("p1/2".to_owned(), ApprovalOutcome::Refused)
        ]
    );

    // Without a callback, a flagged nested call fails; a panicking callback
    // fails closed.
    for callback in [
        None,
        Some(Arc::new(|_: &ToolCall| -> bool { panic!("approval service down") }) as ApprovalFn),
    ] {
        let node = Node::plain();
        let mail = named_leaf("mail");
        let mut approval = HumanApprovalMiddleware::new().require("mail");
        let panics = callback.is_some();
        if let Some(callback) = callback {
            approval = approval.with_approval_fn(callback);
        }
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("mail", json!({}))]))]),
            vec![node.tool(), t(&mail)],
            |b| b.middleware(Arc::new(approval)),
        );
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed);
        let text = node.err("p1", 0).to_string();
        if panics {
            assert!(
                text.starts_with("denied by human_approval: the approval callback failed"),
                "{text}"
            );
        } else {
            assert!(
                text.ends_with(
                    "nested call 'mail' requires approval; nested calls cannot be deferred"
                ),
                "{text}"
            );
        }
        assert_eq!(mail.calls(), 0);
    }
}

/// rule NT-11: `PlanModeMiddleware` refuses a nested call of a tool that is
/// not read-only, with the same message as `before_tool`.
#[tokio::test]
async fn nt_11_plan_mode_refuses_nested_calls_like_model_calls() {
    let survey = Node::new(spec("survey").read_only());
    let leaf = new_leaf();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = vec![
        ScriptedModel::tool_call(
            "survey",
            plan(vec![child("leaf", json!({})), child("write", json!({}))]),
        ),
        ScriptedModel::tool_call("write", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![survey.tool(), t(&leaf), t(&write)], |b| {
        b.middleware(Arc::new(PlanModeMiddleware::new(true)))
    });
    let (run, _) = run_checked(&harness).await;
    survey.ok("p1", 0);
    let nested = survey.err("p1", 1).to_string();
    assert!(
        nested.starts_with("denied by plan_mode: You are in plan mode"),
        "{nested}"
    );
    assert_eq!(
        nested,
        answer(&run, "p2").0,
        "the same decision on both paths"
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-12: the security gate sees a nested call with `parent_call_id`
/// set and `is_nested()` true (a model call with neither); it allows it.
#[tokio::test]
async fn nt_12_the_gate_sees_the_parent_of_a_nested_call() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let leaf = new_leaf();
    let tree = plan(vec![child("node", plan(vec![child("leaf", json!({}))]))]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&leaf)],
        |b| b.security_gate(Gate::new("leaf", Answer::Allow, &log)),
    );
    run_checked(&harness).await;
    let asked: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.starts_with("gate"))
        .collect();
    assert_eq!(
        asked,
        [
            "gate p1 node parent=- nested=false",
            "gate p1/1 node parent=p1 nested=true",
            "gate p1/1/1 leaf parent=p1/1 nested=true",
        ]
    );
    assert_eq!(leaf.ids(), ["p1/1/1"]);
}

/// rule NT-12: a gate's denial of a nested call is an `Err`; a question
/// (`Ask`) fails closed, since a nested call cannot be prompted for; a gate
/// that errors or panics refuses.
#[tokio::test]
async fn nt_12_a_gate_denial_question_error_or_panic_refuses_a_nested_call() {
    for answer_mode in [Answer::Deny, Answer::Ask, Answer::Fail, Answer::Panic] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("leaf", json!({}))]))]),
            vec![node.tool(), t(&leaf)],
            |b| b.security_gate(Gate::new("leaf", answer_mode, &log)),
        );
        let (run, events) = run_checked(&harness).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "{answer_mode:?}: the parent is never deferred"
        );
        assert!(run.suspended.is_none());
        let error = node.err("p1", 0);
        let TinyAgentsError::Denied { by, reason } = &error else {
            panic!("{answer_mode:?}: {error:?}")
        };
        assert_eq!(by, "security gate");
        match answer_mode {
            Answer::Deny => assert_eq!(reason, "not on weekends"),
            Answer::Ask => assert!(reason.contains("ask the on-call engineer"), "{reason}"),
            Answer::Fail => assert!(reason.contains("policy store unreachable"), "{reason}"),
            Answer::Panic => assert!(reason.contains("panicked"), "{reason}"),
            Answer::Allow => unreachable!(),
        }
        assert_eq!(failed_error(&events, "p1/1"), error.to_string());
        assert_eq!(leaf.calls(), 0, "{answer_mode:?}");
    }
}

/// rule NT-13: `wrap_tool` runs around nested calls (it sees the parent),
/// and may deny or rewrite them.
#[tokio::test]
async fn nt_13_wrap_tool_runs_around_nested_calls_and_may_deny_or_rewrite() {
    for mode in [WrapMode::Observe, WrapMode::Refuse, WrapMode::Rewrite] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("leaf", json!({"v": 1}))]))]),
            vec![node.tool(), t(&leaf)],
            |b| b.tool_middleware(Wrap::new("leaf", mode, &log)),
        );
        run_checked(&harness).await;
        assert_eq!(
            log.entries(),
            [
                "wrap p1 node nested=false parent=-",
                "wrap p1/1 leaf nested=true parent=p1"
            ]
        );
        match mode {
            WrapMode::Observe => assert_eq!(node.ok("p1", 0).content, "leaf {\"v\":1}"),
            WrapMode::Refuse => {
                assert_eq!(
                    node.err("p1", 0).to_string(),
                    "denied by wrap: no nested leaf"
                );
                assert_eq!(leaf.calls(), 0);
            }
            WrapMode::Rewrite => assert_eq!(node.ok("p1", 0).content, "leaf {\"rewritten\":true}"),
            _ => unreachable!(),
        }
    }
}
