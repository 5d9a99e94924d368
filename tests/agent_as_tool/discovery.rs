//! Definition and discovery (AT-01..AT-05, AT-20).

use super::*;

/// rule AT-01: only an exposed agent listed in the caller's `agent_tool_ids` becomes a function.
#[tokio::test]
async fn at_01_only_exposed_and_listed_agents_become_tools() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["listed", "private"]),
        exposed("listed", "Listed Helper"),
        AgentDefinition::new("private", "Private Helper"),
        exposed("unlisted", "Unlisted Helper"),
    ];
    let models = by_agent(&[
        ("root", delegating("Listed_Helper", None)),
        ("listed", echo("listed")),
        ("private", echo("private")),
        ("unlisted", echo("unlisted")),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    assert_eq!(ids(root.agent().agent_tools()), ["listed"]);
    let registry = root.harness().tools();
    assert!(registry.get("Listed_Helper").is_some());
    assert!(registry.get("Private_Helper").is_none());
    assert!(registry.get("Unlisted_Helper").is_none());
    assert_eq!(orchestrator.agents().ids(), [AgentId::from("listed")]);
    let run = root
        .run(RunRequest::new("hi"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.final_text, "listed: hi");
}

/// rule AT-02: ids resolve only among the definitions visible to the user.
#[tokio::test]
async fn at_02_ids_resolve_only_among_visible_definitions() {
    let catalog = AgentCatalog::new();
    catalog
        .save(AgentDefinition::new("root", "Root").agent_tools(["eng_helper"]))
        .unwrap();
    catalog
        .save(exposed("eng_helper", "Eng Helper").audience("eng"))
        .unwrap();
    catalog
        .save(AgentDefinition::new("ops_only", "Ops Only").audience("ops"))
        .unwrap();
    let models = by_agent(&[
        ("root", echo("root")),
        ("eng_helper", echo("eng")),
        ("ops_only", echo("ops")),
    ]);
    let alice = Viewer::user("alice").in_group("eng");
    let bob = Viewer::user("bob");
    let (orchestrator, _) = orchestrator();

    let for_alice = orchestrator
        .get_or_create_agent(AgentBuildRequest::new(
            "root",
            catalog.visible_to(&alice),
            Arc::clone(&models),
        ))
        .await
        .unwrap();
    assert_eq!(ids(for_alice.agent().agent_tools()), ["eng_helper"]);

    let for_bob = orchestrator
        .get_or_create_agent(AgentBuildRequest::new(
            "root",
            catalog.visible_to(&bob),
            Arc::clone(&models),
        ))
        .await
        .unwrap();
    assert!(for_bob.agent().agent_tools().is_empty());
    assert!(for_bob.harness().tools().get("Eng_Helper").is_none());

    let hidden = orchestrator
        .get_or_create_agent(AgentBuildRequest::new(
            "ops_only",
            catalog.visible_to(&bob),
            Arc::clone(&models),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        hidden,
        BuildError::NotFound {
            agent: "ops_only".into()
        }
    );
}

/// rule AT-03: a missing, hidden or no-longer-exposed target is omitted and its stale build removed.
#[tokio::test]
async fn at_03_missing_hidden_or_unexposed_targets_are_omitted_and_stale_builds_removed() {
    let root = AgentDefinition::new("root", "Root").agent_tools(["a", "b", "c"]);
    let defs = [
        root.clone(),
        exposed("a", "A"),
        exposed("b", "B"),
        exposed("c", "C").audience("ops"),
    ];
    let models = by_agent(&[
        ("root", echo("root")),
        ("a", echo("a")),
        ("b", echo("b")),
        ("c", echo("c")),
    ]);
    let (orchestrator, _) = orchestrator();
    let ops = Viewer::user("olga").in_group("ops");
    let visible = |defs: &[AgentDefinition], viewer: &Viewer| -> Vec<Arc<AgentDefinition>> {
        defs.iter()
            .filter(|d| d.is_visible_to(viewer))
            .cloned()
            .map(Arc::new)
            .collect()
    };
    let first = orchestrator
        .get_or_create_agent(AgentBuildRequest::new(
            "root",
            visible(&defs, &ops),
            Arc::clone(&models),
        ))
        .await
        .unwrap();
    assert_eq!(ids(first.agent().agent_tools()), ["a", "b", "c"]);
    assert_eq!(orchestrator.agents().len(), 3);

    // a is no longer exposed, b is gone, c is hidden from this user.
    let mut a = exposed("a", "A");
    a.is_exposed_as_tool = false;
    let changed = [root, a, exposed("c", "C").audience("ops")];
    let second = orchestrator
        .get_or_create_agent(AgentBuildRequest::new(
            "root",
            visible(&changed, &Viewer::user("bob")),
            Arc::clone(&models),
        ))
        .await
        .unwrap();
    assert!(second.agent().agent_tools().is_empty());
    assert!(orchestrator.agents().is_empty(), "stale builds removed");
    // The first build's provider captured its children and keeps them.
    assert_eq!(ids(first.agent().agent_tools()), ["a", "b", "c"]);
}

/// rule AT-04: the build walk's visited set stops repeated ids, self-references and cycles at their first visit.
#[tokio::test]
async fn at_04_build_walk_stops_repeats_self_references_and_cycles() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["a", "a", "root"]),
        exposed("a", "A").agent_tools(["b", "a"]),
        exposed("b", "B").agent_tools(["a", "b"]),
    ];
    let log = Arc::new(Mutex::new(Vec::new()));
    let factory_log = Arc::clone(&log);
    let model = echo("any");
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            factory_log.lock().unwrap().push(d.id.to_string());
            Ok(Arc::clone(&model) as Arc<dyn ChatModel>)
        },
    );
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    assert_eq!(*log.lock().unwrap(), ["b", "a", "root"], "each built once");
    assert_eq!(ids(root.agent().agent_tools()), ["a"]);
    let a = orchestrator.agents().get(&"a".into()).unwrap();
    let b = orchestrator.agents().get(&"b".into()).unwrap();
    assert_eq!(ids(a.agent_tools()), ["b"]);
    assert!(b.agent_tools().is_empty(), "the cycle back to a stops");

    // A second build is stable: nothing is rebuilt.
    let again = build(&orchestrator, "root", &defs, &models).await;
    assert_eq!(log.lock().unwrap().len(), 3);
    assert!(Arc::ptr_eq(again.agent(), root.agent()));
}

/// rule AT-05: the provider keeps the given order and does not remove duplicates.
#[tokio::test]
async fn at_05_provider_keeps_order_and_duplicates() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["b", "a"]),
        exposed("a", "Alpha"),
        exposed("b", "Beta"),
    ];
    let models = by_agent(&[("root", echo("r")), ("a", echo("a")), ("b", echo("b"))]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    assert_eq!(ids(root.agent().agent_tools()), ["b", "a"]);
    let names: Vec<&str> = root
        .harness()
        .tools()
        .model_dispatch()
        .definitions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["Beta", "Alpha"]);

    let a = orchestrator.agents().get(&"a".into()).unwrap();
    let b = orchestrator.agents().get(&"b".into()).unwrap();
    let provider = orchestrator.provider(vec![Arc::clone(&b), a, b]);
    assert_eq!(ids(provider.agents()), ["b", "a", "b"]);
    let tools: Vec<String> = provider
        .tools(false)
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert_eq!(tools, ["Beta", "Alpha", "Beta"]);
}

/// rule AT-20: dependencies are built before their parents, added to the collection, and captured as a snapshot.
#[tokio::test]
async fn at_20_dependencies_are_built_first_and_captured_as_a_snapshot() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["a"]),
        exposed("a", "A").agent_tools(["b"]),
        exposed("b", "B"),
    ];
    let log = Arc::new(Mutex::new(Vec::new()));
    let factory_log = Arc::clone(&log);
    let models_by_id: HashMap<&str, Arc<TestModel>> = HashMap::from([
        ("root", delegating("A", None)),
        ("a", delegating("B", None)),
        ("b", echo("b")),
    ]);
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            factory_log.lock().unwrap().push(d.id.to_string());
            Ok(Arc::clone(&models_by_id[d.id.as_str()]) as Arc<dyn ChatModel>)
        },
    );
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    assert_eq!(*log.lock().unwrap(), ["b", "a", "root"]);
    assert_eq!(orchestrator.agents().ids(), ["a".into(), "b".into()]);
    let captured_a = Arc::clone(&root.agent().agent_tools()[0]);
    assert!(Arc::ptr_eq(
        &captured_a,
        &orchestrator.agents().get(&"a".into()).unwrap()
    ));

    // The provider does not look the agent up per request: emptying the
    // collection changes nothing for the built root.
    orchestrator.agents().clear();
    let run = root
        .run(RunRequest::new("x"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.final_text, "b: x");

    // A rebuild puts a new `a` in the collection; the old root keeps its own.
    let rebuilt = build(&orchestrator, "root", &defs, &models).await;
    let new_a = orchestrator.agents().get(&"a".into()).unwrap();
    assert!(!Arc::ptr_eq(&new_a, &captured_a));
    assert!(Arc::ptr_eq(&rebuilt.agent().agent_tools()[0], &new_a));
    assert!(Arc::ptr_eq(&root.agent().agent_tools()[0], &captured_a));
}
