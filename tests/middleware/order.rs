//! Order rules: hooks, wrap layers, rewrites, combined verdicts and the gate.

use super::*;

/// Order: before_model and before_tool run in registration order,
/// after_model and after_tool in reverse; wrap layers sit between
/// before_tool and after_tool, first registered outermost.
#[tokio::test]
async fn hooks_run_before_in_registration_order_and_after_in_reverse() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe], |b| {
        b.middleware(Hooks::new("A", &log).arc())
            .middleware(Hooks::new("B", &log).arc())
            .middleware(Hooks::new("C", &log).arc())
            .tool_middleware(Arc::new(Layer::new("W1").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("W2").logging(&log)))
    });
    harness.run("go").await.unwrap();
    let expected = [
        "before_model A",
        "before_model B",
        "before_model C",
        "after_model C",
        "after_model B",
        "after_model A",
        "before_tool A",
        "before_tool B",
        "before_tool C",
        "enter W1",
        "enter W2",
        "exit W2",
        "exit W1",
        "after_tool C",
        "after_tool B",
        "after_tool A",
        "before_model A",
        "before_model B",
        "before_model C",
        "after_model C",
        "after_model B",
        "after_model A",
    ];
    assert_eq!(log.entries(), expected);
}

/// Order: wrap layers nest first-registered outermost, for every call of a
/// turn (three layers, two calls run one after the other).
#[tokio::test]
async fn wrap_layers_nest_first_registered_outermost() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("write", "1"), probe_call("write", "2")]),
        done(),
    ]);
    let harness = build(&model, &[probe], |b| {
        b.tool_middleware(Arc::new(Layer::new("outer").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("middle").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("inner").logging(&log)))
    });
    harness.run("go").await.unwrap();
    let one = [
        "enter outer",
        "enter middle",
        "enter inner",
        "exit inner",
        "exit middle",
        "exit outer",
    ];
    assert_eq!(log.entries(), [one, one].concat());
}

/// Order: before_tool rewrites flow in registration order (each sees the
/// previous rewrite, the tool gets the last), after_tool rewrites in
/// reverse.
#[tokio::test]
async fn rewrites_flow_through_before_tool_in_order_and_after_tool_in_reverse() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "-"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("A", &log).stamping().arc())
            .middleware(Hooks::new("B", &log).stamping().arc())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(probe.order.entries()[0], "start -AB");
    assert_eq!(tool_results(&run.messages)[0].1, "ok -AB +B +A");
}

/// A before_tool that changes which tool is called is refused (fail
/// closed), naming the middleware; neither tool runs.
#[tokio::test]
async fn a_before_tool_that_renames_the_call_is_refused() {
    let log = Arc::new(Log::default());
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Hooks::new("sneaky", &log).renaming("write").arc())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&write)), (0, 0));
    assert_eq!(
        tool_results(&run.messages)[0].1,
        "denied by sneaky: a middleware may not change which tool is called"
    );
}

/// Verdicts combine most-restrictive first: with allow, defer and deny
/// registered in each of the six orders the call is denied (by the denier),
/// and with allow and defer in either order it is deferred.
#[tokio::test]
async fn verdicts_combine_deny_over_defer_over_allow_in_any_registration_order() {
    let verdicts = [
        ("allower", ToolVerdict::Allow),
        ("deferrer", defer("hold it")),
        ("denier", deny("never")),
    ];
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |mut b| {
            for i in order {
                let (name, verdict) = verdicts[i].clone();
                b = b.middleware(Hooks::new(name, &log).verdict(verdict).arc());
            }
            b
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "order {order:?}");
        assert_eq!(calls_of(&probe), 0, "order {order:?}");
        assert_eq!(
            tool_results(&run.messages)[0].1,
            "denied by denier: never",
            "order {order:?}"
        );
    }
    for order in [[0, 1], [1, 0]] {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |mut b| {
            for i in order {
                let (name, verdict) = verdicts[i].clone();
                b = b.middleware(Hooks::new(name, &log).verdict(verdict).arc());
            }
            b
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(run.status, RunStatus::AwaitingApproval, "order {order:?}");
        assert_eq!(
            run.pending()[0].reason,
            "hold it (asked by policy 'deferrer')"
        );
        assert_eq!(calls_of(&probe), 0);
    }
}

/// Verdicts combine across the gate too: a gate's denial beats a
/// middleware's deferral, and a middleware's deferral stands when the gate
/// allows.
#[tokio::test]
async fn a_gate_denial_beats_a_middleware_deferral_and_a_gate_allow_keeps_it() {
    for (mode, awaiting) in [(GateMode::Deny, false), (GateMode::Allow, true)] {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |b| {
            b.middleware(Hooks::new("deferrer", &log).verdict(defer("hold it")).arc())
                .security_gate(Gate::new("write", mode))
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(calls_of(&probe), 0);
        if awaiting {
            assert_eq!(run.status, RunStatus::AwaitingApproval);
        } else {
            assert_eq!(run.status, RunStatus::Completed);
            assert_eq!(
                tool_results(&run.messages)[0].1,
                "denied by security gate: not on weekends"
            );
        }
    }
}

/// The gate is asked about each admitted model-issued call with its id, the
/// tool's spec, the prepared arguments, the agent, and is_nested() false.
#[tokio::test]
async fn the_gate_sees_each_call_with_its_id_spec_arguments_and_agent() {
    let gate = Gate::new("none", GateMode::Allow);
    let read = read_tool("read");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("read", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read], |b| {
        b.security_gate(gate.clone())
            .agent_id(tinyagents::core::AgentId::new("ops"))
    });
    harness.run("go").await.unwrap();
    assert_eq!(
        gate.asked.entries(),
        [
            r#"p1 read nested=false agent=ops args={"tag":"a"}"#,
            r#"p2 read nested=false agent=ops args={"tag":"b"}"#,
            "screen done",
        ]
    );
}
