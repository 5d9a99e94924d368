//! Agents as tools (docs/rules.md) through the facade: one named
//! test (or more) per rule AT-01..AT-32, each on real harness runs with
//! deterministic models, and a scenario (coordinator → researcher →
//! summarizer) whose sessions live in SQLite and continue after a restart.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod append_conflicts;
mod appends;
mod beyond_spec;
mod caching;
mod conversations;
mod crashed;
mod delegated_shape;
mod discovery;
mod function;
mod governance;
mod kept_transcripts;
mod names;
mod scenario;
mod sim_findings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    AgentEvent, core::AgentId, core::CallId, core::CancellationToken, core::ChatRequest,
    core::ModelError, core::ModelOptions, core::RunContext, core::RunId, core::SessionId,
    core::State, core::ToolReplay, ledger::EffectLedger, ledger::MemoryLedger,
    orchestrator::ActiveAgent, orchestrator::AgentBuildRequest, orchestrator::AgentCatalog,
    orchestrator::AgentDefinition, orchestrator::AgentOrchestrator, orchestrator::AgentRole,
    orchestrator::AgentToolError, orchestrator::BuildError, orchestrator::CatalogError,
    orchestrator::ChatRole, orchestrator::Compaction, orchestrator::ContextKind,
    orchestrator::ContextProvider, orchestrator::ContextProviderFactory, orchestrator::HostTools,
    orchestrator::InMemorySessionStore, orchestrator::ModelFactory, orchestrator::ModelRegistry,
    orchestrator::OmitReason, orchestrator::RunError, orchestrator::SESSION_PROPERTY,
    orchestrator::SESSION_SCHEMA_VERSION, orchestrator::SessionError, orchestrator::SessionRecord,
    orchestrator::SessionScope, orchestrator::SessionStamp, orchestrator::SessionStore,
    orchestrator::SqliteSessionStore, orchestrator::ToolPolicy, orchestrator::Viewer,
    orchestrator::WorkspaceReadTool, orchestrator::child_run_id, orchestrator::child_session_id,
    orchestrator::normalize_function_name, orchestrator::parent_of_child_run, tools::SideEffects,
};
use tinyagents_tests::{Behaviour, ProbeTool};
use tokio::sync::Notify;

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

fn ids(agents: &[Arc<tinyagents::orchestrator::BuiltAgent>]) -> Vec<String> {
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
    let (sink, collected) = tinyagents_tests::collector();
    let result = match scope {
        Some(scope) => active.run_in_session(scope, request, &sink).await,
        None => active.run(request, &sink).await,
    };
    drop(sink);
    (result, collected.await.unwrap())
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
