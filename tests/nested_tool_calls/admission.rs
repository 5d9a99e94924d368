//! NT-06..NT-10: lookup, arguments, refused deferrals and the order of
//! `check_nested_tool` among the admission stages.

use super::*;

/// rule NT-06: lookup is `model_dispatch` plus the hosted run's
/// allow-list: an unknown, host-only or disallowed name is `Err(ToolNotFound)`.
#[tokio::test]
async fn nt_06_unknown_host_only_and_disallowed_names_are_tool_not_found() {
    let node = Node::plain();
    let leaf = new_leaf();
    let hosted = named_leaf("hosted");
    let hidden = named_leaf("hidden");
    let mut registry = ToolRegistry::new();
    registry.register(node.tool()).unwrap();
    registry.register(t(&leaf)).unwrap();
    registry.register(t(&hidden)).unwrap();
    registry.register_host_tool(t(&hosted)).unwrap();
    let tree = plan(vec![
        child("ghost", json!({})),
        child("hosted", json!({})),
        child("hidden", json!({})),
        child("leaf", json!({})),
    ]);
    let model = Arc::new(ScriptedModel::new(one_turn(&[("node", tree)])));
    let harness = AgentHarness::builder(model)
        .registry(registry)
        .allow_tools(["node", "leaf"])
        .limits(nesting(3))
        .build()
        .unwrap();
    let (_, events) = run_checked(&harness).await;
    for (index, name) in [(0, "ghost"), (1, "hosted"), (2, "hidden")] {
        let error = node.err("p1", index);
        assert_eq!(error, TinyAgentsError::ToolNotFound { name: name.into() });
        assert_eq!(error.to_string(), format!("tool not found: {name}"));
    }
    assert_eq!(failed_error(&events, "p1/1"), "tool not found: ghost");
    assert_eq!((hosted.calls(), hidden.calls()), (0, 0));
    assert_eq!(node.ok("p1", 3).content, "leaf {}");
}

/// rule NT-07: arguments go through injection, the `InvalidArgsPolicy`
/// normalisation and schema validation; invalid ones are an `Err` naming
/// the tool.
#[tokio::test]
async fn nt_07_arguments_are_injected_normalised_and_validated() {
    let whoami = scripted(
        ToolSpec::new(
            "whoami",
            "Says who the user is.",
            json!({"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}),
        )
        .injected("user_id")
        .read_only(),
        |call| async move { Ok(ToolResult::text(call.args["user_id"].as_str().unwrap_or("?").to_owned())) },
    );
    let wrapped = json!({"arguments": {"a": 1, "b": 2}});
    let stringly = json!("{\"a\": 2, \"b\": 2}");
    let tree = plan(vec![
        child("whoami", json!({"user_id": "mallory"})),
        child("whoami", json!({})),
        child("add", json!({"a": "one", "b": 2})),
        child("add", wrapped.clone()),
        child("add", stringly.clone()),
    ]);
    for policy in [
        InvalidArgsPolicy::ReturnToModel,
        InvalidArgsPolicy::NormalizeThenReturn,
        InvalidArgsPolicy::Fail,
    ] {
        let node = Node::plain();
        let (harness, _) = build(
            one_turn(&[("node", tree.clone())]),
            vec![node.tool(), t(&whoami), Arc::new(add_tool())],
            |b| b.inject("user_id", json!("alice")).invalid_args(policy),
        );
        let (run, _) = run_checked(&harness).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "an invalid nested call does not end the run ({policy:?})"
        );
        assert_eq!(
            node.ok("p1", 0).content,
            "alice",
            "the host's value overwrites the caller's"
        );
        assert_eq!(node.ok("p1", 1).content, "alice");
        match node.err("p1", 2) {
            TinyAgentsError::InvalidArguments { tool, message, .. } => {
                assert_eq!(tool, "add");
                assert!(
                    message.contains("invalid arguments for tool 'add'"),
                    "{message}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        for index in [3, 4] {
            match (policy, node.outcome("p1", index)) {
                (InvalidArgsPolicy::NormalizeThenReturn, Some(Ok(result))) => {
                    assert_eq!(result.content, if index == 3 { "3" } else { "4" });
                }
                (InvalidArgsPolicy::NormalizeThenReturn, other) => {
                    panic!("not normalised: {other:?}")
                }
                (_, Some(Err(error))) => assert!(
                    error.to_string().contains("'add'"),
                    "names the tool: {error}"
                ),
                (_, other) => panic!("accepted without normalisation: {other:?}"),
            }
        }
    }
}

/// rule NT-08: an external or approval-required tool is refused with
/// "nested call '<name>' requires approval; nested calls cannot be
/// deferred", and the parent is never deferred.
#[tokio::test]
async fn nt_08_external_and_approval_required_tools_are_refused_not_deferred() {
    let node = Node::plain();
    let external = scripted(spec("remote").external(), |_| async {
        Ok(ToolResult::text("ran"))
    });
    let gated = scripted(spec("deploy").approval_required(), |_| async {
        Ok(ToolResult::text("ran"))
    });
    let tree = plan(vec![child("remote", json!({})), child("deploy", json!({}))]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&external), t(&gated)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(
        run.suspended.is_none() && run.pending().is_empty(),
        "the parent is never deferred"
    );
    for (index, name) in [(0, "remote"), (1, "deploy")] {
        let error = node.err("p1", index);
        assert_eq!(
            error,
            TinyAgentsError::NestedApprovalRequired { tool: name.into() }
        );
        assert_eq!(
            error.to_string(),
            format!("nested call '{name}' requires approval; nested calls cannot be deferred")
        );
    }
    assert_eq!(
        failed_error(&events, "p1/2"),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!((external.calls(), gated.calls()), (0, 0));
}

/// rule NT-09: an approval-required signal raised by a wrap during a nested
/// call's execution is the same refusal; the parent is not deferred.
#[tokio::test]
async fn nt_09_approval_required_raised_by_a_wrap_is_the_nested_refusal() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let deploy = named_leaf("deploy");
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("deploy", json!({}))]))]),
        vec![node.tool(), t(&deploy)],
        |b| b.tool_middleware(Wrap::new("deploy", WrapMode::AskApproval, &log)),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.suspended.is_none());
    let error = node.err("p1", 0);
    assert_eq!(
        error.to_string(),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(
        failed_error(&events, "p1/1"),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(deploy.calls(), 0);
}

/// rule NT-09: an approval-required error raised by the nested tool itself
/// (`Err(TinyAgentsError::ApprovalRequired)` through `anyhow`) is the same
/// refusal as the approval stage's.
#[tokio::test]
async fn nt_09_approval_required_raised_by_the_tool_is_the_nested_refusal() {
    let node = Node::plain();
    let deploy = scripted(spec("deploy"), |_| async {
        Err(anyhow::Error::new(TinyAgentsError::ApprovalRequired {
            tool: "deploy".into(),
            reason: "production needs a second pair of eyes".into(),
        }))
    });
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("deploy", json!({}))]))]),
        vec![node.tool(), t(&deploy)],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.suspended.is_none());
    let error = node.err("p1", 0);
    assert_eq!(
        error.to_string(),
        "nested call 'deploy' requires approval; nested calls cannot be deferred",
        "{error:?}"
    );
}

/// rule NT-10: `check_nested_tool` runs on every middleware in order,
/// after validation and before host authorisation; the first `Err` refuses
/// (naming the middleware, fail closed) and later ones are not asked; the
/// default admits.
#[tokio::test]
async fn nt_10_check_nested_tool_runs_in_order_between_validation_and_the_gate() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let flaky = named_leaf("flaky");
    let tree = plan(vec![
        child("leaf", json!({})),
        child("blocked", json!({})),
        child("add", json!({"a": "x"})),
        child("flaky", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            t(&leaf),
            t(&blocked),
            t(&flaky),
            Arc::new(add_tool()),
        ],
        |b| {
            b.middleware(Arc::new(Recorder::new("first", &log)))
                .middleware(Arc::new(Silent))
                .middleware(Arc::new(Recorder::new("second", &log).refusing("blocked")))
                .middleware(Arc::new(Recorder::new("third", &log).failing("flaky")))
                .security_gate(Gate::new("none", Answer::Allow, &log))
        },
    );
    run_checked(&harness).await;
    let nested: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| (e.contains(" check ") || e.starts_with("gate ")) && !e.starts_with("gate p1 "))
        .collect();
    assert_eq!(
        nested,
        [
            "first check p1/1 leaf",
            "second check p1/1 leaf",
            "third check p1/1 leaf",
            "gate p1/1 leaf parent=p1 nested=true",
            "first check p1/2 blocked",
            "second check p1/2 blocked",
            "first check p1/4 flaky",
            "second check p1/4 flaky",
            "third check p1/4 flaky",
        ],
        "in order; the first refusal stops the chain and the gate; invalid arguments are never checked"
    );
    node.ok("p1", 0);
    assert_eq!(
        node.err("p1", 1),
        TinyAgentsError::Denied {
            by: "second".into(),
            reason: "no blocked".into()
        }
    );
    assert_eq!(
        node.err("p1", 1).to_string(),
        "denied by second: no blocked"
    );
    assert!(matches!(
        node.err("p1", 2),
        TinyAgentsError::InvalidArguments { .. }
    ));
    assert_eq!(
        node.err("p1", 3),
        TinyAgentsError::Denied {
            by: "third".into(),
            reason: "state error: store offline".into()
        },
        "a middleware's error fails closed, naming it"
    );
    assert_eq!((blocked.calls(), flaky.calls()), (0, 0));
}

/// rule NT-10: the admission stages run in the table's order: lookup,
/// arguments, approval, middleware, host authorisation, then the wrap
/// onion.
#[tokio::test]
async fn nt_10_admission_stages_run_in_the_tables_order() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let deploy = scripted(
        ToolSpec::new(
            "deploy",
            "Deploys.",
            json!({"type": "object", "properties": {"env": {"type": "string"}}}),
        )
        .approval_required(),
        |_| async { Ok(ToolResult::text("deployed")) },
    );
    let vetoed = named_leaf("vetoed");
    let gated = named_leaf("gated");
    let tree = plan(vec![
        child("ghost", json!({})),               // lookup before middleware
        child("deploy", json!({"env": 1})),      // arguments before approval
        child("deploy", json!({"env": "prod"})), // approval before middleware
        child("vetoed", json!({})),              // middleware before the gate
        child("gated", json!({})),               // the gate before the wrap
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&deploy), t(&vetoed), t(&gated)],
        |b| {
            b.middleware(Arc::new(Recorder::new("veto", &log).refusing("vetoed")))
                .security_gate(Gate::new("gated", Answer::Deny, &log))
                .tool_middleware(Wrap::new("none", WrapMode::Observe, &log))
        },
    );
    run_checked(&harness).await;
    assert_eq!(
        node.err("p1", 0),
        TinyAgentsError::ToolNotFound {
            name: "ghost".into()
        }
    );
    assert!(
        matches!(node.err("p1", 1), TinyAgentsError::InvalidArguments { ref tool, .. } if tool == "deploy")
    );
    assert_eq!(
        node.err("p1", 2),
        TinyAgentsError::NestedApprovalRequired {
            tool: "deploy".into()
        }
    );
    assert_eq!(
        node.err("p1", 3),
        TinyAgentsError::Denied {
            by: "veto".into(),
            reason: "no vetoed".into()
        }
    );
    assert_eq!(
        node.err("p1", 4).to_string(),
        "denied by security gate: not on weekends"
    );
    let entries = log.entries();
    let asked = |what: &str| entries.iter().any(|e| e.contains(what));
    assert!(
        !asked("check p1/1") && !asked("check p1/2") && !asked("check p1/3"),
        "{entries:?}"
    );
    assert!(
        asked("veto check p1/4 vetoed") && !asked("gate p1/4"),
        "{entries:?}"
    );
    assert!(
        asked("gate p1/5 gated") && !asked("wrap p1/5"),
        "{entries:?}"
    );
    assert_eq!(deploy.calls() + vetoed.calls() + gated.calls(), 0);
}
