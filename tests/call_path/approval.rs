//! Item 2: a tool whose spec declares `approval_required` or `external`
//! needs a person's approval whatever middlewares the host registered: on
//! the model path the run waits for it (no `HumanApprovalMiddleware`
//! needed), and a nested call of it is refused, since it cannot wait.

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents_tests::{
    assert_one_terminal_per_start, assert_transcript_paired, resume_collecting,
};

use crate::{
    Counted, Origin, answer, assert_one_run_end, counted, failed_error, harness, one_turn, run,
    spec, t,
};

fn gated(name: &str, declare: fn(ToolSpec) -> ToolSpec) -> Arc<Counted> {
    let label = format!("ran {name}");
    counted(declare(spec(name)), move |_| {
        Ok(ToolResult::text(label.clone()))
    })
}

/// A model-issued call of a tool declared by `declare` on a plain harness
/// (no approval middleware): it does not run, the run waits with the call
/// pending, and approving it runs it exactly once.
async fn a_model_issued_call_waits_for_approval(name: &str, declare: fn(ToolSpec) -> ToolSpec) {
    let tool = gated(name, declare);
    let harness = harness(
        one_turn(&[(name.to_owned(), json!({"env": "prod"}))]),
        vec![t(&tool)],
        |b| b,
    );
    let (result, events) = run(&harness).await;
    let first = result.unwrap();
    assert_eq!(tool.runs(), 0, "{name} ran without approval");
    assert_eq!(first.status, RunStatus::AwaitingApproval);
    let pending: Vec<(String, String)> = first
        .pending()
        .iter()
        .map(|p| (p.call.id.to_string(), p.call.name.clone()))
        .collect();
    assert_eq!(pending, [("p1".to_owned(), name.to_owned())]);
    assert_one_terminal_per_start(&events);
    assert_one_run_end(&events);

    let decision = first.pending()[0].approve();
    let suspended = first.suspended.clone().expect("the run is suspended");
    let (resumed, events) = resume_collecting(&harness, suspended, &[decision]).await;
    let resumed = resumed.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(tool.runs(), 1, "approved, {name} runs exactly once");
    assert_eq!(answer(&resumed, "p1"), Some((format!("ran {name}"), false)));
    assert_transcript_paired(&resumed.messages);
    assert_one_terminal_per_start(&events);
    assert_one_run_end(&events);
}

/// Item 2: a model-issued call of an `approval_required` tool, on a harness
/// without `HumanApprovalMiddleware`, does not run: the run ends
/// `AwaitingApproval` with the call pending, and approving it runs it once.
#[tokio::test]
async fn i10_2_model_issued_approval_required_call_waits_without_an_approval_middleware_and_runs_once_approved()
 {
    a_model_issued_call_waits_for_approval("deploy", ToolSpec::approval_required).await;
}

/// Item 2: a model-issued call of an `external` tool, on a harness without
/// `HumanApprovalMiddleware`, does not run: the run ends `AwaitingApproval`
/// with the call pending, and approving it runs it once.
#[tokio::test]
async fn i10_2_model_issued_external_call_waits_without_an_approval_middleware_and_runs_once_approved()
 {
    a_model_issued_call_waits_for_approval("remote", ToolSpec::external).await;
}

/// Item 2: a nested (`p1/1`) and a nested-of-nested (`p1/1/1`) call of an
/// `approval_required` and of an `external` tool are refused with exactly
/// "nested call '<name>' requires approval; nested calls cannot be
/// deferred", never run, and never suspend the run.
#[tokio::test]
async fn i10_2_nested_calls_of_approval_required_and_external_tools_are_refused_with_the_nested_text()
 {
    for origin in [Origin::Nested, Origin::NestedOfNested] {
        let deploy = gated("deploy", ToolSpec::approval_required);
        let remote = gated("remote", ToolSpec::external);
        let harness = harness(
            one_turn(&[
                origin.call("deploy", json!({})),
                origin.call("remote", json!({})),
            ]),
            vec![t(&deploy), t(&remote)],
            |b| b,
        );
        let (result, events) = run(&harness).await;
        let run = result.unwrap();
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "{origin:?}: never deferred"
        );
        assert!(run.pending().is_empty(), "{origin:?}");
        for (n, name) in [(1, "deploy"), (2, "remote")] {
            let text =
                format!("nested call '{name}' requires approval; nested calls cannot be deferred");
            let id = origin.id_of(n);
            assert_eq!(
                failed_error(&events, &id).as_deref(),
                Some(text.as_str()),
                "{origin:?}: the ToolFailed of {id}"
            );
            let (content, is_error) = answer(&run, &format!("p{n}")).unwrap();
            assert!(is_error && content.contains(&text), "{content}");
        }
        assert_eq!((deploy.runs(), remote.runs()), (0, 0), "{origin:?}");
        assert_one_terminal_per_start(&events);
        assert_one_run_end(&events);
    }
}

/// Item 2 (at the seam with execution): a model-issued call whose tool asks
/// for approval while it runs waits with its arguments intact — without a
/// middleware the arguments move into the tool, and the pending call gets
/// them back — and once approved it runs again with the same arguments.
#[tokio::test]
async fn i10_2_a_call_that_asks_for_approval_while_running_keeps_its_arguments_for_the_resume() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let tool = counted(spec("wire"), move |args| {
        let mut seen = record.lock().unwrap();
        seen.push(args.clone());
        if seen.len() == 1 {
            return Err(anyhow::Error::new(TinyAgentsError::ApprovalRequired {
                tool: "wire".into(),
                reason: "a second pair of eyes".into(),
            }));
        }
        Ok(ToolResult::text("wired"))
    });
    let harness = harness(
        one_turn(&[("wire".to_owned(), json!({"amount": 5}))]),
        vec![t(&tool)],
        |b| b,
    );
    let (result, _) = run(&harness).await;
    let first = result.unwrap();
    assert_eq!(first.status, RunStatus::AwaitingApproval);
    let pending = first.pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call.arguments, json!({"amount": 5}));

    let decision = pending[0].approve();
    let suspended = first.suspended.clone().expect("the run is suspended");
    let (resumed, events) = resume_collecting(&harness, suspended, &[decision]).await;
    let resumed = resumed.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(answer(&resumed, "p1"), Some(("wired".to_owned(), false)));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![json!({"amount": 5}), json!({"amount": 5})],
        "both executions got the model's arguments"
    );
    assert_one_terminal_per_start(&events);
}
