//! The built-in middlewares, each with its allow, deny and defer cases:
//! allowlist, tool policy, human approval, plan mode, repeat progress.

use super::*;

// ---------------------------------------------------------------------------
// ToolAllowlistMiddleware (allow, deny; it never defers)
// ---------------------------------------------------------------------------

/// Allowlist: a listed tool runs; an unlisted one gets a refusal the model
/// reads, naming the middleware and the allowed tools.
#[tokio::test]
async fn allowlist_runs_listed_tools_and_refuses_others_naming_itself() {
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("write", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(["read"])))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&read), calls_of(&write)), (1, 0));
    assert_eq!(
        read_by_model(&model),
        vec![
            ("read".into(), "ok a".into(), false),
            (
                "write".into(),
                "denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: read"
                    .into(),
                true
            ),
        ]
    );
    assert_transcript_paired(&run.messages);
    assert_one_terminal_per_start(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolFailed { name, .. } if name == "write"))
    );
}

/// Allowlist: an empty list refuses every call.
#[tokio::test]
async fn allowlist_that_is_empty_refuses_every_call() {
    let read = read_tool("read");
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[read.clone()], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(Vec::<String>::new())))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(calls_of(&read), 0);
    assert_eq!(
        tool_results(&run.messages),
        vec![(
            "read".into(),
            "denied by tool_allowlist: tool 'read' is not allowed here; no tools are allowed"
                .into(),
            true
        )]
    );
}

// ---------------------------------------------------------------------------
// ToolPolicyMiddleware (allow, deny by mask, deny by sandbox, classification,
// defer for approval)
// ---------------------------------------------------------------------------

/// ToolPolicy: the deny mask over side-effect classes refuses a tool of a
/// masked class, and tools of other classes run in the same turn.
#[tokio::test]
async fn tool_policy_deny_mask_refuses_masked_side_effects_and_allows_the_rest() {
    let read = read_tool("read");
    let fetch = write_tool("fetch").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    let mail = write_tool("mail").with_spec(|s| s.side_effects(SideEffects::MESSAGING));
    let model = script(vec![
        turn(&[
            probe_call("read", "a"),
            probe_call("fetch", "b"),
            probe_call("mail", "c"),
        ]),
        done(),
    ]);
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT);
    let harness = build(&model, &[read.clone(), fetch.clone(), mail.clone()], |b| {
        b.middleware(Arc::new(policy))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        (calls_of(&read), calls_of(&fetch), calls_of(&mail)),
        (1, 0, 1)
    );
    assert_eq!(
        read_by_model(&model),
        vec![
            ("read".into(), "ok a".into(), false),
            (
                "fetch".into(),
                "denied by tool_policy: tool 'fetch' is refused by the tool policy: side effects not allowed here: network_egress"
                    .into(),
                true
            ),
            ("mail".into(), "ok c".into(), false),
        ]
    );
    assert_transcript_paired(&run.messages);
}

/// ToolPolicy: a sandboxed tool is refused when no sandbox is available and
/// runs when the host declares one.
#[tokio::test]
async fn tool_policy_sandbox_requirement_refuses_without_a_sandbox_and_allows_with_one() {
    for available in [false, true] {
        let shell = write_tool("shell")
            .with_spec(|s| s.side_effects(SideEffects::CODE_EXECUTION).sandboxed());
        let model = script(vec![call("shell", "ls"), done()]);
        let policy = ToolPolicyMiddleware::new().sandbox_available(available);
        let harness = build(&model, &[shell.clone()], |b| b.middleware(Arc::new(policy)));
        let run = harness.run("go").await.unwrap();
        let results = tool_results(&run.messages);
        if available {
            assert_eq!(calls_of(&shell), 1);
            assert_eq!(results, vec![("shell".into(), "ok ls".into(), false)]);
        } else {
            assert_eq!(calls_of(&shell), 0);
            assert_eq!(
                results,
                vec![(
                    "shell".into(),
                    "denied by tool_policy: tool 'shell' must run in a sandbox and no sandbox is available here".into(),
                    true
                )]
            );
        }
    }
}

/// ToolPolicy: the host's classification adds classes to a spec (so a
/// read-only tool classified as payment is refused by the mask) or replaces
/// them (so a network tool reclassified as harmless runs).
#[tokio::test]
async fn tool_policy_classification_adds_or_replaces_a_tools_classes() {
    let read = read_tool("read");
    let fetch = write_tool("fetch").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("fetch", "b")]),
        done(),
    ]);
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT)
        .classify("read", SideEffects::PAYMENT)
        .reclassify("fetch", SideEffects::NONE);
    let harness = build(&model, &[read.clone(), fetch.clone()], |b| {
        b.middleware(Arc::new(policy))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&fetch)), (0, 1));
    let results = tool_results(&run.messages);
    assert_eq!(
        results[0].1,
        "denied by tool_policy: tool 'read' is refused by the tool policy: side effects not allowed here: payment"
    );
    assert_eq!(results[1], ("fetch".into(), "ok b".into(), false));
}

/// ToolPolicy: a tool named for approval and a tool of a class needing
/// approval both defer the run; approved on resume, each runs once.
#[tokio::test]
async fn tool_policy_defers_calls_needing_approval_and_runs_them_once_approved() {
    let pay = write_tool("pay").with_spec(|s| s.side_effects(SideEffects::PAYMENT));
    let write = write_tool("write");
    let read = read_tool("read");
    let model = script(vec![
        turn(&[
            probe_call("pay", "5 EUR"),
            probe_call("write", "w"),
            probe_call("read", "r"),
        ]),
        done(),
    ]);
    let tools: [Arc<dyn Tool>; 3] = [pay.clone(), write.clone(), read.clone()];
    let configure = |b: AgentHarnessBuilder| {
        b.middleware(Arc::new(
            ToolPolicyMiddleware::new()
                .require_approval("write")
                .require_approval_for(SideEffects::PAYMENT),
        ))
    };
    let run = build(&model, &tools, configure).run("go").await.unwrap();
    let suspended = through_json(&run);
    let reasons: Vec<String> = suspended.pending().map(|p| p.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            "tool 'pay' requires approval for its side effects: payment (asked by policy 'tool_policy')",
            "tool 'write' requires approval (asked by policy 'tool_policy')"
        ]
    );
    assert_eq!(
        (calls_of(&pay), calls_of(&write), calls_of(&read)),
        (0, 0, 1)
    );

    let decisions = approve_all(&suspended);
    let run = build(&model, &tools, configure)
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        (calls_of(&pay), calls_of(&write), calls_of(&read)),
        (1, 1, 1)
    );
    assert_eq!(
        tool_results(&run.messages),
        vec![
            ("pay".into(), "ok 5 EUR".into(), false),
            ("write".into(), "ok w".into(), false),
            ("read".into(), "ok r".into(), false),
        ]
    );
    assert_transcript_paired(&run.messages);
}

// ---------------------------------------------------------------------------
// HumanApprovalMiddleware (allow, defer, deny when a callback fails)
// ---------------------------------------------------------------------------

type Outcomes = Arc<std::sync::Mutex<Vec<(String, ApprovalOutcome)>>>;

fn outcome_recorder() -> (ApprovalOutcomeFn, Outcomes) {
    let seen: Outcomes = Default::default();
    let sink = Arc::clone(&seen);
    let observe: ApprovalOutcomeFn = Arc::new(move |call: &ToolCall, outcome| {
        sink.lock().unwrap().push((call.id.to_string(), outcome));
    });
    (observe, seen)
}

/// HumanApproval: an unflagged tool runs, a tool whose spec requires
/// approval defers the run, and the approval granted on resume runs it.
#[tokio::test]
async fn human_approval_defers_flagged_calls_and_lets_unflagged_ones_run() {
    let read = read_tool("read");
    let deploy = deploy_tool();
    let (observe, outcomes) = outcome_recorder();
    let approval = Arc::new(HumanApprovalMiddleware::new().with_outcome_fn(observe));
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), deploy.clone()], |b| {
        b.middleware(approval.clone())
    });
    let run = harness.run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(pending_names(&suspended), ["deploy"]);
    assert_eq!(
        suspended.pending().next().unwrap().reason,
        "tool 'deploy' requires a person's approval (asked by policy 'human_approval')"
    );
    assert_eq!((calls_of(&read), calls_of(&deploy)), (1, 0));

    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&read), calls_of(&deploy)), (1, 1));
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![
            ("p2".to_owned(), ApprovalOutcome::Deferred),
            ("p2".to_owned(), ApprovalOutcome::Granted)
        ]
    );
}

/// HumanApproval: a tool flagged by name defers, and an approval callback
/// that allows a call lets it run without suspending the run.
#[tokio::test]
async fn human_approval_flags_by_name_and_its_callback_may_approve() {
    let mail = write_tool("mail");
    let (observe, outcomes) = outcome_recorder();
    let approve: ApprovalFn = Arc::new(|call: &ToolCall| call.arguments["tag"] == "me@example.com");
    let approval = Arc::new(
        HumanApprovalMiddleware::new()
            .require("mail")
            .with_approval_fn(approve)
            .with_outcome_fn(observe),
    );
    let model = script(vec![
        call("mail", "me@example.com"),
        call("mail", "boss@example.com"),
        done(),
    ]);
    let harness = build(&model, &[mail.clone()], |b| b.middleware(approval.clone()));
    let run = harness.run("go").await.unwrap();
    // The first call was approved by the callback and ran; the second waits.
    assert_eq!(calls_of(&mail), 1);
    let suspended = through_json(&run);
    assert_eq!(
        suspended
            .pending()
            .map(|p| p.call.arguments["tag"].clone())
            .collect::<Vec<_>>(),
        [json!("boss@example.com")]
    );
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![
            ("p1".to_owned(), ApprovalOutcome::Approved),
            ("p2".to_owned(), ApprovalOutcome::Deferred)
        ]
    );
}

/// HumanApproval (fail closed): an approval callback that panics refuses
/// the call with a message naming the middleware; the tool never runs.
#[tokio::test]
async fn human_approval_callback_that_panics_refuses_the_call() {
    let deploy = deploy_tool();
    let boom: ApprovalFn = Arc::new(|_: &ToolCall| panic!("approval service down"));
    let approval = Arc::new(HumanApprovalMiddleware::new().with_approval_fn(boom));
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| b.middleware(approval));
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "a refusal is not a suspension"
    );
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "deploy".into(),
            "denied by human_approval: the approval callback failed for tool 'deploy'; the call is refused".into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// HumanApproval (fail closed): an outcome callback that panics refuses the
/// call even when the approval callback allowed it.
#[tokio::test]
async fn human_approval_outcome_callback_that_panics_refuses_the_call() {
    let deploy = deploy_tool();
    let yes: ApprovalFn = Arc::new(|_: &ToolCall| true);
    let boom: ApprovalOutcomeFn = Arc::new(|_: &ToolCall, _| panic!("audit log down"));
    let approval = Arc::new(
        HumanApprovalMiddleware::new()
            .with_approval_fn(yes)
            .with_outcome_fn(boom),
    );
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| b.middleware(approval));
    let run = harness.run("go").await.unwrap();
    assert_eq!(calls_of(&deploy), 0);
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(is_error);
    assert_eq!(
        content,
        "denied by human_approval: the approval outcome callback failed for tool 'deploy'; the call is refused"
    );
}

// ---------------------------------------------------------------------------
// PlanModeMiddleware (allow read-only, deny others; never defers)
// ---------------------------------------------------------------------------

/// PlanMode: read-only tools run; any other call is refused with the
/// plan-mode message, which the model reads.
#[tokio::test]
async fn plan_mode_lets_read_only_tools_run_and_refuses_others_with_the_plan_mode_message() {
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("write", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Arc::new(PlanModeMiddleware::new(true)))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&write)), (1, 0));
    let seen = read_by_model(&model);
    assert_eq!(seen[0], ("read".into(), "ok a".into(), false));
    let (name, refusal, is_error) = &seen[1];
    assert_eq!(name, "write");
    assert!(is_error);
    assert!(
        refusal.starts_with(
            "denied by plan_mode: You are in plan mode: only read-only tools are available, and 'write' is not read-only, so it was not run."
        ),
        "{refusal}"
    );
    assert_transcript_paired(&run.messages);
}

/// PlanMode: switched off at run time (shared in an `Arc`), the same call
/// runs.
#[tokio::test]
async fn plan_mode_switched_off_lets_the_same_call_run() {
    let write = write_tool("write");
    let plan = Arc::new(PlanModeMiddleware::new(true));
    let model = script(vec![call("write", "a"), done(), call("write", "a"), done()]);
    let harness = build(&model, &[write.clone()], |b| b.middleware(plan.clone()));
    let first = harness.run("go").await.unwrap();
    assert!(tool_results(&first.messages)[0].2);
    assert_eq!(calls_of(&write), 0);
    plan.set_enabled(false);
    let second = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&second.messages),
        vec![("write".into(), "ok a".into(), false)]
    );
    assert_eq!(calls_of(&write), 1);
}

// ---------------------------------------------------------------------------
// RepeatProgressMiddleware (allow, deny the K-th; never defers)
// ---------------------------------------------------------------------------

/// RepeatProgress: the K-th identical consecutive call (K = 3) is refused,
/// and so is every identical call after it; the earlier ones ran.
#[tokio::test]
async fn repeat_progress_refuses_the_kth_identical_consecutive_call() {
    let search = read_tool("search");
    let model = script(vec![
        call("search", "x"),
        call("search", "x"),
        call("search", "x"),
        call("search", "x"),
        done(),
    ]);
    let harness = build(&model, &[search.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(3)))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&search), 2);
    let results = tool_results(&run.messages);
    assert!(!results[0].2 && !results[1].2);
    assert!(
        results[2].1.starts_with("denied by repeat_progress: refused: this is call 3 in a row of 'search' with the same arguments"),
        "{}",
        results[2].1
    );
    assert!(results[3].1.contains("call 4 in a row"), "{}", results[3].1);
}

/// RepeatProgress: a different call in between resets the streak, and
/// identical calls within one turn count as consecutive.
#[tokio::test]
async fn repeat_progress_resets_on_a_different_call_and_counts_within_a_turn() {
    let search = read_tool("search");
    let model = script(vec![
        call("search", "x"),
        call("search", "y"),
        call("search", "x"),
        turn(&[probe_call("search", "z"), probe_call("search", "z")]),
        done(),
    ]);
    let harness = build(&model, &[search.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
    });
    let run = harness.run("go").await.unwrap();
    let errors: Vec<bool> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, _, e)| e)
        .collect();
    assert_eq!(errors, [false, false, false, false, true]);
    assert_eq!(calls_of(&search), 4);
}
