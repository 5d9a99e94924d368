//! Deferral and resume (through JSON): a deferred call suspends the run,
//! approvals and denials, approvals that do not match, missing decisions, the
//! wall clock across a suspension, suspending again, and what still applies
//! after a resume.

use super::*;

/// The tools of the mixed turn: two reads, a flagged deploy, and a write the
/// allowlist refuses.
fn mixed_tools() -> (Arc<ProbeTool>, Arc<ProbeTool>, Arc<ProbeTool>) {
    (read_tool("read"), deploy_tool(), write_tool("write"))
}

fn mixed_harness(
    model: &Arc<ScriptedModel>,
    read: &Arc<ProbeTool>,
    deploy: &Arc<ProbeTool>,
    write: &Arc<ProbeTool>,
) -> AgentHarness {
    build(model, &[read.clone(), deploy.clone(), write.clone()], |b| {
        b.middleware(Arc::new(HumanApprovalMiddleware::new()))
            .middleware(Arc::new(ToolAllowlistMiddleware::new(["read", "deploy"])))
    })
}

fn mixed_turn() -> ChatResponse {
    turn(&[
        probe_call("read", "a"),
        probe_call("deploy", "prod"),
        probe_call("write", "w"),
        probe_call("read", "b"),
    ])
}

/// Deferral: in a turn where one call needs approval, the calls that need
/// none run and settle (including a refusal), then the run ends `Ok` as
/// awaiting approval, holding its pending call and its turn in call order.
#[tokio::test]
async fn a_deferred_call_suspends_the_run_after_the_rest_of_its_turn_settles() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    assert_eq!(
        (calls_of(&read), calls_of(&deploy), calls_of(&write)),
        (2, 0, 0)
    );
    assert_eq!(
        model.calls(),
        1,
        "the model is not asked again while a call waits"
    );
    let suspended = run.suspended.as_ref().unwrap();
    assert_eq!(suspended.format, tinyagents::harness::SUSPENDED_RUN_FORMAT);
    let shape: Vec<String> = suspended
        .turn
        .iter()
        .map(|entry| match entry {
            TurnEntry::Settled {
                message: Message::Tool {
                    call_id, content, ..
                },
            } => format!("{call_id} settled: {content}"),
            TurnEntry::Settled { message } => panic!("unexpected {message:?}"),
            TurnEntry::Pending { pending } => {
                format!("{} pending: {}", pending.call.id, pending.reason)
            }
        })
        .collect();
    assert_eq!(
        shape,
        [
            "p1 settled: ok a",
            "p2 pending: tool 'deploy' requires a person's approval (asked by policy 'human_approval')",
            "p3 settled: denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: deploy, read",
            "p4 settled: ok b",
        ]
    );
    assert_eq!(run.pending().len(), 1);
    assert_eq!(
        suspended.budget.tool_calls, 3,
        "every issued call spent its slot, but the waiting one gave it back: resuming reserves it again"
    );
    // The settled calls' events are complete; the pending call has none yet.
    assert_one_terminal_per_start(&events);
    assert!(
        !events
            .iter()
            .any(|e| e.call_id().is_some_and(|id| id.as_str() == "p2"))
    );
    assert!(matches!(
        events.last(),
        Some(AgentEvent::RunCompleted {
            status: RunStatus::AwaitingApproval,
            ..
        })
    ));
}

/// Resume after JSON: the suspended state is written to JSON and read back
/// (a restart), a fresh harness resumes it with an approval, the approved
/// call runs exactly once, the settled calls do not run again, the budget
/// carries over and the transcript pairs every call in call order.
#[tokio::test]
async fn resume_after_json_runs_the_approved_call_exactly_once() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let run = mixed_harness(&model, &read, &deploy, &write)
        .run("go")
        .await
        .unwrap();
    let suspended = through_json(&run);
    let decisions = approve_all(&suspended);

    let restarted = mixed_harness(&model, &read, &deploy, &write);
    let (run, events) = resume_collecting(&restarted, suspended, &decisions).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert_eq!(
        (calls_of(&read), calls_of(&deploy), calls_of(&write)),
        (2, 1, 0)
    );
    assert_eq!(
        run.budget.tool_calls, 4,
        "the approved call spent one slot, reserved again on resume"
    );
    assert_eq!(run.budget.model_calls, 2);
    assert_transcript_paired(&run.messages);
    let contents: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    assert_eq!(contents[0], "ok a");
    assert_eq!(contents[1], "ok prod");
    assert!(contents[2].starts_with("denied by tool_allowlist"));
    assert_eq!(contents[3], "ok b");
    assert_eq!(
        read_by_model(&model),
        tool_results(&run.messages),
        "the model read every result"
    );
    assert_one_terminal_per_start(&events);
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["p2"], "only the approved call runs on resume");
}

/// Resume: a denied call gets a refusal result the model reads, with the
/// person's reason; it never runs.
#[tokio::test]
async fn resume_with_a_denial_gives_the_call_a_refusal_result() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions: Vec<_> = suspended
        .pending()
        .map(|p| p.deny("not during the freeze"))
        .collect();
    let (run, events) = resume_collecting(&harness, suspended, &decisions).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        read_by_model(&model)[1],
        (
            "deploy".into(),
            "denied by a person: not during the freeze".into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
    assert_one_terminal_per_start(&events);
}

/// Resume: an approval binds to the call's arguments. When the stored
/// pending call's arguments were changed after the approval was made, the
/// call is refused, not run.
#[tokio::test]
async fn an_approval_does_not_apply_to_a_pending_call_whose_arguments_changed() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let mut suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    for entry in &mut suspended.turn {
        if let TurnEntry::Pending { pending } = entry {
            pending.call.arguments = json!({"tag": "prod --force"});
        }
    }
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        tool_results(&run.messages)[1],
        (
            "deploy".into(),
            "refused: the approval does not match this call's tool or arguments, so it was not run"
                .into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
}

/// Resume: an approval built from a different call (same id, other
/// arguments) does not approve the pending call; it is refused, not run.
#[tokio::test]
async fn an_approval_built_from_a_different_call_does_not_apply() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let mut other = suspended.pending().next().unwrap().clone();
    other.call.arguments = json!({"tag": "staging"});
    let decisions = [other.approve()];
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(calls_of(&deploy), 0);
    assert!(
        tool_results(&run.messages)[1]
            .1
            .starts_with("refused: the approval does not match")
    );
}

/// Resume: a resume missing a decision for a pending call is an error, runs
/// nothing and emits only its `RunStarted` and `RunFailed` (every segment's
/// stream opens and ends once); the same state resumed again with the decision
/// completes (nothing was lost).
#[tokio::test]
async fn a_resume_missing_a_decision_is_an_error_that_loses_nothing() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let run = harness.run("go").await.unwrap();
    let stored = serde_json::to_string(run.suspended.as_ref().unwrap()).unwrap();

    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let (result, events) = resume_collecting(&harness, suspended, &[]).await;
    assert_eq!(
        result.unwrap_err(),
        TinyAgentsError::State(
            "no decision for pending call p2 (deploy); every pending call needs one".into()
        )
    );
    assert_eq!(
        events,
        [
            AgentEvent::RunStarted {
                run_id: run.run_id.clone(),
                agent_id: None,
            },
            AgentEvent::RunFailed {
                error: "state error: no decision for pending call p2 (deploy); every pending call needs one".into()
            }
        ]
    );
    assert_eq!((calls_of(&read), calls_of(&deploy)), (2, 0));
    assert_eq!(model.calls(), 1);

    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
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
    assert_eq!((calls_of(&read), calls_of(&deploy)), (2, 1));
}

/// Resume: a state of another format is refused with a clear error, and
/// nothing runs.
#[tokio::test]
async fn a_suspended_state_of_another_format_is_refused() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let run = harness.run("go").await.unwrap();
    let mut stored: Value = serde_json::to_value(run.suspended.as_ref().unwrap()).unwrap();
    stored["format"] = json!(tinyagents::harness::SUSPENDED_RUN_FORMAT + 1);
    let suspended: SuspendedRun = serde_json::from_value(stored).unwrap();
    let decisions = approve_all(&suspended);
    let error = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        TinyAgentsError::State(format!(
            "suspended run {} has format {}, this version reads format {}",
            run.run_id,
            tinyagents::harness::SUSPENDED_RUN_FORMAT + 1,
            tinyagents::harness::SUSPENDED_RUN_FORMAT
        ))
    );
    assert_eq!(calls_of(&deploy), 0);
}

/// Resume: waiting for a person does not spend the wall-clock budget. With
/// a 10-minute budget, a run that was active 4 minutes waits an hour
/// (paused time), is resumed after JSON, runs 4 more minutes and completes.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_person_does_not_spend_the_wall_clock_budget() {
    let read = ProbeTool::new("read", true, Behaviour::Sleep(Duration::from_secs(240)))
        .with_spec(ToolSpec::read_only);
    let deploy = ProbeTool::new("deploy", false, Behaviour::Sleep(Duration::from_secs(240)))
        .with_spec(ToolSpec::approval_required);
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let limits = RunLimits::default()
        .with_wall_clock(Some(Duration::from_secs(600)))
        .with_tool_timeout(None);
    let tools: [Arc<dyn Tool>; 2] = [read.clone(), deploy.clone()];
    let configure = |b: AgentHarnessBuilder| {
        b.limits(limits.clone())
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    };
    let run = build(&model, &tools, configure).run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(suspended.active_ms, 240_000);

    tokio::time::advance(Duration::from_secs(3600)).await;

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
        tool_results(&run.messages)[1],
        ("deploy".into(), "slept prod".into(), false)
    );
    assert_eq!(calls_of(&deploy), 1);
}

/// Resume: the active time before the suspension still counts. With a
/// 10-minute budget, 6 minutes active before and a 6-minute call after,
/// the call is cut at the 4 minutes left and the run reaches its limit.
#[tokio::test(start_paused = true)]
async fn active_time_before_the_suspension_still_counts_after_resume() {
    let read = ProbeTool::new("read", true, Behaviour::Sleep(Duration::from_secs(360)))
        .with_spec(ToolSpec::read_only);
    let deploy = ProbeTool::new("deploy", false, Behaviour::Sleep(Duration::from_secs(360)))
        .with_spec(ToolSpec::approval_required);
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let limits = RunLimits::default()
        .with_wall_clock(Some(Duration::from_secs(600)))
        .with_tool_timeout(None)
        .with_behavior(LimitBehavior::Stop);
    let harness = build(&model, &[read.clone(), deploy.clone()], |b| {
        b.limits(limits)
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    tokio::time::advance(Duration::from_secs(3600)).await;
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
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::WallClock));
    assert_eq!(
        tool_results(&run.messages)[1],
        (
            "deploy".into(),
            "'deploy' timed out after 240000 ms".into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
}

/// Resume: a resumed run that meets another flagged call suspends again;
/// call ids keep counting across the segments, and the second approval
/// completes the run.
#[tokio::test]
async fn a_resumed_run_may_suspend_again_and_ids_keep_counting() {
    let deploy = deploy_tool();
    let model = script(vec![call("deploy", "one"), call("deploy", "two"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| {
        b.middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let first = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&first);
    let run = harness
        .resume(first, &decisions, Default::default(), &EventSink::none())
        .await
        .unwrap();
    let second = through_json(&run);
    assert_eq!(
        second
            .pending()
            .map(|p| p.call.id.to_string())
            .collect::<Vec<_>>(),
        ["p2"]
    );
    let decisions = approve_all(&second);
    let run = harness
        .resume(second, &decisions, Default::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&deploy), 2);
    assert_eq!(
        tool_results(&run.messages),
        vec![
            ("deploy".into(), "ok one".into(), false),
            ("deploy".into(), "ok two".into(), false)
        ]
    );
}

/// Resume: the approved call is re-admitted through before_tool, but a
/// stateful policy must not count it twice: RepeatProgress (K = 2) lets the
/// single approved deploy run.
#[tokio::test]
async fn an_approved_call_is_not_counted_twice_by_repeat_progress() {
    let deploy = deploy_tool();
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
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
    assert_eq!(
        tool_results(&run.messages),
        vec![("deploy".into(), "ok prod".into(), false)]
    );
    assert_eq!(calls_of(&deploy), 1);
}

/// Resume: output screening also applies when the resumed segment ends the
/// run (an approved tool that returns its answer directly), not only when a
/// run ends without a suspension.
#[tokio::test]
async fn output_screening_applies_to_a_run_that_ends_after_resume() {
    let direct = ProbeTool::new(
        "direct",
        false,
        Behaviour::Return(ToolResult::text("Alice Smith").with_control(ToolControl::ReturnDirect)),
    )
    .with_spec(ToolSpec::approval_required);
    let model = script(vec![call("direct", ""), done()]);
    let gate = Arc::new(Gate {
        target: "",
        mode: GateMode::Allow,
        screen: Screen::Block,
        asked: Log::default(),
    });
    let harness = build(&model, &[direct], |b| {
        b.security_gate(gate)
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    let result = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await;
    assert_eq!(
        result.map(|run| run.final_text),
        Err(TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "the answer names a customer".into()
        })
    );
}
