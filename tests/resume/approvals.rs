//! Item 1 and 4d: an approval binds the run, the call id, the tool and the
//! arguments, and is used once.

use super::*;

/// A run whose one call (`read_report {"tag":"q3"}`) waits for a person,
/// with `wire_money` registered beside it and needing no approval.
async fn report_suspended() -> (AgentHarness, Arc<ProbeTool>, Arc<ProbeTool>, SuspendedRun) {
    let report = flagged("read_report");
    let wire = plain("wire_money");
    let model = script(vec![
        ScriptedModel::tool_call("read_report", json!({"tag": "q3"})),
        done(),
    ]);
    let harness = build(&model, &[report.clone(), wire.clone()], |b| b);
    let suspended = through_json(&harness.run("go").await.unwrap());
    (harness, report, wire, suspended)
}

/// Issue 11 item 1: a stored state edited from `read_report` to
/// `wire_money` (same id, same arguments, the transcript edited too) does
/// not run `wire_money` under the approval given for `read_report`: the
/// call is refused and neither tool runs.
#[tokio::test]
async fn i11_1_an_approval_for_one_tool_does_not_run_another_under_the_same_id_and_arguments() {
    let (harness, report, wire, mut suspended) = report_suspended().await;
    let decisions = approve_all(&suspended);
    for pending in pending_mut(&mut suspended) {
        pending.call.name = "wire_money".into();
    }
    issued_mut(&mut suspended)[0].name = "wire_money".into();
    let run = resume(&harness, suspended, &decisions).await.unwrap();
    assert_eq!((calls_of(&report), calls_of(&wire)), (0, 0));
    assert_eq!(
        tool_results(&run.messages),
        [(
            "wire_money".to_owned(),
            "refused: the approval does not match this call's tool or arguments, so it was not run"
                .to_owned(),
            true
        )]
    );
    assert_transcript_paired(&run.messages);
}

/// Issue 11 item 1: editing only the waiting call (not the transcript) is
/// refused as a whole before anything runs, naming the mismatch.
#[tokio::test]
async fn i11_1_a_waiting_call_that_differs_from_the_issued_call_is_refused_before_anything_runs() {
    let (harness, report, wire, mut suspended) = report_suspended().await;
    let decisions = approve_all(&suspended);
    for pending in pending_mut(&mut suspended) {
        pending.call.name = "wire_money".into();
    }
    let text = refusal(resume(&harness, suspended, &decisions).await);
    assert!(
        text.contains("does not match the calls the model issued at call p1 (read_report)"),
        "{text}"
    );
    assert!(text.ends_with("nothing was run"), "{text}");
    assert_eq!((calls_of(&report), calls_of(&wire)), (0, 0));
}

/// Issue 11 item 1: a decision made for another run (same call id) is
/// refused, and so is one naming a call that does not wait or two
/// decisions for one call; nothing runs.
#[tokio::test]
async fn i11_1_decisions_must_name_a_waiting_call_of_this_run_once() {
    let (harness, report, wire, suspended) = report_suspended().await;
    let approval = approve_all(&suspended).remove(0);

    let mut other_run = approval.clone();
    other_run.run_id = RunId::new("another-run");
    let text = refusal(resume(&harness, suspended.clone(), &[other_run]).await);
    assert!(
        text.contains("was given for run another-run, not for run"),
        "{text}"
    );

    let mut not_waiting = approval.clone();
    not_waiting.call_id = CallId::new("p7");
    let text = refusal(
        resume(
            &harness,
            suspended.clone(),
            &[approval.clone(), not_waiting],
        )
        .await,
    );
    assert!(
        text.contains("names call p7, which is not waiting"),
        "{text}"
    );

    let text = refusal(resume(&harness, suspended, &[approval.clone(), approval]).await);
    assert!(
        text.contains("call p1 has more than one decision"),
        "{text}"
    );
    assert_eq!((calls_of(&report), calls_of(&wire)), (0, 0));
}

/// Issue 11 item 1: the approvals of a context bind the run, the call id,
/// the tool and the arguments, and are used once.
#[test]
fn i11_1_a_granted_approval_binds_run_id_tool_and_arguments_and_is_used_once() {
    let mut ctx = RunContext::new(RunId::new("run-a"), RunLimits::default());
    let call = ToolCall::new(CallId::new("p1"), "read_report", json!({"tag": "q3"}));
    ctx.approve_call(&call);
    assert!(ctx.is_call_approved(&call));
    let other_tool = ToolCall::new(CallId::new("p1"), "wire_money", json!({"tag": "q3"}));
    assert!(!ctx.is_call_approved(&other_tool));
    let other_args = ToolCall::new(CallId::new("p1"), "read_report", json!({"tag": "q4"}));
    assert!(!ctx.is_call_approved(&other_args));
    let mut other_run = RunContext::new(RunId::new("run-b"), RunLimits::default());
    other_run.approvals = ctx.approvals.clone();
    assert!(!other_run.is_call_approved(&call));
    let run = ctx.run_id.clone();
    assert!(ctx.approvals.consume(&run, &call));
    assert!(!ctx.is_call_approved(&call), "an approval is used once");
    assert!(!ctx.approvals.consume(&run, &call));
}

/// Issue 11 item 4d: without a ledger, resuming the same stored state three
/// times on one harness runs the approved call once; the later resumes are
/// refused whole, before anything runs (issue 13: the simulator found that
/// a second resume that went on repeated every turn after the suspended
/// one, and the effects in them).
#[tokio::test]
async fn i11_4d_resuming_one_state_three_times_without_a_ledger_runs_the_approved_call_once() {
    let deploy = flagged("deploy");
    let model = script(vec![
        ScriptedModel::tool_call("deploy", json!({"tag": "prod"})),
        done(),
        done(),
        done(),
    ]);
    let harness = build(&model, &[deploy.clone()], |b| b);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    let first = resume(&harness, suspended.clone(), &decisions)
        .await
        .unwrap();
    assert_eq!(tool_results(&first.messages)[0].1, "ok prod");
    for _ in 0..2 {
        let again = resume(&harness, suspended.clone(), &decisions)
            .await
            .unwrap_err();
        assert_eq!(
            again,
            TinyAgentsError::State(format!(
                "run {} was resumed from this suspended state before (call p1 was decided then): a suspended state resumes once, and without an effect ledger this harness remembers that for its lifetime",
                suspended.run_id
            ))
        );
    }
    assert_eq!(calls_of(&deploy), 1);
    assert_eq!(
        model.calls(),
        2,
        "no turn after the suspended one ran again"
    );
}
