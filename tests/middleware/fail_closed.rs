//! Fail closed: errors and panics in hooks, gates, output screening and wraps.

use super::*;

/// Fail closed: an Err from before_tool refuses the call with a message
/// naming the middleware; the tool never runs, the model reads why.
#[tokio::test]
async fn an_error_in_before_tool_refuses_the_call() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("audit", &log).failing(Hook::BeforeTool).arc())
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&probe), 0);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "write".into(),
            "denied by audit: state error: audit's store is offline".into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// Fail closed: an Err from after_tool withholds the result (the tool ran,
/// but the model reads a refusal naming the middleware, never the result)
/// and the call's terminal event is a failure.
#[tokio::test]
async fn an_error_in_after_tool_withholds_the_result() {
    let log = Arc::new(Log::default());
    let probe = ProbeTool::new(
        "read",
        true,
        Behaviour::Return(ToolResult::text("the confidential figures")),
    );
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("dlp", &log).failing(Hook::AfterTool).arc())
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(calls_of(&probe), 1);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "read".into(),
            "result withheld: denied by dlp: state error: dlp's store is offline".into(),
            true
        )]
    );
    assert!(!format!("{:?}", run.messages).contains("confidential"));
    assert!(!events_text(&events).contains("confidential"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolFailed { .. }))
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolCompleted { .. }))
    );
}

/// Fail closed: an Err from before_model ends the run with `Denied` naming
/// the middleware; the model is never called.
#[tokio::test]
async fn an_error_in_before_model_ends_the_run_denied() {
    let log = Arc::new(Log::default());
    let model = script(vec![done()]);
    let harness = build(&model, &[], |b| {
        b.middleware(Hooks::new("budget", &log).failing(Hook::BeforeModel).arc())
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "budget".into(),
            reason: "state error: budget's store is offline".into()
        }
    );
    assert_eq!(model.calls(), 0);
}

/// Fail closed: an Err from after_model ends the run with `Denied` naming
/// the middleware; the response's tool calls never run.
#[tokio::test]
async fn an_error_in_after_model_ends_the_run_denied() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("guard", &log).failing(Hook::AfterModel).arc())
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "guard".into(),
            reason: "state error: guard's store is offline".into()
        }
    );
    assert_eq!(calls_of(&probe), 0);
}

/// Fail closed: a gate that returns an error refuses the call, saying so.
#[tokio::test]
async fn a_gate_that_errors_refuses_the_call() {
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.security_gate(Gate::new("write", GateMode::Fail))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(calls_of(&probe), 0);
    assert_eq!(
        tool_results(&run.unwrap().messages),
        vec![(
            "write".into(),
            "denied by security gate: the gate failed: state error: policy store unreachable"
                .into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// Fail closed: a gate that panics refuses the call; the run goes on.
#[tokio::test]
async fn a_gate_that_panics_refuses_the_call() {
    let probe = write_tool("write");
    let read = read_tool("read");
    let model = script(vec![
        turn(&[probe_call("write", "a"), probe_call("read", "b")]),
        done(),
    ]);
    let harness = build(&model, &[probe.clone(), read.clone()], |b| {
        b.security_gate(Gate::new("write", GateMode::Panic))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&probe), calls_of(&read)), (0, 1));
    assert_eq!(
        tool_results(&run.messages),
        vec![
            (
                "write".into(),
                "denied by security gate: the gate panicked".into(),
                true
            ),
            ("read".into(), "ok b".into(), false),
        ]
    );
}

/// A gate that says Ask defers a model-issued call; approved on resume, the
/// gate is asked again, sees the approval, and the call runs once.
#[tokio::test]
async fn a_gate_that_asks_defers_the_call_until_approved() {
    let probe = write_tool("write");
    let gate = Gate::new("write", GateMode::Ask);
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| b.security_gate(gate.clone()));
    let run = harness.run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(
        suspended.pending().next().unwrap().reason,
        "ask the on-call engineer (asked by the security gate)"
    );
    assert_eq!(calls_of(&probe), 0);
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
    assert_eq!(calls_of(&probe), 1);
    let asked = gate
        .asked
        .entries()
        .iter()
        .filter(|e| e.starts_with("p1 write"))
        .count();
    assert_eq!(asked, 2, "asked at admission and again on resume");
}

/// Fail closed: output screening that errors blocks the final answer; the
/// run ends with `Denied`.
#[tokio::test]
async fn output_screening_that_errors_blocks_the_answer() {
    let model = script(vec![ChatResponse::text("the answer")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Fail))
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "screening failed, output blocked: state error: screening service down".into()
        }
    );
}

/// Output screening that blocks ends the run with `Denied` and its reason.
#[tokio::test]
async fn output_screening_that_blocks_ends_the_run_denied() {
    let model = script(vec![ChatResponse::text("Alice Smith owes 300 EUR")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Block))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(
        run.unwrap_err(),
        TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "the answer names a customer".into()
        }
    );
    assert!(!events.iter().any(|e| matches!(
        e,
        AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            ..
        }
    )));
}

/// Output screening also screens an answer a tool returns directly.
#[tokio::test]
async fn output_screening_blocks_a_return_direct_answer() {
    let direct = ProbeTool::new(
        "direct",
        false,
        Behaviour::Return(ToolResult::text("Alice Smith").with_control(ToolControl::ReturnDirect)),
    );
    let model = script(vec![call("direct", ""), done()]);
    let harness = build(&model, &[direct], |b| {
        b.security_gate(Gate::screening(Screen::Block))
    });
    assert!(matches!(
        harness.run("go").await,
        Err(TinyAgentsError::Denied { .. })
    ));
}

/// Output screening may rewrite the answer: the run delivers the rewrite,
/// and the transcript holds it instead of the original.
#[tokio::test]
async fn output_screening_may_rewrite_the_answer() {
    let model = script(vec![ChatResponse::text("Alice Smith owes 300 EUR")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Rewrite(
            "[a customer] owes 300 EUR",
        )))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "[a customer] owes 300 EUR");
    assert!(!format!("{:?}", run.messages).contains("Alice"));
}

/// Fail closed: a wrap layer may refuse a call (the tool never runs), and a
/// wrap layer that panics fails only that call.
#[tokio::test]
async fn a_wrap_that_refuses_or_panics_fails_the_call_closed() {
    for panic in [false, true] {
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let mut layer = Layer::new("screen");
        layer.refuse = !panic;
        layer.panic = panic;
        let harness = build(&model, &[probe.clone()], |b| {
            b.tool_middleware(Arc::new(layer))
        });
        let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
        let run = run.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(calls_of(&probe), 0);
        let (_, content, is_error) = &tool_results(&run.messages)[0];
        assert!(is_error);
        if panic {
            assert!(content.contains("panicked"), "{content}");
        } else {
            assert_eq!(content, "denied by screen: no write");
        }
        assert_one_terminal_per_start(&events);
    }
}
