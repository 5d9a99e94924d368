//! The restricted delegated shape (AT-21..AT-23).

use super::*;

/// rule AT-21: a delegated child uses its own definition's model and options, or the app default with its own options.
#[tokio::test]
async fn at_21_child_uses_its_own_model_and_options() {
    let default = TestModel::new(|seen| match seen.system() {
        "root" => match seen.last_tool() {
            Some(result) if seen.tool_results().len() == 2 => text(result),
            Some(_) => call("Plain", json!({"query": "p"})),
            None => call("Keyed", json!({"query": "k"})),
        },
        other => text(format!("{other} answered")),
    });
    let small = TestModel::new(|seen| text(format!("{} answered", seen.system())));
    let registry = ModelRegistry::new(Arc::clone(&default) as Arc<dyn ChatModel>)
        .with("small", Arc::clone(&small) as Arc<dyn ChatModel>);
    let defs = [
        AgentDefinition::new("root", "Root")
            .instruction("root")
            .agent_tools(["keyed", "plain"]),
        exposed("keyed", "Keyed").instruction("keyed").model(
            "small",
            ModelOptions {
                temperature: Some(0.2),
                ..ModelOptions::default()
            },
        ),
        AgentDefinition {
            model_options: ModelOptions {
                temperature: Some(0.9),
                ..ModelOptions::default()
            },
            ..exposed("plain", "Plain").instruction("plain")
        },
    ];
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &(Arc::new(registry) as _)).await;
    let run = root
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.final_text, "plain answered");
    let small_seen = small.seen();
    assert_eq!(small_seen.len(), 1);
    assert_eq!(small_seen[0].system(), "keyed");
    assert_eq!(small_seen[0].options.temperature, Some(0.2));
    let plain = default
        .seen()
        .into_iter()
        .find(|s| s.system() == "plain")
        .unwrap();
    assert_eq!(plain.options.temperature, Some(0.9));
    let root_seen = default
        .seen()
        .into_iter()
        .find(|s| s.system() == "root")
        .unwrap();
    assert_eq!(root_seen.options.temperature, None);

    // A model key the factory does not know is a build error.
    let mut broken = defs.clone();
    broken[1].model = Some("huge".into());
    let registry = ModelRegistry::new(Arc::clone(&default) as Arc<dyn ChatModel>);
    let error = orchestrator
        .get_or_create_agent(request("root", &broken, &(Arc::new(registry) as _)))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::UnknownModel {
            agent: "keyed".into(),
            key: "huge".into()
        }
    );
}

/// rule AT-21: a delegated child uses its own standing instruction with its variables resolved.
#[tokio::test]
async fn at_21_child_uses_its_own_instruction_with_resolved_variables() {
    let defs = [
        AgentDefinition::new("root", "Root")
            .instruction("You coordinate for {{team}}.")
            .variable("team", "ops")
            .agent_tools(["helper"]),
        exposed("helper", "Helper")
            .instruction("You research {{topic}} for {{ audience }}; {{unknown}} stays.")
            .variable("topic", "tides")
            .variable("audience", "sailors"),
    ];
    let root_model = delegating("Helper", None);
    let helper = echo("helper");
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("helper", Arc::clone(&helper)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(root_model.seen()[0].system(), "You coordinate for ops.");
    assert_eq!(
        helper.seen()[0].system(),
        "You research tides for sailors; {{unknown}} stays."
    );
}

/// rule AT-21: a delegated child uses its own allowlist, tool policies, agent tools and compaction.
#[tokio::test]
async fn at_21_child_uses_its_own_tools_policies_agent_tools_and_compaction() {
    let defs = [
        AgentDefinition::new("root", "Root")
            .tools(["root_tool", "shared_tool"])
            .agent_tools(["child"]),
        exposed("child", "Child")
            .tools(["child_tool", "shared_tool"])
            .tool_policy("shared_tool", ToolPolicy::Deny)
            .agent_tools(["grand"])
            .compaction(Compaction::KeepLastMessages { count: 4 }),
        exposed("grand", "Grand"),
    ];
    let root_model = delegating("Child", None);
    let child_model = echo("child");
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("child", Arc::clone(&child_model)),
        ("grand", echo("grand")),
    ]);
    let tools = HostTools::new()
        .with_shared(ok_tool("root_tool") as Arc<dyn Tool>)
        .with_shared(ok_tool("child_tool") as Arc<dyn Tool>)
        .with_shared(ok_tool("shared_tool") as Arc<dyn Tool>);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).tools(tools))
        .await
        .unwrap();
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        root_model.seen()[0].tools,
        ["root_tool", "shared_tool", "Child"]
    );
    assert_eq!(child_model.seen()[0].tools, ["child_tool", "Grand"]);
    let child = &root.agent().agent_tools()[0];
    assert_eq!(child.omitted_tools(false)[0].reason, OmitReason::Denied);
    assert_eq!(child.reducer().unwrap().name(), "keep_last_messages");
    assert!(root.agent().reducer().is_none());
}

/// rule AT-21: a delegated child's tools receive its own workspaces, and a workspace tool refuses other paths.
#[tokio::test]
async fn at_21_child_tools_receive_its_own_workspaces() {
    let dir = tempfile::tempdir().unwrap();
    let child_ws = dir.path().join("child_ws");
    let root_ws = dir.path().join("root_ws");
    std::fs::create_dir_all(&child_ws).unwrap();
    std::fs::create_dir_all(&root_ws).unwrap();
    std::fs::write(child_ws.join("notes.txt"), "child notes").unwrap();
    std::fs::write(root_ws.join("secret.txt"), "root secret").unwrap();
    let secret = root_ws.join("secret.txt").display().to_string();
    let escape = "../root_ws/secret.txt".to_owned();
    let defs = [
        AgentDefinition::new("root", "Root")
            .tools(["read_file"])
            .workspace(&root_ws)
            .agent_tools(["child"]),
        exposed("child", "Child")
            .tools(["read_file"])
            .workspace(&child_ws),
    ];
    let child_model = TestModel::new(move |seen| match seen.tool_results().len() {
        0 => call("read_file", json!({"path": "notes.txt"})),
        1 => call("read_file", json!({"path": secret})),
        2 => call("read_file", json!({"path": escape})),
        _ => text("read"),
    });
    let models = by_agent(&[
        ("root", delegating("Child", None)),
        ("child", Arc::clone(&child_model)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models).tools(HostTools::new().with(WorkspaceReadTool::new())),
        )
        .await
        .unwrap();
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    let results = child_model.seen().last().unwrap().tool_results();
    assert_eq!(results[0], ("child notes".to_owned(), false));
    assert!(
        results[1].1 && results[1].0.contains("outside"),
        "{results:?}"
    );
    assert!(
        results[2].1 && results[2].0.contains("outside"),
        "{results:?}"
    );
    let child = &root.agent().agent_tools()[0];
    assert!(child.workspaces()[0].ends_with("child_ws"));
    assert!(root.agent().workspaces()[0].ends_with("root_ws"));
}

/// rule AT-22: the initiating run's air gap is inherited and tightened by `is_local_only`, never loosened.
#[tokio::test]
async fn at_22_air_gap_is_inherited_and_tightened_never_loosened() {
    let web = ok_tool("web").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    let defs = [
        AgentDefinition::new("root", "Root")
            .tools(["web"])
            .agent_tools(["child", "local"]),
        exposed("child", "Child").tools(["web"]),
        exposed("local", "Local")
            .tools(["web"])
            .local_only()
            .agent_tools(["leaf"]),
        exposed("leaf", "Leaf").tools(["web"]),
    ];
    let root_model = TestModel::new(|seen| match seen.last_tool() {
        Some(_) => text("done"),
        None => Step::Reply(ScriptedModel::tool_calls([
            ("Child", json!({"query": "c"})),
            ("Local", json!({"query": "l"})),
        ])),
    });
    let child = echo("child");
    let local = delegating("Leaf", None);
    let leaf = echo("leaf");
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("child", Arc::clone(&child)),
        ("local", Arc::clone(&local)),
        ("leaf", Arc::clone(&leaf)),
    ]);
    let (orchestrator, _) = orchestrator();
    let tools = HostTools::new().with_shared(web as Arc<dyn Tool>);
    for air_gapped in [false, true] {
        let root = orchestrator
            .get_or_create_agent(
                request("root", &defs, &models)
                    .tools(tools.clone())
                    .air_gapped(air_gapped),
            )
            .await
            .unwrap();
        assert_eq!(root.air_gapped(), air_gapped);
        root.run(RunRequest::new("go"), &EventSink::none())
            .await
            .unwrap();
        let offers_web =
            |model: &TestModel| model.seen().last().unwrap().tools.contains(&"web".into());
        assert_eq!(offers_web(&root_model), !air_gapped, "root");
        assert_eq!(offers_web(&child), !air_gapped, "child inherits");
        assert!(!offers_web(&local), "local-only tightens");
        assert!(
            !offers_web(&leaf),
            "below a local-only agent stays air-gapped"
        );
    }
    let local = orchestrator.agents().get(&"local".into()).unwrap();
    assert_eq!(
        local.omitted_tools(false)[0].reason,
        OmitReason::NetworkEgress
    );
}

struct TestProvider {
    name: &'static str,
    kind: ContextKind,
    active_only: bool,
    tool: Option<Arc<dyn Tool>>,
}

impl ContextProvider for TestProvider {
    fn name(&self) -> &str {
        self.name
    }

    fn kind(&self) -> ContextKind {
        self.kind
    }

    fn active_only(&self) -> bool {
        self.active_only
    }

    fn instructions(&self) -> Option<String> {
        Some(format!("[{}]", self.name))
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tool.iter().cloned().collect()
    }
}

struct Providers(Vec<Arc<dyn ContextProvider>>);

impl ContextProviderFactory for Providers {
    fn providers(&self, _definition: &AgentDefinition) -> Vec<Arc<dyn ContextProvider>> {
        self.0.clone()
    }
}

/// rule AT-23: memory, skills and the other active-only providers attach only to the requested agent; called directly, the same definition gets them.
#[tokio::test]
async fn at_23_memory_skills_and_active_only_providers_attach_only_to_the_requested_agent() {
    let provider = |name, kind, active_only| -> Arc<dyn ContextProvider> {
        Arc::new(TestProvider {
            name,
            kind,
            active_only,
            tool: (kind == ContextKind::TaskList).then(|| ok_tool("add_task") as Arc<dyn Tool>),
        })
    };
    let factory = Arc::new(Providers(vec![
        provider("memory", ContextKind::Memory, true),
        provider("skills", ContextKind::Skills, true),
        provider("notes", ContextKind::PrivateNotes, true),
        provider("library", ContextKind::Library, true),
        provider("tasks", ContextKind::TaskList, true),
        provider("request", ContextKind::Request, true),
        // Even a memory provider that clears the marker stays off delegated builds.
        provider("memory2", ContextKind::Memory, false),
        provider("shared", ContextKind::Shared, false),
    ]));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["specialist"]),
        exposed("specialist", "Specialist")
            .instruction("Specialist.")
            .with_memory()
            .skill("tides"),
    ];
    let specialist = echo("specialist");
    let models = by_agent(&[
        ("root", delegating("Specialist", None)),
        ("specialist", Arc::clone(&specialist)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).context_providers(factory.clone()))
        .await
        .unwrap();
    // The requested root: active-only context, but no memory or skills (its
    // definition enables neither).
    assert_eq!(
        root.agent().context_providers(),
        ["notes", "library", "tasks", "request", "shared"]
    );
    root.run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    let delegated = &root.agent().agent_tools()[0];
    assert_eq!(delegated.role(), AgentRole::Delegated);
    assert_eq!(delegated.context_providers(), ["shared"]);
    assert_eq!(specialist.seen()[0].system(), "Specialist.\n\n[shared]");
    assert!(specialist.seen()[0].tools.is_empty());

    // Called directly, the same definition is the active agent.
    let direct = orchestrator
        .get_or_create_agent(request("specialist", &defs, &models).context_providers(factory))
        .await
        .unwrap();
    assert_eq!(direct.agent().role(), AgentRole::Active);
    assert_eq!(
        direct.agent().context_providers(),
        [
            "memory", "skills", "notes", "library", "tasks", "request", "memory2", "shared"
        ]
    );
    direct
        .run(RunRequest::new("hi"), &EventSink::none())
        .await
        .unwrap();
    let seen = specialist.seen().last().unwrap().clone();
    assert!(seen.system().contains("[memory]") && seen.system().contains("[skills]"));
    assert_eq!(seen.tools, ["add_task"]);
}
