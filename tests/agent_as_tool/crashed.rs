//! A crash in the middle of a delegated call (issue 18, at the seam with
//! agents as tools): the child run is never continued on its own (its
//! answer would reach nobody), and the parent's recovery ends it, puts the
//! child's own calls in doubt to the child's tools, and answers the
//! delegated call "interrupted, outcome unknown". Nothing is repeated, and
//! nothing in doubt drops out of view.

use std::sync::atomic::Ordering;

use tinyagents::{harness::ResumeOptions, ledger::CallStatus};

use super::*;

#[tokio::test]
async fn i18_a_child_run_interrupted_by_a_crash_is_ended_by_its_parents_recovery_not_continued() {
    let started = Arc::new(Notify::new());
    let pay = ProbeTool::new("pay", false, Behaviour::BlockOnce(Arc::clone(&started)));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["pay"]),
    ];
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("pay", json!({"tag": "rent"})),
    });
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", Arc::clone(&helper)),
    ]);
    let ledger = Arc::new(MemoryLedger::new());
    let build_root = |models: Arc<dyn ModelFactory>| {
        let ledger = Arc::clone(&ledger) as Arc<dyn EffectLedger>;
        let pay = Arc::clone(&pay) as Arc<dyn Tool>;
        let defs = defs.clone();
        async move {
            AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
                .ledger(ledger)
                .get_or_create_agent(
                    request("root", &defs, &models).tools(HostTools::new().with_shared(pay)),
                )
                .await
                .unwrap()
        }
    };
    let first = build_root(Arc::clone(&models)).await;
    let none = EventSink::none();
    let run = first.run(
        RunRequest::new("pay the rent").with_run_id(RunId::new("top")),
        &none,
    );
    tokio::select! {
        _ = run => panic!("the run was meant to die while the helper paid"),
        () = started.notified() => {}
    }
    let unfinished = ledger.unfinished_runs().await.unwrap();
    assert_eq!(unfinished, [RunId::new("top"), RunId::new("top::p1")]);

    // A new process, on the same ledger.
    let second = build_root(models).await;
    let child = second
        .harness()
        .recover(
            &RunId::new("top::p1"),
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        child.contains("run top::p1 is a delegated run (depth 1): it is not recovered on its own"),
        "{child}"
    );
    let asked_before = helper.calls();
    let run = second
        .harness()
        .recover(
            &RunId::new("top"),
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let (_, answer, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert!(
        *is_error && answer.starts_with("interrupted, outcome unknown"),
        "{answer}"
    );
    assert_eq!(
        pay.calls.load(Ordering::SeqCst),
        1,
        "the payment was not repeated"
    );
    assert_eq!(helper.calls(), asked_before, "the helper was not continued");
    // The child is ended: nothing of it starts again; its payment, whose
    // tool cannot tell, stays listed in doubt with the delegated call.
    assert_eq!(
        ledger.run_state(&RunId::new("top::p1")).await.unwrap(),
        tinyagents::ledger::RunState::Finished
    );
    let in_doubt: Vec<(String, String)> = ledger
        .in_doubt()
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.row.run_id.to_string(), d.row.call_id.to_string()))
        .collect();
    assert_eq!(
        in_doubt,
        [("top".into(), "p1".into()), ("top::p1".into(), "p1".into())]
    );
    let paid = ledger
        .get(&RunId::new("top::p1"), &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(paid.status, CallStatus::Interrupted);
    assert!(paid.resolution.is_some(), "the child's tool was asked");
}
