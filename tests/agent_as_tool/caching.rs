//! Caching (AT-28..AT-30).

use super::*;

fn cache_defs() -> [AgentDefinition; 2] {
    [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["lookup"]),
    ]
}

/// rule AT-28: exposed agents are cached and reused; the requested agent only when not exposed, without customisers, without bypass.
#[tokio::test]
async fn at_28_exposed_agents_are_cached_and_the_requested_agent_only_when_allowed() {
    let models = by_agent(&[("root", echo("root")), ("helper", echo("helper"))]);
    let (orchestrator, _) = orchestrator();
    // Without host tools here: the helper names none (an unknown tool name
    // is a build error).
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let first = build(&orchestrator, "root", &defs, &models).await;
    let helper = orchestrator.agents().get(&"helper".into()).unwrap();
    let second = build(&orchestrator, "root", &defs, &models).await;
    assert!(
        Arc::ptr_eq(first.agent(), second.agent()),
        "requested cached"
    );
    assert!(Arc::ptr_eq(
        &helper,
        &orchestrator.agents().get(&"helper".into()).unwrap()
    ));

    let bypass = orchestrator
        .get_or_create_agent(request("root", &defs, &models).bypass_cache())
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(bypass.agent(), first.agent()));
    let customised = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models).customize_options(|o| o.temperature = Some(0.0)),
        )
        .await
        .unwrap();
    assert!(!Arc::ptr_eq(customised.agent(), first.agent()));
    assert!(Arc::ptr_eq(
        &orchestrator.cached_requested(&"root".into()).unwrap(),
        first.agent()
    ));
    // The exposed dependency was reused by all of them.
    assert!(Arc::ptr_eq(&bypass.agent().agent_tools()[0], &helper));

    // An exposed agent requested directly is built afresh, never cached.
    let a = build(&orchestrator, "helper", &defs, &models).await;
    let b = build(&orchestrator, "helper", &defs, &models).await;
    assert!(!Arc::ptr_eq(a.agent(), b.agent()));
    assert!(orchestrator.cached_requested(&"helper".into()).is_none());
    assert_eq!(a.agent().role(), AgentRole::Active);
    assert_eq!(helper.role(), AgentRole::Delegated);
}

/// rule AT-29: run-specific customisers apply to the requested agent only; the per-agent one rebuilds exposed agents, whose new builds replace their entries while earlier providers keep theirs.
#[tokio::test]
async fn at_29_customizers_apply_where_specified_and_rebuilt_children_replace_entries() {
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", echo("helper")),
    ]);
    let (orchestrator, _) = orchestrator();
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let earlier = build(&orchestrator, "root", &defs, &models).await;
    let old_helper = orchestrator.agents().get(&"helper".into()).unwrap();

    let general = Arc::new(Recorder::default());
    let options_seen = Arc::new(Mutex::new(0));
    let per_agent = Arc::new(Recorder::default());
    let (g, o, p) = (general.clone(), options_seen.clone(), per_agent.clone());
    let customised = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .customize_builder(move |b| b.middleware(g.clone()))
                .customize_options(move |_| *o.lock().unwrap() += 1)
                .customize_agents(move |_, b| b.middleware(p.clone())),
        )
        .await
        .unwrap();
    customised
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        general.agents(),
        ["root"],
        "the general customiser: requested only"
    );
    assert_eq!(*options_seen.lock().unwrap(), 1, "options: requested only");
    assert_eq!(per_agent.agents(), ["root", "helper", "root"]);

    let new_helper = orchestrator.agents().get(&"helper".into()).unwrap();
    assert!(
        !Arc::ptr_eq(&new_helper, &old_helper),
        "rebuilt and replaced"
    );
    assert!(Arc::ptr_eq(
        &customised.agent().agent_tools()[0],
        &new_helper
    ));
    assert!(Arc::ptr_eq(&earlier.agent().agent_tools()[0], &old_helper));
    // The earlier root, run again, still runs its captured child (no recorder).
    earlier
        .run(RunRequest::new("again"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(per_agent.agents(), ["root", "helper", "root"]);
}

/// rule AT-30: after a definition, tool or policy changes, evicting the agent or invalidating the cache makes the next build use the change.
#[tokio::test]
async fn at_30_evict_and_invalidate_make_the_next_build_use_changes() {
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("lookup", json!({"tag": "x"})),
    });
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", helper)]);
    let (orchestrator, _) = orchestrator();
    let defs = cache_defs();
    let lookup = |version: &str| -> HostTools {
        HostTools::new().with_shared(ProbeTool::new(
            "lookup",
            false,
            Behaviour::Return(ToolResult::text(version)),
        ) as Arc<dyn Tool>)
    };
    let answer = |active: ActiveAgent| async move {
        active
            .run(RunRequest::new("go"), &EventSink::none())
            .await
            .unwrap()
            .final_text
    };
    let build_with = |tools: HostTools| {
        orchestrator.get_or_create_agent(request("root", &defs, &models).tools(tools))
    };
    assert_eq!(answer(build_with(lookup("v1")).await.unwrap()).await, "v1");
    // The tools changed, but nothing compares tools: the cache still serves v1.
    assert_eq!(answer(build_with(lookup("v2")).await.unwrap()).await, "v1");
    assert!(orchestrator.evict(&"helper".into()));
    assert_eq!(answer(build_with(lookup("v2")).await.unwrap()).await, "v2");

    let before = orchestrator.agents().get(&"helper".into()).unwrap();
    let root_before = orchestrator.cached_requested(&"root".into()).unwrap();
    orchestrator.invalidate();
    assert!(orchestrator.agents().is_empty());
    assert_eq!(answer(build_with(lookup("v3")).await.unwrap()).await, "v3");
    assert!(!Arc::ptr_eq(
        &before,
        &orchestrator.agents().get(&"helper".into()).unwrap()
    ));
    assert!(!Arc::ptr_eq(
        &root_before,
        &orchestrator.cached_requested(&"root".into()).unwrap()
    ));

    // A changed definition is noticed without an eviction.
    let mut changed = defs.clone();
    changed[1]
        .tool_policies
        .insert("lookup".into(), ToolPolicy::Deny);
    let root = orchestrator
        .get_or_create_agent(request("root", &changed, &models).tools(lookup("v3")))
        .await
        .unwrap();
    assert!(root.agent().agent_tools()[0].tools(false).is_empty());
}
