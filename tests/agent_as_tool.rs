//! Agents as tools (spec/agent-as-tool.md) through the facade: one named
//! test (or more) per rule AT-01..AT-32, each on real harness runs with
//! deterministic models, and a scenario (coordinator → researcher →
//! summarizer) whose sessions live in SQLite and continue after a restart.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    ActiveAgent, AgentBuildRequest, AgentCatalog, AgentDefinition, AgentEvent, AgentId,
    AgentOrchestrator, AgentRole, AgentToolError, BuildError, CallId, CancellationToken,
    CatalogError, ChatRequest, ChatRole, Compaction, ContextKind, ContextProvider,
    ContextProviderFactory, EffectLedger, HostTools, InMemorySessionStore, MemoryLedger,
    ModelError, ModelFactory, ModelOptions, ModelRegistry, OmitReason, RunContext, RunError, RunId,
    SESSION_PROPERTY, SessionId, SessionScope, SessionStore, SideEffects, SqliteSessionStore,
    State, ToolPolicy, ToolReplay, Viewer, WorkspaceReadTool, child_run_id, child_session_id,
    normalize_function_name, parent_of_child_run,
};
use tinyagents_tests::{Behaviour, ProbeTool};
use tokio::sync::Notify;

// ===========================================================================
// Helpers
// ===========================================================================

/// What a [`TestModel`] saw in one request.
#[derive(Debug, Clone)]
struct Seen {
    messages: Vec<Message>,
    tools: Vec<String>,
    options: ModelOptions,
}

impl Seen {
    fn system(&self) -> &str {
        match self.messages.first() {
            Some(Message::System { content }) => content,
            _ => "",
        }
    }

    fn last_user(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The content of the last message when it is a tool result.
    fn last_tool(&self) -> Option<String> {
        match self.messages.last() {
            Some(Message::Tool { content, .. }) => Some(content.clone()),
            _ => None,
        }
    }

    fn users(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| matches!(m, Message::User { .. }))
            .count()
    }

    fn tool_results(&self) -> Vec<(String, bool)> {
        self.messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool {
                    content, is_error, ..
                } => Some((content.clone(), *is_error)),
                _ => None,
            })
            .collect()
    }

    /// The history without the standing instruction.
    fn conversation(&self) -> Vec<Message> {
        self.messages
            .iter()
            .filter(|m| !matches!(m, Message::System { .. }))
            .cloned()
            .collect()
    }
}

enum Step {
    Reply(ChatResponse),
    Fail(ModelError),
    /// Signals, then never answers.
    Block(Arc<Notify>),
}

type Respond = dyn Fn(&Seen) -> Step + Send + Sync;

/// A deterministic model answering with a function of what it sees, and
/// recording every request (messages, offered tools, options).
struct TestModel {
    respond: Box<Respond>,
    seen: Mutex<Vec<Seen>>,
}

impl TestModel {
    fn new(respond: impl Fn(&Seen) -> Step + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            respond: Box::new(respond),
            seen: Mutex::new(Vec::new()),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for TestModel {
    fn name(&self) -> &str {
        "test"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let seen = Seen {
            messages: request.messages.to_vec(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            options: request.options.clone(),
        };
        self.seen.lock().unwrap().push(seen.clone());
        match (self.respond)(&seen) {
            Step::Reply(response) => Ok(response),
            Step::Fail(error) => Err(error),
            Step::Block(started) => {
                started.notify_one();
                std::future::pending().await
            }
        }
    }
}

fn text(content: impl Into<String>) -> Step {
    Step::Reply(ChatResponse::text(content))
}

fn call(tool: &str, args: Value) -> Step {
    Step::Reply(ScriptedModel::tool_call(tool, args))
}

/// Answers `<name>: <last user message>`.
fn echo(name: &'static str) -> Arc<TestModel> {
    TestModel::new(move |seen| text(format!("{name}: {}", seen.last_user())))
}

/// Answers `<name> #<user messages seen>: <last user message>`.
fn counting(name: &'static str) -> Arc<TestModel> {
    TestModel::new(move |seen| text(format!("{name} #{}: {}", seen.users(), seen.last_user())))
}

/// Calls `tool` with the user's message as the query (in `conversation`),
/// then answers with what the tool returned.
fn delegating(tool: &'static str, conversation: Option<&'static str>) -> Arc<TestModel> {
    TestModel::new(move |seen| match seen.last_tool() {
        Some(result) => text(result),
        None => {
            let mut args = json!({ "query": seen.last_user() });
            if let Some(name) = conversation {
                args["conversation"] = json!(name);
            }
            call(tool, args)
        }
    })
}

/// Reads the user's message as `{"tool": .., "query": .., "conversation": ..}`,
/// calls that tool, then answers with its result.
fn router() -> Arc<TestModel> {
    TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => {
            let mut args: Value = serde_json::from_str(&seen.last_user()).unwrap();
            let tool = args["tool"].as_str().unwrap().to_owned();
            args.as_object_mut().unwrap().remove("tool");
            call(&tool, args)
        }
    })
}

fn ask(tool: &str, conversation: Option<&str>, query: &str) -> RunRequest {
    let mut input = json!({ "tool": tool, "query": query });
    if let Some(name) = conversation {
        input["conversation"] = json!(name);
    }
    RunRequest::new(input.to_string())
}

/// A model factory that gives each agent id its own model.
fn by_agent(models: &[(&str, Arc<TestModel>)]) -> Arc<dyn ModelFactory> {
    let map: HashMap<String, Arc<dyn ChatModel>> = models
        .iter()
        .map(|(id, model)| ((*id).to_owned(), Arc::clone(model) as Arc<dyn ChatModel>))
        .collect();
    Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            map.get(d.id.as_str())
                .cloned()
                .ok_or_else(|| BuildError::UnknownModel {
                    agent: d.id.clone(),
                    key: "test".into(),
                })
        },
    )
}

fn orchestrator() -> (AgentOrchestrator, Arc<InMemorySessionStore>) {
    let store = Arc::new(InMemorySessionStore::new());
    (
        AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>),
        store,
    )
}

fn request(
    id: &str,
    defs: &[AgentDefinition],
    models: &Arc<dyn ModelFactory>,
) -> AgentBuildRequest {
    AgentBuildRequest::new(id, defs.iter().cloned().map(Arc::new), Arc::clone(models))
}

async fn build(
    orchestrator: &AgentOrchestrator,
    id: &str,
    defs: &[AgentDefinition],
    models: &Arc<dyn ModelFactory>,
) -> ActiveAgent {
    orchestrator
        .get_or_create_agent(request(id, defs, models))
        .await
        .unwrap()
}

fn exposed(id: &str, name: &str) -> AgentDefinition {
    AgentDefinition::new(id, name)
        .description(format!("{name} does its job."))
        .exposed()
}

fn ids(agents: &[Arc<tinyagents::Agent>]) -> Vec<String> {
    agents.iter().map(|a| a.id().to_string()).collect()
}

fn ok_tool(name: &str) -> Arc<ProbeTool> {
    ProbeTool::new(
        name,
        false,
        Behaviour::Return(ToolResult::text(format!("{name} ok"))),
    )
}

async fn run_collecting(
    active: &ActiveAgent,
    scope: Option<&SessionScope>,
    request: RunRequest,
) -> (Result<AgentRun, RunError>, Vec<AgentEvent>) {
    let (sink, mut receiver) = event_channel(16);
    let collector = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        events
    });
    let result = match scope {
        Some(scope) => active.run_in_session(scope, request, &sink).await,
        None => active.run(request, &sink).await,
    };
    drop(sink);
    (result, collector.await.unwrap())
}

/// Records what the hooks of every built agent see.
#[derive(Default)]
struct Recorder {
    /// (agent, what): `model` for a model call, the tool's name for a call.
    hooks: Mutex<Vec<(String, String)>>,
    properties: Mutex<Vec<(String, Map<String, Value>)>>,
    tokens: Mutex<Vec<(String, CancellationToken)>>,
}

impl Recorder {
    fn hooks(&self) -> Vec<(String, String)> {
        self.hooks.lock().unwrap().clone()
    }

    fn agents(&self) -> Vec<String> {
        let mut agents: Vec<String> = self.hooks().into_iter().map(|(a, _)| a).collect();
        agents.dedup();
        agents
    }
}

fn agent_of(ctx: &RunContext) -> String {
    ctx.agent_id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    async fn before_model(
        &self,
        ctx: &mut RunContext,
        _state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        let agent = agent_of(ctx);
        self.hooks
            .lock()
            .unwrap()
            .push((agent.clone(), "model".into()));
        self.properties
            .lock()
            .unwrap()
            .push((agent.clone(), (*ctx.properties).clone()));
        self.tokens
            .lock()
            .unwrap()
            .push((agent, ctx.cancellation().clone()));
        Ok(())
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.hooks
            .lock()
            .unwrap()
            .push((agent_of(ctx), call.name.clone()));
        Ok(ToolVerdict::Allow)
    }
}

/// A `Delegated` event unwrapped: (agent, depth, parent call, the event).
fn delegated(events: &[AgentEvent]) -> Vec<(String, u32, String, AgentEvent)> {
    let mut out = Vec::new();
    let mut stack: Vec<&AgentEvent> = events.iter().rev().collect();
    while let Some(event) = stack.pop() {
        if let AgentEvent::Delegated {
            parent_call_id,
            agent_id,
            depth,
            event,
        } = event
        {
            out.push((
                agent_id.to_string(),
                *depth,
                parent_call_id.to_string(),
                (**event).clone(),
            ));
            stack.push(event);
        }
    }
    out
}

// ===========================================================================
// Definition and discovery (AT-01..AT-05, AT-20)
// ===========================================================================

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

// ===========================================================================
// Names (AT-06, AT-07)
// ===========================================================================

/// rule AT-06: one function per agent, named by its normalised display name, described by its description.
#[tokio::test]
async fn at_06_function_name_is_the_normalised_display_name_and_the_description_stays() {
    assert_eq!(normalize_function_name("Release Notes"), "Release_Notes");
    assert_eq!(normalize_function_name("Release-Notes"), "Release_Notes");
    assert_eq!(normalize_function_name("Q&A -- bot 2"), "Q_A_bot_2");
    assert_eq!(normalize_function_name("Ünïcode name"), "_n_code_name");

    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["notes"]),
        exposed("notes", "Release Notes").description("Writes release notes."),
    ];
    let root_model = delegating("Release_Notes", None);
    let models = by_agent(&[("root", Arc::clone(&root_model)), ("notes", echo("notes"))]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    root.run(RunRequest::new("v1.2"), &EventSink::none())
        .await
        .unwrap();
    let offered = root
        .harness()
        .tools()
        .model_dispatch()
        .definitions()
        .to_vec();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].name, "Release_Notes");
    assert_eq!(offered[0].description, "Writes release notes.");
    assert_eq!(root_model.seen()[0].tools, ["Release_Notes"]);
}

/// rule AT-07: saving rejects normalised-name collisions between non-main agents with overlapping audiences.
#[test]
fn at_07_save_rejects_normalised_name_collisions_with_overlapping_audiences() {
    let catalog = AgentCatalog::new();
    catalog
        .save(AgentDefinition::new("notes", "Release Notes").audience("eng"))
        .unwrap();
    let clash = catalog
        .save(AgentDefinition::new("notes2", "Release-Notes").audience("eng"))
        .unwrap_err();
    assert_eq!(
        clash,
        CatalogError::NameCollision {
            agent: "notes2".into(),
            other: "notes".into(),
            function_name: "Release_Notes".into(),
        }
    );
    // For everyone overlaps every audience.
    assert!(
        catalog
            .save(AgentDefinition::new("notes3", "Release  Notes"))
            .is_err()
    );
    // Disjoint audiences, the main agent, and re-saving the same agent pass.
    catalog
        .save(AgentDefinition::new("notes4", "Release-Notes").audience("ops"))
        .unwrap();
    catalog
        .save(AgentDefinition::new("main", "Release Notes").main())
        .unwrap();
    catalog
        .save(
            AgentDefinition::new("notes", "Release Notes")
                .audience("eng")
                .description("v2"),
        )
        .unwrap();
    assert_eq!(catalog.all().len(), 3);
}

// ===========================================================================
// The function (AT-08..AT-10, AT-12)
// ===========================================================================

/// rule AT-08: input is a required `query` and an optional `conversation`; output is the child's final text.
#[tokio::test]
async fn at_08_query_in_final_text_out() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let helper_model = echo("helper");
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", Arc::clone(&helper_model)),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;

    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false);
    let schema = &tool[0].spec().parameters;
    assert_eq!(schema["required"], json!(["query"]));
    assert_eq!(schema["properties"]["query"]["type"], "string");
    assert_eq!(schema["properties"]["conversation"]["type"], "string");

    let run = root
        .run(RunRequest::new("What is 2 + 2?"), &EventSink::none())
        .await
        .unwrap();
    let result = tinyagents_tests::tool_results(&run.messages);
    assert_eq!(
        result,
        [(
            "Helper".to_owned(),
            "helper: What is 2 + 2?".to_owned(),
            false
        )]
    );
    assert_eq!(helper_model.seen()[0].last_user(), "What is 2 + 2?");

    // A call without a query breaks the schema and never reaches the child.
    let missing = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("Helper", json!({ "conversation": "x" })),
    });
    let models = by_agent(&[("root", missing), ("helper", Arc::clone(&helper_model))]);
    let (orchestrator, _) = self::orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let run = root
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    let (_, content, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert!(*is_error && content.contains("query"), "{content}");
    assert_eq!(helper_model.calls(), 1);
}

/// rule AT-09: the calling call's cancellation reaches the child run.
#[tokio::test]
async fn at_09_cancellation_reaches_the_child_run() {
    let started = Arc::new(Notify::new());
    let blocking = {
        let started = Arc::clone(&started);
        TestModel::new(move |_| Step::Block(Arc::clone(&started)))
    };
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", blocking)]);
    let recorder = Arc::new(Recorder::default());
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).run_middleware(recorder.clone()))
        .await
        .unwrap();

    // Called directly: cancelling the call's token ends the child run, and
    // the call fails.
    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false)
        .remove(0);
    let token = CancellationToken::new();
    let context = ToolRunContext::new(RunId::new("r"), CallId::model(1), token.clone());
    let (result, ()) = tokio::join!(tool.call("q", None, Some(&context)), async {
        started.notified().await;
        token.cancel();
    });
    assert_eq!(
        result.unwrap_err(),
        AgentToolError::ChildStopped {
            agent: "helper".into(),
            status: RunStatus::Cancelled
        }
    );

    // Through a parent run: the child's run context carries a token that
    // the parent's cancellation fires.
    let token = CancellationToken::new();
    let quiet = EventSink::none();
    let (run, ()) = tokio::join!(
        root.run(
            RunRequest::new("go").with_cancellation(token.clone()),
            &quiet
        ),
        async {
            started.notified().await;
            token.cancel();
        }
    );
    assert_eq!(run.unwrap().status, RunStatus::Cancelled);
    let tokens = recorder.tokens.lock().unwrap().clone();
    let (_, child_token) = tokens.iter().rev().find(|(a, _)| a == "helper").unwrap();
    assert!(child_token.is_cancelled());
}

/// rule AT-10: a child's failure is an error of the call, never success text.
#[tokio::test]
async fn at_10_child_failure_propagates_as_an_error() {
    let failing = TestModel::new(|_| {
        Step::Fail(ModelError::Server {
            status: 500,
            message: "boom".into(),
        })
    });
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", failing)]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let (run, events) = run_collecting(&root, None, RunRequest::new("go")).await;
    let run = run.unwrap();
    let (name, _, is_error) = &tinyagents_tests::tool_results(&run.messages)[0];
    assert_eq!(name, "Helper");
    assert!(is_error);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolFailed { name, .. } if name == "Helper"
    )));

    let tool = orchestrator
        .provider(root.agent().agent_tools().to_vec())
        .tools(false)
        .remove(0);
    let error = tool.call("q", None, None).await.unwrap_err();
    assert!(matches!(
        error,
        AgentToolError::ChildFailed {
            source: TinyAgentsError::Model(ModelError::Server { status: 500, .. }),
            ..
        }
    ));
}

/// rule AT-12: the calling run's additional properties are copied into the child run.
#[tokio::test]
async fn at_12_run_properties_are_copied_into_the_child_run() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper"),
    ];
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", echo("h"))]);
    let recorder = Arc::new(Recorder::default());
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).run_middleware(recorder.clone()))
        .await
        .unwrap();
    let mut properties = Map::new();
    properties.insert("tenant".into(), json!("acme"));
    properties.insert("trace".into(), json!({"id": 7}));
    let scope = SessionScope::new("s1");
    root.run_in_session(
        &scope,
        RunRequest::new("go").with_properties(properties),
        &EventSink::none(),
    )
    .await
    .unwrap();
    let seen = recorder.properties.lock().unwrap().clone();
    let (_, child) = seen.iter().find(|(a, _)| a == "helper").unwrap();
    assert_eq!(child["tenant"], "acme");
    assert_eq!(child["trace"], json!({"id": 7}));
    // The session property names the child's own session.
    assert_eq!(
        child[SESSION_PROPERTY],
        child_session_id(&"s1".into(), &"helper".into(), "").as_str()
    );
}

// ===========================================================================
// Conversations (AT-11, AT-13..AT-19)
// ===========================================================================

fn session_defs() -> [AgentDefinition; 3] {
    [
        AgentDefinition::new("root", "Root").agent_tools(["helper", "other"]),
        exposed("helper", "Helper"),
        exposed("other", "Other"),
    ]
}

/// rule AT-11: a repeated conversation name resumes that child conversation; a missing or blank name uses the default one.
#[tokio::test]
async fn at_11_repeated_conversation_resumes_and_blank_uses_the_default() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", counting("other")),
    ]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    let mut answers = Vec::new();
    for request in [
        ask("Helper", Some("Research"), "one"),
        ask("Helper", Some("Research"), "two"),
        ask("Helper", None, "three"),
        ask("Helper", Some("   "), "four"),
        ask("Helper", Some("Research"), "five"),
    ] {
        let run = root
            .run_in_session(&scope, request, &EventSink::none())
            .await
            .unwrap();
        answers.push(run.final_text);
    }
    assert_eq!(
        answers,
        [
            "helper #1: one",
            "helper #2: two",
            "helper #1: three",
            "helper #2: four",
            "helper #3: five"
        ]
    );
}

/// rule AT-13: one child session per called agent and conversation name; names trimmed and caseless.
#[tokio::test]
async fn at_13_one_child_session_per_agent_and_conversation_name() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", counting("other")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    for request in [
        ask("Helper", Some("Research"), "a"),
        ask("Helper", Some(" RESEARCH "), "b"),
        ask("Helper", Some("notes"), "c"),
        ask("Other", Some("Research"), "d"),
    ] {
        root.run_in_session(&scope, request, &EventSink::none())
            .await
            .unwrap();
    }
    let children = store.children(&"s".into()).await.unwrap();
    let keys: Vec<(String, String, usize)> = children
        .iter()
        .map(|r| {
            (
                r.agent_id.as_ref().unwrap().to_string(),
                r.conversation.clone(),
                r.messages.len(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("helper".into(), "notes".into(), 2),
            ("helper".into(), "research".into(), 4),
            ("other".into(), "research".into(), 2),
        ]
    );
    assert_eq!(
        children[1].id,
        child_session_id(&"s".into(), &"helper".into(), "research")
    );
    assert_eq!(children[1].parent, Some(SessionId::from("s")));
}

/// rule AT-14: the child session is saved only after a successful call; a failed or cancelled call leaves the last snapshot.
#[tokio::test]
async fn at_14_child_session_saved_only_after_success() {
    let started = Arc::new(Notify::new());
    let helper = {
        let started = Arc::clone(&started);
        TestModel::new(move |seen| match seen.last_user().as_str() {
            "fail" => Step::Fail(ModelError::Transport {
                message: "down".into(),
            }),
            "block" => Step::Block(Arc::clone(&started)),
            other => text(format!("ok {other}")),
        })
    };
    let models = by_agent(&[("root", router()), ("helper", helper), ("other", echo("o"))]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::new("s");
    let child = child_session_id(&"s".into(), &"helper".into(), "");
    root.run_in_session(&scope, ask("Helper", None, "first"), &EventSink::none())
        .await
        .unwrap();
    let snapshot = store.load(&child).await.unwrap().unwrap();
    assert_eq!(snapshot.revision, 1);
    assert_eq!(snapshot.messages.len(), 2);

    let failed = root
        .run_in_session(&scope, ask("Helper", None, "fail"), &EventSink::none())
        .await
        .unwrap();
    assert!(
        tinyagents_tests::tool_results(&failed.messages)
            .last()
            .unwrap()
            .2
    );
    assert_eq!(store.load(&child).await.unwrap().unwrap(), snapshot);

    let token = CancellationToken::new();
    let quiet = EventSink::none();
    let (cancelled, ()) = tokio::join!(
        root.run_in_session(
            &scope,
            ask("Helper", None, "block").with_cancellation(token.clone()),
            &quiet
        ),
        async {
            started.notified().await;
            token.cancel();
        }
    );
    assert_eq!(cancelled.unwrap().status, RunStatus::Cancelled);
    assert_eq!(store.load(&child).await.unwrap().unwrap(), snapshot);
}

/// rule AT-15: without a parent session every delegated call is stateless.
#[tokio::test]
async fn at_15_without_a_parent_session_calls_are_stateless() {
    let models = by_agent(&[
        ("root", router()),
        ("helper", counting("helper")),
        ("other", echo("o")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    for query in ["one", "two"] {
        let run = root
            .run(ask("Helper", Some("same"), query), &EventSink::none())
            .await
            .unwrap();
        assert_eq!(run.final_text, format!("helper #1: {query}"));
    }
    assert!(store.is_empty());
}

/// rule AT-16: the child's compaction applies; the reduced history is what remains.
#[tokio::test]
async fn at_16_child_compaction_applies_and_the_reduced_history_is_stored() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper", "other"]),
        exposed("helper", "Helper").compaction(Compaction::KeepLastMessages { count: 2 }),
        exposed("other", "Other"),
    ];
    let helper = counting("helper");
    let models = by_agent(&[
        ("root", router()),
        ("helper", Arc::clone(&helper)),
        ("other", echo("o")),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    let scope = SessionScope::new("s");
    for query in ["one", "two", "three"] {
        root.run_in_session(&scope, ask("Helper", None, query), &EventSink::none())
            .await
            .unwrap();
    }
    let stored = store
        .load(&child_session_id(&"s".into(), &"helper".into(), ""))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.messages,
        [
            Message::user("three"),
            Message::assistant("helper #2: three")
        ]
    );
    // The third call saw only the reduced history before its query.
    assert_eq!(
        helper.seen()[2].conversation(),
        [
            Message::user("two"),
            Message::assistant("helper #2: two"),
            Message::user("three")
        ]
    );
}

/// rule AT-17: the provider's functions run one at a time.
#[tokio::test]
async fn at_17_agent_tools_run_serially_by_default() {
    let probe = ProbeTool::new("probe", true, Behaviour::Yield(20));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let root_model = TestModel::new(|seen| match seen.last_tool() {
        Some(_) => text("done"),
        None => Step::Reply(ScriptedModel::tool_calls([
            ("Helper", json!({"query": "a", "conversation": "one"})),
            ("Helper", json!({"query": "b", "conversation": "two"})),
        ])),
    });
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("probe", json!({"tag": seen.last_user()})),
    });
    let models = by_agent(&[("root", root_model), ("helper", helper)]);
    let (orchestrator, _) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(Arc::clone(&probe) as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let spec = root.harness().tools().get("Helper").unwrap().spec().clone();
    assert!(!spec.concurrency_safe);
    assert_eq!(spec.replay, ToolReplay::Never);
    let run = root
        .run_in_session(
            &SessionScope::new("s"),
            RunRequest::new("go"),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.final_text, "done");
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        probe.max_active.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// rule AT-17 (beyond the spec): parallel delegation is opt-in, and calls on one child session still wait for each other.
#[tokio::test]
async fn at_17_parallel_delegation_is_opt_in_and_serialises_one_session() {
    let barrier = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(2))),
    );
    let probe = ProbeTool::new("probe", true, Behaviour::Yield(20));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["meet", "probe"]),
    ];
    let root_model = TestModel::new(|seen| match seen.last_tool() {
        Some(_) => text("done"),
        None => {
            let (tool, first, second) = match seen.last_user().as_str() {
                "different" => ("meet", "one", "two"),
                _ => ("probe", "same", " SAME"),
            };
            Step::Reply(ScriptedModel::tool_calls([
                ("Helper", json!({"query": tool, "conversation": first})),
                ("Helper", json!({"query": tool, "conversation": second})),
            ]))
        }
    });
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call(&seen.last_user(), json!({"tag": "x"})),
    });
    let models = by_agent(&[("root", root_model), ("helper", helper)]);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(store).parallel_delegation(true);
    let tools = HostTools::new()
        .with_shared(Arc::clone(&barrier) as Arc<dyn Tool>)
        .with_shared(Arc::clone(&probe) as Arc<dyn Tool>);
    let root = orchestrator
        .get_or_create_agent(request("root", &defs, &models).tools(tools))
        .await
        .unwrap();
    assert!(
        root.harness()
            .tools()
            .get("Helper")
            .unwrap()
            .spec()
            .concurrency_safe
    );
    let scope = SessionScope::new("s");
    // Two sessions: the calls overlap (the barrier only opens for two).
    let run = tokio::time::timeout(
        Duration::from_secs(10),
        root.run_in_session(&scope, RunRequest::new("different"), &EventSink::none()),
    )
    .await
    .expect("both child runs were in flight together")
    .unwrap();
    assert_eq!(run.final_text, "done");
    assert_eq!(
        barrier.max_active.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    // One session: they wait for each other.
    root.run_in_session(&scope, RunRequest::new("same"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        probe.max_active.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

/// rule AT-18: the host reads a child's stored messages as user and assistant text only.
#[tokio::test]
async fn at_18_host_reads_child_messages_as_user_and_assistant_text_only() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        exposed("helper", "Helper").tools(["probe"]),
    ];
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => Step::Reply(ChatResponse {
            content: format!("found {result}"),
            reasoning: Some("private chain of thought".into()),
            ..ChatResponse::default()
        }),
        None => Step::Reply(ChatResponse {
            reasoning: Some("thinking about tools".into()),
            ..ScriptedModel::tool_call("probe", json!({"tag": "t"}))
        }),
    });
    let models = by_agent(&[
        ("root", delegating("Helper", Some("Work"))),
        ("helper", helper),
    ]);
    let (orchestrator, store) = orchestrator();
    let root = orchestrator
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let scope = SessionScope::new("s");
    root.run_in_session(&scope, RunRequest::new("look"), &EventSink::none())
        .await
        .unwrap();
    let raw = store
        .load(&child_session_id(&"s".into(), &"helper".into(), "work"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        raw.messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. }))
    );
    let turns = root
        .child_transcript(&scope, &"helper".into(), Some("work"))
        .await
        .unwrap();
    let turns: Vec<(ChatRole, String)> = turns.into_iter().map(|t| (t.role, t.text)).collect();
    assert_eq!(
        turns,
        [
            (ChatRole::User, "look".to_owned()),
            (ChatRole::Assistant, "found probe ok".to_owned())
        ]
    );
}

/// rule AT-19: an incognito parent keeps continuity in memory and writes neither parent nor child session.
#[tokio::test]
async fn at_19_incognito_parent_keeps_continuity_in_memory_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        SqliteSessionStore::open(dir.path().join("s.db"))
            .await
            .unwrap(),
    );
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>);
    let root_model = router();
    let models = by_agent(&[
        ("root", Arc::clone(&root_model)),
        ("helper", counting("helper")),
        ("other", echo("o")),
    ]);
    let root = build(&orchestrator, "root", &session_defs(), &models).await;
    let scope = SessionScope::incognito("secret");
    let mut answers = Vec::new();
    for query in ["one", "two"] {
        let run = root
            .run_in_session(&scope, ask("Helper", None, query), &EventSink::none())
            .await
            .unwrap();
        answers.push(run.final_text);
    }
    assert_eq!(answers, ["helper #1: one", "helper #2: two"]);
    assert_eq!(
        root_model.seen().last().unwrap().users(),
        2,
        "parent continuity"
    );
    assert!(store.load(&"secret".into()).await.unwrap().is_none());
    assert!(store.children(&"secret".into()).await.unwrap().is_empty());
    let child = child_session_id(&"secret".into(), &"helper".into(), "");
    assert!(store.load(&child).await.unwrap().is_none());
    // The host still reads the incognito child's text while the process lives.
    assert_eq!(
        root.child_transcript(&scope, &"helper".into(), None)
            .await
            .unwrap()
            .len(),
        4
    );
}

// ===========================================================================
// The restricted delegated shape (AT-21..AT-23)
// ===========================================================================

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

// ===========================================================================
// Governance (AT-24..AT-27)
// ===========================================================================

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

// ===========================================================================
// Caching (AT-28..AT-30)
// ===========================================================================

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
    let defs = cache_defs();
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

// ===========================================================================
// Beyond the spec (AT-31, AT-32)
// ===========================================================================

/// rule AT-31: `RunLimits::max_depth` caps chains of agents calling agents at run time.
#[tokio::test]
async fn at_31_max_depth_caps_chains_of_agents() {
    let chain = ["a", "b", "c", "d", "e"];
    let mut defs = Vec::new();
    let mut models = Vec::new();
    for (i, id) in chain.iter().enumerate() {
        let mut def = exposed(id, &id.to_uppercase());
        if let Some(next) = chain.get(i + 1) {
            def = def.agent_tools([*next]);
            let next_name: &'static str = Box::leak(next.to_uppercase().into_boxed_str());
            let me: &'static str = id;
            models.push((
                *id,
                TestModel::new(move |seen| match seen.last_tool() {
                    Some(result) => text(format!("{me}<{result}>")),
                    None => call(next_name, json!({"query": "deeper"})),
                }),
            ));
        } else {
            models.push((*id, echo("e")));
        }
        defs.push(def);
    }
    let factory = by_agent(&models);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(store).limits(
        RunLimits::default()
            .with_max_model_calls(40)
            .with_max_depth(2),
    );
    let a = build(&orchestrator, "a", &defs, &factory).await;
    let run = a
        .run(RunRequest::new("go"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.final_text,
        "a<b<c<agent 'd' failed: limit exceeded: max_depth (limit 2, used 3)>>>"
    );
}

/// A tool bound after the agents are built: lets a test close a cycle at
/// run time that the build walk never closes.
struct LateTool {
    spec: ToolSpec,
    inner: OnceLock<Arc<dyn Tool>>,
}

#[async_trait]
impl Tool for LateTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let inner = self.inner.get().expect("bound before the run");
        inner.execute_with_context(args, opts, context).await
    }
}

/// rule AT-31: the depth cap holds across a cycle of agents through reused conversations.
#[tokio::test]
async fn at_31_max_depth_caps_cycles_through_reused_conversations() {
    let late = Arc::new(LateTool {
        spec: ToolSpec::new(
            "call_ping",
            "Asks ping.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "conversation": {"type": "string"}}, "required": ["query"]}),
        ),
        inner: OnceLock::new(),
    });
    let defs = [
        AgentDefinition::new("ping", "Ping").agent_tools(["pong"]),
        exposed("pong", "Pong").tools(["call_ping"]),
    ];
    let models = by_agent(&[
        (
            "ping",
            TestModel::new(|seen| match seen.last_tool() {
                Some(result) => text(format!("ping<{result}>")),
                None => call("Pong", json!({"query": "again", "conversation": "loop"})),
            }),
        ),
        (
            "pong",
            TestModel::new(|seen| match seen.last_tool() {
                Some(result) => text(format!("pong<{result}>")),
                None => call(
                    "call_ping",
                    json!({"query": "again", "conversation": "Loop"}),
                ),
            }),
        ),
    ]);
    let store = Arc::new(InMemorySessionStore::new());
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>)
        .limits(RunLimits::default().with_max_depth(4));
    let ping = orchestrator
        .get_or_create_agent(
            request("ping", &defs, &models)
                .tools(HostTools::new().with_shared(Arc::clone(&late) as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let bound = orchestrator
        .provider(vec![Arc::clone(ping.agent())])
        .tools(false);
    assert!(late.inner.set(bound[0].clone() as Arc<dyn Tool>).is_ok());

    let scope = SessionScope::new("s");
    for _ in 0..2 {
        let run = tokio::time::timeout(
            Duration::from_secs(10),
            ping.run_in_session(&scope, RunRequest::new("go"), &EventSink::none()),
        )
        .await
        .expect("the cycle ends")
        .unwrap();
        assert_eq!(
            run.final_text,
            "ping<pong<ping<pong<ping<agent 'pong' failed: limit exceeded: max_depth (limit 4, used 5)>>>>>"
        );
    }
    // Four nested child sessions, each continued by the second run.
    let mut parent = SessionId::from("s");
    for _ in 0..4 {
        let children = store.children(&parent).await.unwrap();
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].revision, 2);
        parent = children[0].id.clone();
    }
    assert!(store.children(&parent).await.unwrap().is_empty());
}

/// rule AT-32: the child run's events reach the parent's stream with the parent call id, the agent id and the depth; child runs are linked to the calling call.
#[tokio::test]
async fn at_32_child_events_reach_the_parent_stream() {
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["researcher"]),
        exposed("researcher", "Researcher").agent_tools(["summarizer"]),
        exposed("summarizer", "Summarizer"),
    ];
    let models = by_agent(&[
        ("root", delegating("Researcher", None)),
        ("researcher", delegating("Summarizer", None)),
        ("summarizer", echo("summary")),
    ]);
    let ledger = Arc::new(MemoryLedger::new());
    let orchestrator = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
        .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>);
    let root = build(&orchestrator, "root", &defs, &models).await;
    let (run, events) = run_collecting(
        &root,
        None,
        RunRequest::new("tides").with_run_id(RunId::new("top")),
    )
    .await;
    assert_eq!(run.unwrap().final_text, "summary: tides");
    let delegated = delegated(&events);
    let starts: Vec<(String, u32, String, RunId)> = delegated
        .iter()
        .filter_map(|(agent, depth, parent, event)| match event {
            AgentEvent::RunStarted { run_id, .. } => {
                Some((agent.clone(), *depth, parent.clone(), run_id.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [
            ("researcher".into(), 1, "p1".into(), RunId::new("top::p1")),
            (
                "summarizer".into(),
                2,
                "p1".into(),
                RunId::new("top::p1::p1")
            ),
        ]
    );
    assert_eq!(
        parent_of_child_run(&RunId::new("top::p1::p1")),
        Some((RunId::new("top::p1"), CallId::new("p1")))
    );
    assert_eq!(
        child_run_id(&RunId::new("top"), &CallId::model(1)),
        RunId::new("top::p1")
    );
    // The ledger links each child run's rows to the call that started it.
    let calls = |run: &str| {
        let ledger = Arc::clone(&ledger);
        let run = RunId::new(run);
        async move {
            ledger
                .rows(&run)
                .await
                .unwrap()
                .into_iter()
                .map(|row| (row.call_id.to_string(), row.tool_name, row.replay))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        calls("top").await,
        [("p1".to_owned(), "Researcher".to_owned(), ToolReplay::Never)]
    );
    assert_eq!(
        calls("top::p1").await,
        [("p1".to_owned(), "Summarizer".to_owned(), ToolReplay::Never)]
    );
    assert!(calls("top::p1::p1").await.is_empty());
    // The summarizer's completion and its tool-less model turn are visible.
    assert!(
        delegated
            .iter()
            .any(|(agent, depth, _, event)| agent == "summarizer"
                && *depth == 2
                && matches!(
                    event,
                    AgentEvent::RunCompleted {
                        status: RunStatus::Completed,
                        ..
                    }
                ))
    );
    assert!(
        delegated
            .iter()
            .any(|(agent, _, _, event)| agent == "researcher"
                && matches!(event, AgentEvent::ToolStarted { name, .. } if name == "Summarizer"))
    );
    // The parent's own call of the researcher brackets the delegated events.
    let position = |pred: &dyn Fn(&AgentEvent) -> bool| events.iter().position(pred).unwrap();
    let started =
        position(&|e| matches!(e, AgentEvent::ToolStarted { name, .. } if name == "Researcher"));
    let first_delegated = position(&|e| matches!(e, AgentEvent::Delegated { .. }));
    let completed =
        position(&|e| matches!(e, AgentEvent::ToolCompleted { name, .. } if name == "Researcher"));
    assert!(started < first_delegated && first_delegated < completed);
}

// ===========================================================================
// Scenario
// ===========================================================================

fn scenario_defs() -> Vec<AgentDefinition> {
    vec![
        AgentDefinition::new("coordinator", "Coordinator")
            .instruction("You coordinate.")
            .agent_tools(["researcher"]),
        exposed("researcher", "Researcher")
            .instruction("You research {{field}}.")
            .variable("field", "oceanography")
            .agent_tools(["summarizer"]),
        exposed("summarizer", "Summarizer").instruction("You summarise."),
    ]
}

struct ScenarioModels {
    coordinator: Arc<TestModel>,
    researcher: Arc<TestModel>,
    summarizer: Arc<TestModel>,
}

fn scenario_models() -> ScenarioModels {
    ScenarioModels {
        coordinator: TestModel::new(|seen| match seen.last_tool() {
            Some(result) => text(format!("Coordinator: {result}")),
            None => call(
                "Researcher",
                json!({"query": seen.last_user(), "conversation": "Tides"}),
            ),
        }),
        researcher: TestModel::new(|seen| match seen.last_tool() {
            Some(result) => text(format!("notes after {} questions ({result})", seen.users())),
            None => call(
                "Summarizer",
                json!({"query": format!("summarise {}", seen.last_user())}),
            ),
        }),
        summarizer: counting("summary"),
    }
}

/// rules AT-11, AT-13, AT-18, AT-20: a coordinator delegates to a researcher that delegates to a summarizer; sessions live in SQLite and continue after a restart.
#[tokio::test]
async fn scenario_coordinator_researcher_summarizer_continue_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let defs = scenario_defs();
    let scope = SessionScope::new("chat-1");

    // First process.
    {
        let store = SqliteSessionStore::open(&path).await.unwrap();
        let orchestrator = AgentOrchestrator::new(Arc::new(store));
        let models = scenario_models();
        let factory = by_agent(&[
            ("coordinator", Arc::clone(&models.coordinator)),
            ("researcher", Arc::clone(&models.researcher)),
            ("summarizer", Arc::clone(&models.summarizer)),
        ]);
        let coordinator = build(&orchestrator, "coordinator", &defs, &factory).await;
        let (run, events) = run_collecting(
            &coordinator,
            Some(&scope),
            RunRequest::new("How do tides work?"),
        )
        .await;
        assert_eq!(
            run.unwrap().final_text,
            "Coordinator: notes after 1 questions (summary #1: summarise How do tides work?)"
        );
        assert!(
            delegated(&events)
                .iter()
                .any(|(a, d, _, _)| a == "summarizer" && *d == 2)
        );
        assert_eq!(
            models.researcher.seen()[0].system(),
            "You research oceanography."
        );
    }

    // A restart: reopen the file, rebuild everything, continue.
    let store = Arc::new(SqliteSessionStore::open(&path).await.unwrap());
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store) as Arc<dyn SessionStore>);
    let models = scenario_models();
    let factory = by_agent(&[
        ("coordinator", Arc::clone(&models.coordinator)),
        ("researcher", Arc::clone(&models.researcher)),
        ("summarizer", Arc::clone(&models.summarizer)),
    ]);
    let coordinator = build(&orchestrator, "coordinator", &defs, &factory).await;
    let run = coordinator
        .run_in_session(&scope, RunRequest::new("And the moon?"), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.final_text,
        "Coordinator: notes after 2 questions (summary #2: summarise And the moon?)"
    );
    // Each agent saw its own earlier conversation.
    assert_eq!(models.coordinator.seen()[0].users(), 2);
    assert_eq!(models.researcher.seen()[0].users(), 2);
    assert_eq!(models.summarizer.seen()[0].users(), 2);

    // The host reads the stored conversations as text.
    let researcher = coordinator
        .child_transcript(&scope, &"researcher".into(), Some("tides"))
        .await
        .unwrap();
    let texts: Vec<&str> = researcher.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "How do tides work?",
            "notes after 1 questions (summary #1: summarise How do tides work?)",
            "And the moon?",
            "notes after 2 questions (summary #2: summarise And the moon?)",
        ]
    );
    let researcher_session = child_session_id(&"chat-1".into(), &"researcher".into(), "tides");
    let summarizer = store.children(&researcher_session).await.unwrap();
    assert_eq!(summarizer.len(), 1);
    assert_eq!(summarizer[0].agent_id, Some(AgentId::from("summarizer")));
    assert_eq!(summarizer[0].revision, 2);
    let coordinator_session = store.load(&"chat-1".into()).await.unwrap().unwrap();
    assert_eq!(coordinator_session.revision, 2);
    assert_eq!(
        coordinator.transcript(&scope).await.unwrap().len(),
        4,
        "two questions, two answers"
    );
}
