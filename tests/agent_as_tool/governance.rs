//! Governance (AT-24..AT-27).

use super::*;

/// rule AT-24: delegated runs omit deny, approval-required and (air-gapped) network-egress tools; default and auto-approved tools stay.
#[tokio::test]
async fn at_24_delegated_runs_omit_denied_approval_and_egress_tools() {
    let tools = HostTools::new()
        .with_shared(ok_tool("plain") as Arc<dyn Tool>)
        .with_shared(ok_tool("denied") as Arc<dyn Tool>)
        .with_shared(ok_tool("needs_ok") as Arc<dyn Tool>)
        .with_shared(ok_tool("spec_ok").with_spec(ToolSpec::approval_required) as Arc<dyn Tool>)
        .with_shared(ok_tool("auto").with_spec(ToolSpec::approval_required) as Arc<dyn Tool>)
        .with_shared(
            ok_tool("web").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS))
                as Arc<dyn Tool>,
        );
    let child_def = exposed("child", "Child")
        .tools(["plain", "denied", "needs_ok", "spec_ok", "auto", "web"])
        .tool_policy("denied", ToolPolicy::Deny)
        .tool_policy("needs_ok", ToolPolicy::RequireApproval)
        .tool_policy("auto", ToolPolicy::AutoApprove);
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["child"]),
        child_def,
    ];
    let child = echo("child");
    let models = by_agent(&[
        ("root", delegating("Child", None)),
        ("child", Arc::clone(&child)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).tools(tools.clone()))
        .await
        .unwrap();
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(child.seen()[0].tools, ["plain", "auto", "web"]);
    let delegated = &root.agent().agent_tools()[0];
    let omitted: Vec<(String, OmitReason)> = delegated
        .omitted_tools(false)
        .iter()
        .map(|o| (o.name.clone(), o.reason))
        .collect();
    assert_eq!(
        omitted,
        [
            ("denied".to_owned(), OmitReason::Denied),
            ("needs_ok".to_owned(), OmitReason::ApprovalRequired),
            ("spec_ok".to_owned(), OmitReason::ApprovalRequired),
        ]
    );
    assert_eq!(delegated.tools(true), ["plain", "auto"]);

    // Air-gapped, the egress tool goes too.
    let gapped = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(tools.clone())
                .air_gapped(true),
        )
        .await
        .unwrap();
    gapped
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(child.seen().last().unwrap().tools, ["plain", "auto"]);

    // Requested directly, approval tools stay and wait for a person.
    let asks = TestModel::new(|_| call("needs_ok", json!({"tag": "x"})));
    let models = by_agent(&[("child", asks)]);
    let (orchestrator, _) = self::orchestrator();
    let direct = orchestrator
        .get_or_create_agent(request("child", &defs, &models).tools(tools))
        .await
        .unwrap();
    assert_eq!(
        direct.agent().tools(false),
        ["plain", "needs_ok", "spec_ok", "auto", "web"]
    );
    let run = direct
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
}

/// rule AT-25: host runtime middleware is installed on every built agent and records the called agent's identity.
#[tokio::test]
async fn at_25_host_middleware_on_every_agent_records_the_called_agent() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("probe", json!({"tag": "t"})),
    });
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", helper)]);
    let recorder = Arc::new(Recorder::default());
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>))
                .run_middleware(recorder.clone()),
        )
        .await
        .unwrap();
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        recorder.hooks(),
        [
            pair("root", "model"),
            pair("root", "Helper"),
            pair("helper", "model"),
            pair("helper", "probe"),
            pair("helper", "model"),
            pair("root", "model"),
        ]
    );
}

/// rule AT-26: every built agent's loop is capped at 40 model calls per request; a nested child request has its own 40.
#[tokio::test]
async fn at_26_forty_iterations_per_request() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let looping = TestModel::new(|_| call("probe", json!({"tag": "again"})));
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", Arc::clone(&looping)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    assert_eq!(root.harness().limits().max_model_calls, 40);
    let run = root
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(looping.calls(), 40, "the child's own 40");
    let (_, content, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert!(
        *is_error && content.contains("max_model_calls (limit 40"),
        "{content}"
    );
    assert_eq!(
        run.budget.model_calls, 2,
        "the parent's request is separate"
    );
}

fn failing_iterations(failures: usize) -> Arc<TestModel> {
    TestModel::new(move |seen| {
        if seen.tool_results().len() < failures {
            call("broken", json!({"tag": "x"}))
        } else {
            text("recovered")
        }
    })
}

/// rule AT-26: three consecutive failing iterations are tolerated and the fourth ends the request (both edges).
#[tokio::test]
async fn at_26_three_consecutive_failing_iterations_pass_and_the_fourth_ends_the_request() {
    let defs = [AgentDefinition::new("solo", "Solo").tools(["broken", "fine"])];
    let tools = HostTools::new()
        .with_shared(
            ProbeTool::new("broken", false, Behaviour::Raise("nope".into())) as Arc<dyn Tool>,
        )
        .with_shared(ok_tool("fine") as Arc<dyn Tool>);
    for (failures, ends) in [(3, false), (4, true)] {
        let model = failing_iterations(failures);
        let models = by_agent(&[("solo", Arc::clone(&model))]);
        let (orchestrator, _) = orchestrator();
        let solo = orchestrator
            .get_or_create_agent(request("solo", &defs, &models).tools(tools.clone()))
            .await
            .unwrap();
        let result = solo.run(RunRequest::new("go"), &EventSink::none()).await;
        if ends {
            let Err(RunError::Run {
                source: TinyAgentsError::Denied { by, reason },
            }) = result
            else {
                panic!("the fourth failing iteration ends the request: {result:?}");
            };
            assert_eq!(by, "function_loop_caps");
            assert!(reason.starts_with("4 consecutive"), "{reason}");
            assert_eq!(model.calls(), 4);
        } else {
            assert_eq!(result.unwrap().final_text, "recovered");
            assert_eq!(model.calls(), 4);
        }
    }

    // A successful iteration resets the count.
    let model = TestModel::new(|seen| {
        let n = seen.tool_results().len();
        match n {
            0..=2 | 4..=6 => call("broken", json!({"tag": "x"})),
            3 => call("fine", json!({"tag": "x"})),
            _ => text("recovered"),
        }
    });
    let models = by_agent(&[("solo", Arc::clone(&model))]);
    let (orchestrator, _) = orchestrator();
    let solo = orchestrator
        .get_or_create_agent(request("solo", &defs, &models).tools(tools))
        .await
        .unwrap();
    let run = solo
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.final_text, "recovered");
}

/// rule AT-27: a tool's detailed error text is kept from the model by default; the harness's refusals are not such detail.
#[tokio::test]
async fn at_27_detailed_error_text_is_kept_from_the_model_by_default() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper", "broken"]),
        exposed("helper", "Helper").tools(["leaky"]),
        exposed("broken", "Broken"),
    ];
    let tools = HostTools::new().with_shared(ProbeTool::new(
        "leaky",
        false,
        Behaviour::Raise("db password hunter2".into()),
    ) as Arc<dyn Tool>);
    for detailed in [false, true] {
        let helper = TestModel::new(|seen| match seen.last_tool() {
            Some(result) => text(result),
            None => call("leaky", json!({"tag": "x"})),
        });
        let root_model = TestModel::new(|seen| match seen.tool_results().len() {
            0 => call("Broken", json!({"query": "q"})),
            1 => call("Helper", json!({"query": "q"})),
            _ => text("done"),
        });
        let broken = TestModel::new(|_| {
            Step::Fail(ModelError::Authentication {
                message: "key sk-123 refused".into(),
            })
        });
        let models = by_agent(&[
            ("root", Arc::clone(&root_model)),
            ("helper", Arc::clone(&helper)),
            ("broken", broken),
        ]);
        let store = Arc::new(InMemorySessionStore::new());
        let orchestrator = AgentOrchestrator::new(store).include_detailed_errors(detailed);
        let root = orchestrator
            .get_or_create_agent(request("root", &defs, &models).tools(tools.clone()))
            .await
            .unwrap();
        root.run(RunRequest::new("go"), &EventSink::none())
            .await
            .unwrap();
        let child_read = &helper.seen()[1].tool_results()[0].0;
        let parent_read = &root_model.seen()[1].tool_results()[0].0;
        if detailed {
            assert!(child_read.contains("hunter2"), "{child_read}");
            assert!(parent_read.contains("sk-123"), "{parent_read}");
        } else {
            assert_eq!(child_read, "tool 'leaky' failed (details withheld)");
            assert_eq!(parent_read, "tool 'Broken' failed (details withheld)");
        }
    }

    // A refusal of the harness (here: the depth cap) is not detail.
    let root_model = delegating("Helper", None);
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("helper", echo("h")),
        ("broken", echo("b")),
    ]);
    let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
        .limits(RunLimits::default().with_max_depth(0));
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).tools(tools))
        .await
        .unwrap();
    let run = root
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.final_text,
        "agent 'helper' failed: limit exceeded: max_depth (limit 0, used 1)"
    );
}
