//! Nested tool calls (docs/rules.md) through the facade: named
//! tests per rule NT-01..NT-42 (NT-20, NT-43 and NT-44, which concern the
//! effect ledger, are not here), each on real harness runs with a scripted
//! model, and a proptest over random trees of nested calls.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod abandonment;
mod admission;
mod budget;
mod concurrency;
mod enabling;
mod events;
mod exemptions;
mod guards;
mod hooks;
mod random_trees;
mod refusals;
mod sim_findings;
mod summary;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooks::*;
use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::tools::InvalidArgsPolicy;
use tinyagents::{
    core::CallId, core::CancellationToken, core::LimitKind, core::LimitTracker, core::RunContext,
    core::RunId, core::State, core::args_hash, harness::AgentHarnessBuilder,
    harness::ToolExecutionContext, middleware::ApprovalFn, middleware::ApprovalOutcome,
    middleware::ApprovalOutcomeFn, middleware::HumanApprovalMiddleware, middleware::Next,
    middleware::OutputVerdict, middleware::PlanModeMiddleware, middleware::RedactionMiddleware,
    middleware::Redactor, middleware::RepeatProgressMiddleware,
    middleware::ToolAllowlistMiddleware, middleware::ToolCallContext, middleware::ToolCallRequest,
    middleware::ToolPolicyMiddleware, middleware::ToolVerdict, tools, tools::SideEffects,
    tools::ToolRegistry,
};
use tinyagents_tests::parking_lot_free::Log;
use tinyagents_tests::*;

type BoxedResult = Pin<Box<dyn Future<Output = anyhow::Result<ToolResult>> + Send>>;
type Body = Arc<dyn Fn(Call) -> BoxedResult + Send + Sync>;

/// What the body of a [`Scripted`] tool receives for one call.
#[derive(Clone)]
struct Call {
    args: Value,
    opts: ToolCallOptions,
    run: ToolRunContext,
    harness: ToolExecutionContext,
}

/// A tool whose body the test writes as an async closure. It records the
/// id of every call it executed.
struct Scripted {
    spec: ToolSpec,
    body: Body,
    ids: Log,
}

impl Scripted {
    fn calls(&self) -> usize {
        self.ids.entries().len()
    }

    fn ids(&self) -> Vec<String> {
        self.ids.entries()
    }
}

fn scripted<F, Fut>(spec: ToolSpec, body: F) -> Arc<Scripted>
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<ToolResult>> + Send + 'static,
{
    Arc::new(Scripted {
        spec,
        body: Arc::new(move |call| Box::pin(body(call))),
        ids: Log::default(),
    })
}

#[async_trait]
impl Tool for Scripted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let run = context.expect("the harness passes a context").clone();
        self.ids.push(run.call_id().to_string());
        let harness = ToolExecutionContext::from_run_context(&run);
        (self.body)(Call {
            args,
            opts,
            run,
            harness,
        })
        .await
    }
}

/// A spec with the conservative defaults (not concurrency-safe) and a schema
/// that accepts any object.
fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "A scripted tool.", json!({"type": "object"}))
}

/// A concurrency-safe spec.
fn safe(name: &str) -> ToolSpec {
    spec(name).concurrency_safe(true)
}

/// `leaf`: read-only, answers `leaf <arguments>`.
fn new_leaf() -> Arc<Scripted> {
    named_leaf("leaf")
}

fn named_leaf(name: &str) -> Arc<Scripted> {
    let label = name.to_owned();
    scripted(spec(name).read_only(), move |call| {
        let label = label.clone();
        async move { Ok(ToolResult::text(format!("{label} {}", call.args))) }
    })
}

/// `reports`: a tool that reports its own failure (an `Ok` result).
fn reports() -> Arc<Scripted> {
    scripted(safe("reports"), |_| async {
        Ok(ToolResult::error("no such file"))
    })
}

/// `raises`: a tool that raises an error.
fn raises() -> Arc<Scripted> {
    scripted(safe("raises"), |_| async { anyhow::bail!("disk full") })
}

/// Upcasts a tool for registration.
fn t<T: Tool>(tool: &Arc<T>) -> Arc<dyn Tool> {
    Arc::clone(tool) as Arc<dyn Tool>
}

/// The outcome of one `call_tool` a node made: `None` when the node dropped
/// the call's future.
type Outcome = Option<Result<ToolResult, TinyAgentsError>>;

#[derive(Debug, Clone)]
struct Seen {
    parent: String,
    index: usize,
    outcome: Outcome,
}

/// A tool that runs the plan in its arguments:
/// `{"children": [{"tool": .., "args": ..}], "parallel": bool,
///   "drop_after_ms": n, "sleep_ms": n, "after_ms": n, "cancel": bool,
///   "raise": "..", "metadata": ..}`.
/// It calls its children through `call_tool` (in order, or together with
/// `parallel`), dropping each call's future after `drop_after_ms`, and
/// answers with a JSON array of one label per child.
struct Node {
    tool: Arc<Scripted>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Node {
    fn new(spec: ToolSpec) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let tool = scripted(spec, move |call| run_plan(call, Arc::clone(&log)));
        Self { tool, seen }
    }

    /// An unsafe node called `node`.
    fn plain() -> Self {
        Self::new(spec("node"))
    }

    fn tool(&self) -> Arc<dyn Tool> {
        t(&self.tool)
    }

    /// What the call `parent` of this node got from its children, in order.
    fn outcomes(&self, parent: &str) -> Vec<Outcome> {
        let mut seen: Vec<Seen> = self
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.parent == parent)
            .cloned()
            .collect();
        seen.sort_by_key(|s| s.index);
        seen.into_iter().map(|s| s.outcome).collect()
    }

    fn outcome(&self, parent: &str, index: usize) -> Outcome {
        self.outcomes(parent)
            .into_iter()
            .nth(index)
            .unwrap_or_else(|| panic!("{parent} made no call {index}"))
    }

    fn err(&self, parent: &str, index: usize) -> TinyAgentsError {
        match self.outcome(parent, index) {
            Some(Err(error)) => error,
            other => panic!("{parent}'s call {index} did not fail: {other:?}"),
        }
    }

    fn ok(&self, parent: &str, index: usize) -> ToolResult {
        match self.outcome(parent, index) {
            Some(Ok(result)) => result,
            other => panic!("{parent}'s call {index} did not succeed: {other:?}"),
        }
    }
}

async fn run_plan(call: Call, log: Arc<Mutex<Vec<Seen>>>) -> anyhow::Result<ToolResult> {
    let plan = call.args.clone();
    if let Some(ms) = plan["sleep_ms"].as_u64() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if plan["cancel"] == json!(true) {
        call.run.cancellation().cancel();
    }
    let children: Vec<(String, Value)> = plan["children"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["tool"].as_str().unwrap_or_default().to_owned(),
                c.get("args").cloned().unwrap_or_else(|| json!({})),
            )
        })
        .collect();
    let drop_after = plan["drop_after_ms"].as_u64().map(Duration::from_millis);
    let parent = call.run.call_id().to_string();
    let futures: Vec<_> = children
        .into_iter()
        .enumerate()
        .map(|(index, (name, args))| {
            let harness = call.harness.clone();
            let log = Arc::clone(&log);
            let parent = parent.clone();
            async move {
                let answer = harness.call_tool(&name, args);
                let outcome = match drop_after {
                    Some(limit) => tokio::time::timeout(limit, answer).await.ok(),
                    None => Some(answer.await),
                };
                let text = label(&outcome);
                log.lock().unwrap().push(Seen {
                    parent,
                    index,
                    outcome,
                });
                text
            }
        })
        .collect();
    let labels = if plan["parallel"] == json!(true) {
        join_all(futures).await
    } else {
        let mut labels = Vec::new();
        for future in futures {
            labels.push(future.await);
        }
        labels
    };
    if let Some(ms) = plan["after_ms"].as_u64() {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(message) = plan["raise"].as_str() {
        anyhow::bail!("{message}");
    }
    let mut result = ToolResult::text(Value::Array(labels).to_string());
    if let Some(metadata) = plan.get("metadata") {
        result = result.with_metadata(metadata.clone());
    }
    Ok(result)
}

fn label(outcome: &Outcome) -> Value {
    match outcome {
        None => json!("dropped"),
        Some(Ok(result)) if result.is_error => json!({"error": result.content}),
        Some(Ok(result)) => json!({"ok": result.content}),
        Some(Err(error)) => json!({"err": error.to_string()}),
    }
}

/// A node's plan calling `children` in order.
fn plan(children: Vec<Value>) -> Value {
    json!({ "children": children })
}

/// One child of a plan.
fn child(tool: &str, args: Value) -> Value {
    json!({ "tool": tool, "args": args })
}

/// `value` with `key` set.
fn with(mut value: Value, key: &str, field: Value) -> Value {
    value[key] = field;
    value
}

/// A model that issues `calls` in one turn, then answers `done`.
fn one_turn(calls: &[(&str, Value)]) -> Vec<ChatResponse> {
    vec![
        ScriptedModel::tool_calls(calls.iter().map(|(n, a)| (*n, a.clone()))),
        ChatResponse::text("done"),
    ]
}

/// Limits with nesting enabled up to `depth` levels.
fn nesting(depth: u32) -> RunLimits {
    RunLimits::default().with_max_nested_depth(depth)
}

/// A harness around a recording scripted model, with nesting enabled (3
/// levels) unless `configure` sets other limits.
fn build(
    responses: Vec<ChatResponse>,
    tools: Vec<Arc<dyn Tool>>,
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> (AgentHarness, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new(responses).recording());
    let mut builder = AgentHarness::builder(model.clone()).limits(nesting(3));
    for tool in tools {
        builder.register(tool).unwrap();
    }
    (configure(builder).build().unwrap(), model)
}

/// Runs and returns the run (which must not fail) and its events, after the
/// invariants every run keeps: one terminal per start, paired transcript,
/// parent ids consistent with the ids.
async fn run_checked(harness: &AgentHarness) -> (AgentRun, Vec<AgentEvent>) {
    let (run, events) = run_collecting(harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_one_terminal_per_start(&events);
    assert_transcript_paired(&run.messages);
    assert_parent_ids_consistent(&events);
    (run, events)
}

/// Every tool event's `parent_call_id` is its id's parent.
fn assert_parent_ids_consistent(events: &[AgentEvent]) {
    for event in events {
        let (id, parent) = match event {
            AgentEvent::ToolStarted {
                call_id,
                parent_call_id,
                ..
            }
            | AgentEvent::ToolCompleted {
                call_id,
                parent_call_id,
                ..
            }
            | AgentEvent::ToolFailed {
                call_id,
                parent_call_id,
                ..
            } => (call_id, parent_call_id),
            _ => continue,
        };
        assert_eq!(parent, &id.parent(), "{event:?}");
    }
}

/// The ids of the nested calls that started, in order.
fn nested_starts(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStarted { call_id, .. } if call_id.is_nested() => {
                Some(call_id.to_string())
            }
            _ => None,
        })
        .collect()
}

/// The terminal event of `id`.
fn terminal<'a>(events: &'a [AgentEvent], id: &str) -> &'a AgentEvent {
    events
        .iter()
        .find(|e| e.is_tool_terminal() && e.call_id().is_some_and(|c| c.as_str() == id))
        .unwrap_or_else(|| panic!("{id} has no terminal event"))
}

/// The error of `id`'s `ToolFailed`.
fn failed_error(events: &[AgentEvent], id: &str) -> String {
    match terminal(events, id) {
        AgentEvent::ToolFailed { error, .. } => error.clone(),
        other => panic!("{id} did not fail: {other:?}"),
    }
}

/// The metadata of `id`'s `ToolCompleted`.
fn completed_metadata(events: &[AgentEvent], id: &str) -> Option<Value> {
    match terminal(events, id) {
        AgentEvent::ToolCompleted { metadata, .. } => metadata.clone(),
        other => panic!("{id} did not complete: {other:?}"),
    }
}

/// The `nested_calls` summary of the model-issued call `id`.
fn summary(run: &AgentRun, id: &str) -> Vec<Value> {
    let metadata = run
        .tool_metadata(&CallId::new(id))
        .unwrap_or_else(|| panic!("{id} has no metadata"));
    metadata["nested_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no nested_calls in {metadata}"))
        .clone()
}

/// The summary entry of `id` in its model-issued parent's summary.
fn entry(run: &AgentRun, parent: &str, id: &str) -> Value {
    summary(run, parent)
        .into_iter()
        .find(|e| e["id"] == json!(id))
        .unwrap_or_else(|| panic!("{id} is not in {parent}'s summary"))
}

/// The transcript's result of the model-issued call `id`: (content, is_error).
fn answer(run: &AgentRun, id: &str) -> (String, bool) {
    tinyagents_tests::call_answer(&run.messages, id)
        .unwrap_or_else(|| panic!("{id} has no result in the transcript"))
}

/// What an approval outcome callback was told, by call id.
type Outcomes = Arc<Mutex<Vec<(String, ApprovalOutcome)>>>;

fn outcome_recorder() -> (ApprovalOutcomeFn, Outcomes) {
    let seen: Outcomes = Arc::default();
    let sink = Arc::clone(&seen);
    let observe: ApprovalOutcomeFn = Arc::new(move |call: &ToolCall, outcome| {
        sink.lock().unwrap().push((call.id.to_string(), outcome));
    });
    (observe, seen)
}
