//! NT-33..NT-38: what does not apply to nested calls.

use super::*;
use tinyagents::middleware::REDACTED;

/// A middleware that, in `before_tool` of the first model call, grants
/// approvals by id: one for the nested id `p1/1` and one for the model id
/// `p2`, both for `mail` with the arguments `{"to": "x"}`.
struct Granter;

#[async_trait]
impl Middleware for Granter {
    fn name(&self) -> &str {
        "granter"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        if call.id.as_str() == "p1" {
            let hash = args_hash(&json!({"to": "x"}));
            let run = ctx.run_id.clone();
            ctx.approvals
                .grant_hashed(&run, &CallId::new("p1/1"), "mail", hash.clone());
            ctx.approvals
                .grant_hashed(&run, &CallId::new("p2"), "mail", hash);
        }
        Ok(ToolVerdict::Allow)
    }
}

/// rule NT-33: an approval granted by id never applies to a nested call
/// with that id (human approval and tool policy alike), while the same
/// grant lets a model call run; approval callbacks receive the `ToolCall`,
/// whose id format marks it nested.
#[tokio::test]
async fn nt_33_approvals_granted_by_id_do_not_apply_to_nested_calls() {
    for policy in ["human_approval", "tool_policy"] {
        let node = Node::plain();
        let mail = named_leaf("mail");
        let (observe, outcomes) = outcome_recorder();
        let middleware: Arc<dyn Middleware> = if policy == "human_approval" {
            Arc::new(
                HumanApprovalMiddleware::new()
                    .require("mail")
                    .with_outcome_fn(observe),
            )
        } else {
            Arc::new(ToolPolicyMiddleware::new().require_approval("mail"))
        };
        let model = vec![
            ScriptedModel::tool_call("node", plan(vec![child("mail", json!({"to": "x"}))])),
            ScriptedModel::tool_call("mail", json!({"to": "x"})),
            ChatResponse::text("done"),
        ];
        let (harness, _) = build(model, vec![node.tool(), t(&mail)], |b| {
            b.middleware(Arc::new(Granter)).middleware(middleware)
        });
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed, "{policy}");
        assert_eq!(
            node.err("p1", 0).to_string(),
            format!(
                "denied by {policy}: nested call 'mail' requires approval; nested calls cannot be deferred"
            )
        );
        assert_eq!(
            mail.ids(),
            ["p2"],
            "{policy}: the grant applied to the model call only"
        );
        if policy == "human_approval" {
            assert_eq!(
                *outcomes.lock().unwrap(),
                [
                    ("p1/1".to_owned(), ApprovalOutcome::Refused),
                    ("p2".to_owned(), ApprovalOutcome::Granted)
                ]
            );
        }
    }

    // The callback sees the ToolCall; a nested one is recognisable by its id.
    let node = Node::plain();
    let mail = named_leaf("mail");
    let asked: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let sink = Arc::clone(&asked);
    let approve: ApprovalFn = Arc::new(move |call: &ToolCall| {
        sink.lock()
            .unwrap()
            .push((call.id.to_string(), call.id.is_nested()));
        call.id.is_nested()
    });
    let approval = HumanApprovalMiddleware::new()
        .require("mail")
        .with_approval_fn(approve);
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("mail", json!({"to": "x"}))]))]),
        vec![node.tool(), t(&mail)],
        |b| b.middleware(Arc::new(approval)),
    );
    run_checked(&harness).await;
    assert_eq!(*asked.lock().unwrap(), [("p1/1".to_owned(), true)]);
    assert_eq!(mail.ids(), ["p1/1"]);
}

/// rule NT-34: the repeat-progress guard never counts nested calls (nor as
/// model repeats of the parent).
#[tokio::test]
async fn nt_34_the_repeat_guard_does_not_see_nested_calls() {
    let node = Node::plain();
    let search = named_leaf("search");
    let same = || child("search", json!({"q": "x"}));
    let model = vec![
        ScriptedModel::tool_call("node", plan(vec![same(), same(), same()])),
        ScriptedModel::tool_call("search", json!({"q": "x"})),
        ScriptedModel::tool_call("search", json!({"q": "x"})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&search)], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
    });
    let (run, _) = run_checked(&harness).await;
    for index in 0..3 {
        node.ok("p1", index);
    }
    assert!(
        !answer(&run, "p2").1,
        "the first model-issued search is not a repeat of the nested ones"
    );
    let (refusal, is_error) = answer(&run, "p3");
    assert!(
        is_error && refusal.starts_with("denied by repeat_progress"),
        "the guard still works: {refusal}"
    );
    assert_eq!(search.ids(), ["p1/1", "p1/2", "p1/3", "p2"]);
}

/// rule NT-34: redaction middleware's `after_tool` does not run on nested
/// calls, so what a nested call returns to its calling tool is not scrubbed;
/// but since the one call path (issue 10) every payload of every call is
/// redacted before it reaches an event, so under `tool_io` capture the
/// nested call's arguments and result are scrubbed on their events like the
/// model-issued call's.
#[tokio::test]
async fn nt_34_redaction_scrubs_nested_events_but_not_what_the_caller_receives() {
    const SECRET: &str = "hunter2-corp";
    let node = Node::plain();
    let echo = scripted(safe("echo"), |call| async move {
        Ok(ToolResult::text(
            call.args["tag"].as_str().unwrap_or("").to_owned(),
        ))
    });
    let tree = with(
        plan(vec![child("echo", json!({"tag": SECRET}))]),
        "note",
        json!(SECRET),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&echo)],
        |b| {
            b.payload_capture(PayloadCapture::all())
                .middleware(Arc::new(RedactionMiddleware::with_redactor(
                    Redactor::new().with_secret(SECRET),
                )))
        },
    );
    let (run, events) = run_checked(&harness).await;
    let started = |id: &str| {
        events
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == id => arguments.clone(),
                _ => None,
            })
            .unwrap()
    };
    assert!(
        !started("p1").to_string().contains(SECRET),
        "the model-issued call is redacted"
    );
    assert_eq!(
        started("p1/1"),
        json!({"tag": REDACTED}),
        "the nested call's arguments are redacted on its event"
    );
    let AgentEvent::ToolCompleted { result, .. } = terminal(&events, "p1/1") else {
        panic!()
    };
    assert_eq!(result.as_deref(), Some(REDACTED), "and so is its result");
    assert_eq!(
        node.ok("p1", 0).content,
        SECRET,
        "the nested result reaches the parent unscrubbed"
    );
    assert!(
        !answer(&run, "p1").0.contains(SECRET),
        "the parent's own result is scrubbed"
    );
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(SECRET), "no event holds the secret: {all}");
}

/// rule NT-35: with `tool_io` capture, a nested call's arguments reach its
/// `ToolStarted` event and its result its `ToolCompleted` (redacted, like
/// every payload since issue 10: a key the redactor treats as sensitive is
/// scrubbed); without capture, no arguments or results ride on events.
#[tokio::test]
async fn nt_35_nested_arguments_reach_events_only_under_tool_io_and_redacted() {
    for capture in [PayloadCapture::default(), PayloadCapture::all()] {
        let node = Node::plain();
        let args = json!({"password": "s3cret", "user": "ann"});
        let tree = with(
            plan(vec![child("leaf", args.clone())]),
            "password",
            json!("s3cret"),
        );
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&new_leaf())],
            |b| {
                b.payload_capture(capture)
                    .middleware(Arc::new(RedactionMiddleware::with_redactor(
                        Redactor::new().with_key("password"),
                    )))
            },
        );
        let (_, events) = run_checked(&harness).await;
        let redacted = json!({"password": REDACTED, "user": "ann"});
        let mut seen = 0;
        for event in &events {
            match event {
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == "p1/1" => {
                    seen += 1;
                    assert_eq!(arguments.as_ref(), capture.tool_io.then_some(&redacted));
                }
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == "p1" && capture.tool_io => {
                    assert_ne!(
                        arguments.as_ref().unwrap()["password"],
                        "s3cret",
                        "the model-issued call is redacted"
                    );
                }
                AgentEvent::ToolCompleted {
                    call_id, result, ..
                } if call_id.as_str() == "p1/1" => {
                    seen += 1;
                    assert_eq!(result.is_some(), capture.tool_io);
                }
                _ => {}
            }
        }
        assert_eq!(seen, 2, "the nested call's start and end were checked");
        let nested: Vec<&AgentEvent> = events
            .iter()
            .filter(|e| e.call_id().is_some_and(|id| id.as_str() == "p1/1"))
            .collect();
        let nested = serde_json::to_string(&nested).unwrap();
        assert!(
            !nested.contains("s3cret"),
            "no nested event holds it: {nested}"
        );
    }
}

/// rule NT-36: `before_tool` and `after_tool` never run for nested calls.
#[tokio::test]
async fn nt_36_before_and_after_tool_never_run_for_nested_calls() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("node", plan(vec![child("leaf", json!({}))])),
    ]);
    let model = vec![
        ScriptedModel::tool_call("node", tree),
        ScriptedModel::tool_call("leaf", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&new_leaf())], |b| {
        b.middleware(Arc::new(Recorder::new("hooks", &log)))
    });
    run_checked(&harness).await;
    let hooks: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.contains("_tool "))
        .collect();
    assert_eq!(
        hooks,
        [
            "hooks before_tool p1",
            "hooks after_tool p1",
            "hooks before_tool p2",
            "hooks after_tool p2"
        ]
    );
}

/// A host hook that vetoes a tool in `before_tool` only.
struct BeforeToolVeto;

#[async_trait]
impl Middleware for BeforeToolVeto {
    fn name(&self) -> &str {
        "host_hooks"
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(if call.name == "write" {
            ToolVerdict::Deny {
                reason: "writes are vetoed".into(),
            }
        } else {
            ToolVerdict::Allow
        })
    }
}

/// rule NT-36: an enforcement that lives in `before_tool` only does not
/// bind nested calls (the specification's open follow-up for hosts: such a
/// hook must implement `check_nested_tool`, or `call_tool` goes around it).
#[tokio::test]
async fn nt_36_a_before_tool_only_veto_does_not_bind_nested_calls() {
    let node = Node::plain();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = vec![
        ScriptedModel::tool_call("write", json!({})),
        ScriptedModel::tool_call("node", plan(vec![child("write", json!({}))])),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&write)], |b| {
        b.middleware(Arc::new(BeforeToolVeto))
    });
    let (run, _) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("denied by host_hooks: writes are vetoed".to_owned(), true)
    );
    assert_eq!(node.ok("p2", 0).content, "written");
    assert_eq!(write.ids(), ["p2/1"]);
}

/// rule NT-37: a nested tool's progress reports are not forwarded (a
/// model-issued call's are).
#[tokio::test]
async fn nt_37_nested_progress_is_not_forwarded() {
    let node = Node::plain();
    let long = ProbeTool::new("long", true, Behaviour::Progress);
    let model = one_turn(&[
        ("node", plan(vec![child("long", json!({}))])),
        ("long", json!({})),
    ]);
    let (harness, _) = build(model, vec![node.tool(), long.clone()], |b| b);
    let (_, events) = run_checked(&harness).await;
    assert_eq!(long.calls.load(Ordering::SeqCst), 2);
    let progress: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(progress, ["p2", "p2"]);
}

/// rule NT-38: a nested result's tool control (terminate, return-direct)
/// and a wrap's control request on it are ignored: the run goes on to the
/// model's answer; the final output is screened once, as a whole.
#[tokio::test]
async fn nt_38_nested_tool_control_is_ignored_and_the_final_output_is_screened_once() {
    for control in [ToolControl::ReturnDirect, ToolControl::Terminate] {
        for by_wrap in [false, true] {
            let log = Arc::new(Log::default());
            let node = Node::plain();
            let steer = if by_wrap {
                named_leaf("steer")
            } else {
                scripted(safe("steer"), move |_| async move {
                    Ok(ToolResult::text("steered").with_control(control))
                })
            };
            let (harness, model) = build(
                one_turn(&[("node", plan(vec![child("steer", json!({}))]))]),
                vec![node.tool(), t(&steer)],
                |b| {
                    let b = b.security_gate(Gate::new("none", Answer::Allow, &log));
                    if by_wrap {
                        b.tool_middleware(Wrap::new("steer", WrapMode::Control(control), &log))
                    } else {
                        b
                    }
                },
            );
            let (run, _) = run_checked(&harness).await;
            assert_eq!(
                run.status,
                RunStatus::Completed,
                "{control:?} by_wrap={by_wrap}"
            );
            assert_eq!(run.final_text, "done");
            assert_eq!(model.calls(), 2, "the model was asked again");
            assert_eq!(
                node.ok("p1", 0).control,
                None,
                "the control does not reach the parent"
            );
            let screened: Vec<String> = log
                .entries()
                .into_iter()
                .filter(|e| e.starts_with("screen"))
                .collect();
            assert_eq!(screened, ["screen done"]);
        }
    }
}
