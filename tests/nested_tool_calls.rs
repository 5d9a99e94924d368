//! Nested tool calls (spec/nested-tool-calls.md) through the facade: named
//! tests per rule NT-01..NT-42 (NT-20, NT-43 and NT-44, which concern the
//! effect ledger, are not here), each on real harness runs with a scripted
//! model, and a proptest over random trees of nested calls.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::InvalidArgsPolicy;
use tinyagents::prelude::*;
use tinyagents::{
    AgentHarnessBuilder, ApprovalFn, ApprovalOutcome, ApprovalOutcomeFn, CallId, CancellationToken,
    GateDecision, HumanApprovalMiddleware, LimitKind, LimitTracker, Next, OutputVerdict,
    PlanModeMiddleware, RedactionMiddleware, Redactor, RepeatProgressMiddleware, RunContext, RunId,
    SideEffects, State, ToolAllowlistMiddleware, ToolCallContext, ToolCallRequest,
    ToolExecutionContext, ToolPolicyMiddleware, ToolRegistry, args_hash, tinytools,
};
use tinyagents_tests::parking_lot_free::Log;
use tinyagents_tests::*;

// ===========================================================================
// Helpers
// ===========================================================================

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

/// Joins futures, polling them together on the current task (no `futures`
/// crate needed).
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every future finished"))
        .collect()
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
    run.messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } if call_id.as_str() == id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{id} has no result in the transcript"))
}

/// A lifecycle middleware that records its hooks, admits or refuses nested
/// calls, and records the nested results it observes.
struct Recorder {
    name: &'static str,
    log: Arc<Log>,
    /// `check_nested_tool` refuses calls of this tool (`Denied`).
    refuse: Option<&'static str>,
    /// `check_nested_tool` fails (a non-`Denied` error) for this tool.
    fail: Option<&'static str>,
    checks: AtomicUsize,
}

impl Recorder {
    fn new(name: &'static str, log: &Arc<Log>) -> Self {
        Self {
            name,
            log: Arc::clone(log),
            refuse: None,
            fail: None,
            checks: AtomicUsize::new(0),
        }
    }

    fn refusing(mut self, tool: &'static str) -> Self {
        self.refuse = Some(tool);
        self
    }

    fn failing(mut self, tool: &'static str) -> Self {
        self.fail = Some(tool);
        self
    }

    fn checks(&self) -> usize {
        self.checks.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        self.name
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.log
            .push(format!("{} before_tool {}", self.name, call.id));
        Ok(ToolVerdict::Allow)
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &ToolCall,
        _result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.log
            .push(format!("{} after_tool {}", self.name, call.id));
        Ok(())
    }

    async fn check_nested_tool(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        self.log
            .push(format!("{} check {} {}", self.name, call.id, call.name));
        if self.refuse == Some(call.name.as_str()) {
            return Err(TinyAgentsError::Denied {
                by: self.name.into(),
                reason: format!("no {}", call.name),
            });
        }
        if self.fail == Some(call.name.as_str()) {
            return Err(TinyAgentsError::State("store offline".into()));
        }
        Ok(())
    }

    async fn observe_nested_result(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
        result: &ToolResult,
    ) {
        self.log.push(format!(
            "{} observe {} {} is_error={}",
            self.name, call.id, result.content, result.is_error
        ));
    }
}

/// A middleware that implements no nested hook at all (the defaults).
struct Silent;

#[async_trait]
impl Middleware for Silent {
    fn name(&self) -> &str {
        "silent"
    }
}

/// What [`Gate`] answers about its target tool.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Allow,
    Deny,
    Ask,
    Fail,
    Panic,
}

/// A host security gate: `answer` for calls of `target`, allow for the
/// rest; it records every request and every screening.
struct Gate {
    target: &'static str,
    answer: Answer,
    log: Arc<Log>,
}

impl Gate {
    fn new(target: &'static str, answer: Answer, log: &Arc<Log>) -> Arc<Self> {
        Arc::new(Self {
            target,
            answer,
            log: Arc::clone(log),
        })
    }
}

#[async_trait]
impl SecurityGate for Gate {
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<GateDecision, TinyAgentsError> {
        self.log.push(format!(
            "gate {} {} parent={} nested={}",
            request.call_id,
            request.spec.name,
            request
                .parent_call_id
                .map_or_else(|| "-".to_owned(), ToString::to_string),
            request.is_nested()
        ));
        if request.spec.name != self.target {
            return Ok(GateDecision::Allow);
        }
        match self.answer {
            Answer::Allow => Ok(GateDecision::Allow),
            Answer::Deny => Ok(GateDecision::Deny {
                reason: "not on weekends".into(),
            }),
            Answer::Ask => Ok(GateDecision::Ask {
                reason: "ask the on-call engineer".into(),
            }),
            Answer::Fail => Err(TinyAgentsError::State("policy store unreachable".into())),
            Answer::Panic => panic!("gate panicked on purpose"),
        }
    }

    async fn screen_output(
        &self,
        _ctx: &RunContext,
        output: &str,
    ) -> Result<OutputVerdict, TinyAgentsError> {
        self.log.push(format!("screen {output}"));
        Ok(OutputVerdict::Allow)
    }
}

/// A wrap layer: records what it wraps; may refuse, rewrite, ask for
/// approval or attach a control request, for nested calls of `target`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WrapMode {
    Observe,
    Refuse,
    Rewrite,
    AskApproval,
    Control(ToolControl),
}

struct Wrap {
    target: &'static str,
    mode: WrapMode,
    exclusive: bool,
    log: Arc<Log>,
}

impl Wrap {
    fn new(target: &'static str, mode: WrapMode, log: &Arc<Log>) -> Arc<Self> {
        Arc::new(Self {
            target,
            mode,
            exclusive: false,
            log: Arc::clone(log),
        })
    }
}

#[async_trait]
impl ToolMiddleware for Wrap {
    fn name(&self) -> &str {
        "wrap"
    }

    fn concurrent_safe(&self) -> bool {
        !self.exclusive
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        mut call: ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        self.log.push(format!(
            "wrap {} {} nested={} parent={}",
            call.id,
            call.name,
            ctx.is_nested(),
            ctx.parent_call_id
                .map_or_else(|| "-".to_owned(), ToString::to_string)
        ));
        if !ctx.is_nested() || call.name != self.target {
            return next.run(ctx, call).await;
        }
        match self.mode {
            WrapMode::Observe => next.run(ctx, call).await,
            WrapMode::Refuse => Err(TinyAgentsError::Denied {
                by: "wrap".into(),
                reason: format!("no nested {}", call.name),
            }),
            WrapMode::Rewrite => {
                call.arguments = json!({"rewritten": true});
                next.run(ctx, call).await
            }
            WrapMode::AskApproval => Err(TinyAgentsError::ApprovalRequired {
                tool: call.name.clone(),
                reason: "a person must confirm".into(),
            }),
            WrapMode::Control(control) => {
                next.run(ctx, call).await.map(|r| r.with_control(control))
            }
        }
    }
}

// ===========================================================================
// NT-01..NT-05: enabling, depth, the seam
// ===========================================================================

/// rule NT-01: nesting is off by default: `max_nested_depth` is 0 and
/// `call_tool` fails with "nested tool calls are disabled (max_nested_depth = 0)".
#[tokio::test]
async fn nt_01_nesting_is_off_by_default() {
    assert_eq!(RunLimits::default().max_nested_depth(), 0);
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("leaf", json!({}))]))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(RunLimits::default()),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    let error = node.err("p1", 0);
    assert_eq!(
        error,
        TinyAgentsError::NestedDisabled {
            tool: "leaf".into()
        }
    );
    assert!(
        error
            .to_string()
            .contains("nested tool calls are disabled (max_nested_depth = 0)"),
        "{error}"
    );
    assert!(
        error.to_string().contains("'leaf'"),
        "the error names the tool: {error}"
    );
    assert_eq!(leaf.calls(), 0);
    assert!(nested_starts(&events).is_empty());
    assert_eq!(run.budget.nested_tool_calls, 0);
}

/// rule NT-02: `with_max_nested_depth(n)` enables up to n levels; the
/// model's call is level 0, what its tool calls is level 1, and so on.
#[tokio::test]
async fn nt_02_with_max_nested_depth_enables_n_levels() {
    for depth in [1u32, 2, 3] {
        let node = Node::plain();
        let leaf = new_leaf();
        // p1 (level 0) -> leaf p1/1 (level 1), node p1/2 (level 1) -> leaf p1/2/1 (level 2)
        let tree = plan(vec![
            child("leaf", json!({})),
            child("node", plan(vec![child("leaf", json!({}))])),
        ]);
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&leaf)],
            |b| b.limits(nesting(depth)),
        );
        assert_eq!(harness.limits().max_nested_depth(), depth);
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(
            node.ok("p1", 0).content,
            "leaf {}",
            "level 1 runs with depth {depth}"
        );
        node.ok("p1", 1);
        let grandchild = node.outcome("p1/2", 0);
        if depth >= 2 {
            assert!(
                matches!(grandchild, Some(Ok(_))),
                "level 2 runs with depth {depth}: {grandchild:?}"
            );
            assert_eq!(leaf.ids(), ["p1/1", "p1/2/1"]);
        } else {
            assert!(
                matches!(
                    grandchild,
                    Some(Err(TinyAgentsError::NestedDepthExceeded { .. }))
                ),
                "{grandchild:?}"
            );
            assert_eq!(leaf.ids(), ["p1/1"]);
        }
    }
}

/// rule NT-03: a call whose level exceeds the cap fails with
/// "nested call '<name>' exceeds max_nested_depth (<n>)"; the cap is
/// distinct from `max_depth` (sub-agent recursion).
#[tokio::test]
async fn nt_03_a_call_past_the_cap_fails_with_the_depth_error() {
    let chain = |levels: usize| {
        let mut tree = plan(vec![child("leaf", json!({}))]);
        for _ in 1..levels {
            tree = plan(vec![child("node", tree)]);
        }
        tree
    };
    // max_nested_depth 2: p1 -> p1/1 -> p1/1/1 -> p1/1/1/1 (level 3) is refused.
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", chain(3))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(nesting(2).with_max_depth(10)),
    );
    let (_, events) = run_checked(&harness).await;
    let error = node.err("p1/1/1", 0);
    assert_eq!(
        error,
        TinyAgentsError::NestedDepthExceeded {
            tool: "leaf".into(),
            depth: 3,
            max: 2
        }
    );
    assert_eq!(
        error.to_string(),
        "nested call 'leaf' exceeds max_nested_depth (2)"
    );
    assert_eq!(
        failed_error(&events, "p1/1/1/1"),
        "nested call 'leaf' exceeds max_nested_depth (2)"
    );
    assert_eq!(leaf.calls(), 0);

    // max_depth does not bound nested calls: 3 levels run under max_depth 0.
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("node", chain(3))]),
        vec![node.tool(), t(&leaf)],
        |b| b.limits(nesting(3).with_max_depth(0)),
    );
    run_checked(&harness).await;
    assert_eq!(leaf.ids(), ["p1/1/1/1"]);
}

/// The specification's sample tool, verbatim but for the imports,
/// `#[async_trait]`, the parameter types, and the body the sample elides
/// with `// ...`.
struct SampleTool {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for SampleTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    // The sample's own layout, kept as the specification prints it.
    #[rustfmt::skip]
    async fn execute_with_context(&self, args: Value, _opts: ToolCallOptions, context: Option<&ToolRunContext>) -> anyhow::Result<ToolResult> {
        let harness = context
            .and_then(tinytools::ToolRunContext::host_extension)
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .expect("installed by the agent loop");
        let found = harness.call_tool("search", json!({"q": "tinyagents"})).await?;
        // ...
        Ok(ToolResult::text(format!("{} (asked with {args})", found.content)))
    }
}

fn sample_tool() -> Arc<SampleTool> {
    Arc::new(SampleTool {
        spec: spec("sample"),
    })
}

fn search_tool() -> Arc<Scripted> {
    scripted(safe("search"), |call| async move {
        Ok(ToolResult::text(format!(
            "found: {}",
            call.args["q"].as_str().unwrap_or("?")
        )))
    })
}

/// rule NT-04: a tool reaches the harness through
/// `ToolRunContext::host_extension` downcast to `ToolExecutionContext`: the
/// specification's sample compiles and works through the facade.
#[tokio::test]
async fn nt_04_the_specs_sample_reaches_the_harness_through_the_host_extension() {
    let search = search_tool();
    let model = one_turn(&[("sample", json!({}))]);
    let (harness, _) = build(
        model,
        vec![sample_tool() as Arc<dyn Tool>, t(&search)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("found: tinyagents (asked with {})".to_owned(), false)
    );
    assert_eq!(search.ids(), ["p1/1"]);
    assert_eq!(nested_starts(&events), ["p1/1"]);

    // With nesting off the same sample forwards the refusal with `?`.
    let (harness, _) = build(
        one_turn(&[("sample", json!({}))]),
        vec![sample_tool() as Arc<dyn Tool>, t(&search)],
        |b| b.limits(RunLimits::default()),
    );
    let (run, _) = run_checked(&harness).await;
    let (content, is_error) = answer(&run, "p1");
    assert!(is_error);
    assert!(
        content.contains("nested tool calls are disabled (max_nested_depth = 0)"),
        "{content}"
    );
}

/// rule NT-05: outside the agent loop `call_tool` returns `ToolFailed`
/// "cannot call tool '<name>' ...: nested tool calls are only available
/// while the agent loop executes the calling tool".
#[tokio::test]
async fn nt_05_outside_the_loop_call_tool_fails_with_the_quoted_error() {
    const TAIL: &str =
        ": nested tool calls are only available while the agent loop executes the calling tool";
    let context = ToolRunContext::new(
        RunId::new("r1"),
        CallId::new("p1"),
        CancellationToken::new(),
    );
    let harness = ToolExecutionContext::from_run_context(&context);
    assert_eq!(harness.call_id(), &CallId::new("p1"));
    match harness.call_tool("search", json!({})).await.unwrap_err() {
        TinyAgentsError::ToolFailed { tool, message } => {
            assert_eq!(tool, "search");
            assert!(
                message.starts_with("cannot call tool 'search' "),
                "{message}"
            );
            assert!(message.ends_with(TAIL), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }

    // The sample tool run by hand (no loop) with that context installed.
    let context = context.clone().with_host_extension(Arc::new(harness));
    let error = sample_tool()
        .execute_with_context(json!({}), ToolCallOptions::default(), Some(&context))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("cannot call tool 'search' ") && text.ends_with(TAIL),
        "{text}"
    );
}

// ===========================================================================
// NT-06..NT-14: what applies, stage by stage
// ===========================================================================

/// rule NT-06: lookup is `model_dispatch` plus the hosted run's
/// allow-list: an unknown, host-only or disallowed name is `Err(ToolNotFound)`.
#[tokio::test]
async fn nt_06_unknown_host_only_and_disallowed_names_are_tool_not_found() {
    let node = Node::plain();
    let leaf = new_leaf();
    let hosted = named_leaf("hosted");
    let hidden = named_leaf("hidden");
    let mut registry = ToolRegistry::new();
    registry.register(node.tool()).unwrap();
    registry.register(t(&leaf)).unwrap();
    registry.register(t(&hidden)).unwrap();
    registry.register_host_tool(t(&hosted)).unwrap();
    let tree = plan(vec![
        child("ghost", json!({})),
        child("hosted", json!({})),
        child("hidden", json!({})),
        child("leaf", json!({})),
    ]);
    let model = Arc::new(ScriptedModel::new(one_turn(&[("node", tree)])));
    let harness = AgentHarness::builder(model)
        .registry(registry)
        .allow_tools(["node", "leaf"])
        .limits(nesting(3))
        .build()
        .unwrap();
    let (_, events) = run_checked(&harness).await;
    for (index, name) in [(0, "ghost"), (1, "hosted"), (2, "hidden")] {
        let error = node.err("p1", index);
        assert_eq!(error, TinyAgentsError::ToolNotFound { name: name.into() });
        assert_eq!(error.to_string(), format!("tool not found: {name}"));
    }
    assert_eq!(failed_error(&events, "p1/1"), "tool not found: ghost");
    assert_eq!((hosted.calls(), hidden.calls()), (0, 0));
    assert_eq!(node.ok("p1", 3).content, "leaf {}");
}

/// rule NT-07: arguments go through injection, the `InvalidArgsPolicy`
/// normalisation and schema validation; invalid ones are an `Err` naming
/// the tool.
#[tokio::test]
async fn nt_07_arguments_are_injected_normalised_and_validated() {
    let whoami = scripted(
        ToolSpec::new(
            "whoami",
            "Says who the user is.",
            json!({"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}),
        )
        .injected("user_id")
        .read_only(),
        |call| async move { Ok(ToolResult::text(call.args["user_id"].as_str().unwrap_or("?").to_owned())) },
    );
    let wrapped = json!({"arguments": {"a": 1, "b": 2}});
    let stringly = json!("{\"a\": 2, \"b\": 2}");
    let tree = plan(vec![
        child("whoami", json!({"user_id": "mallory"})),
        child("whoami", json!({})),
        child("add", json!({"a": "one", "b": 2})),
        child("add", wrapped.clone()),
        child("add", stringly.clone()),
    ]);
    for policy in [
        InvalidArgsPolicy::ReturnToModel,
        InvalidArgsPolicy::NormalizeThenReturn,
        InvalidArgsPolicy::Fail,
    ] {
        let node = Node::plain();
        let (harness, _) = build(
            one_turn(&[("node", tree.clone())]),
            vec![node.tool(), t(&whoami), Arc::new(add_tool())],
            |b| b.inject("user_id", json!("alice")).invalid_args(policy),
        );
        let (run, _) = run_checked(&harness).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "an invalid nested call does not end the run ({policy:?})"
        );
        assert_eq!(
            node.ok("p1", 0).content,
            "alice",
            "the host's value overwrites the caller's"
        );
        assert_eq!(node.ok("p1", 1).content, "alice");
        match node.err("p1", 2) {
            TinyAgentsError::InvalidArguments { tool, message, .. } => {
                assert_eq!(tool, "add");
                assert!(
                    message.contains("invalid arguments for tool 'add'"),
                    "{message}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        for index in [3, 4] {
            match (policy, node.outcome("p1", index)) {
                (InvalidArgsPolicy::NormalizeThenReturn, Some(Ok(result))) => {
                    assert_eq!(result.content, if index == 3 { "3" } else { "4" });
                }
                (InvalidArgsPolicy::NormalizeThenReturn, other) => {
                    panic!("not normalised: {other:?}")
                }
                (_, Some(Err(error))) => assert!(
                    error.to_string().contains("'add'"),
                    "names the tool: {error}"
                ),
                (_, other) => panic!("accepted without normalisation: {other:?}"),
            }
        }
    }
}

/// rule NT-08: an external or approval-required tool is refused with
/// "nested call '<name>' requires approval; nested calls cannot be
/// deferred", and the parent is never deferred.
#[tokio::test]
async fn nt_08_external_and_approval_required_tools_are_refused_not_deferred() {
    let node = Node::plain();
    let external = scripted(spec("remote").external(), |_| async {
        Ok(ToolResult::text("ran"))
    });
    let gated = scripted(spec("deploy").approval_required(), |_| async {
        Ok(ToolResult::text("ran"))
    });
    let tree = plan(vec![child("remote", json!({})), child("deploy", json!({}))]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&external), t(&gated)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(
        run.suspended.is_none() && run.pending().is_empty(),
        "the parent is never deferred"
    );
    for (index, name) in [(0, "remote"), (1, "deploy")] {
        let error = node.err("p1", index);
        assert_eq!(
            error,
            TinyAgentsError::NestedApprovalRequired { tool: name.into() }
        );
        assert_eq!(
            error.to_string(),
            format!("nested call '{name}' requires approval; nested calls cannot be deferred")
        );
    }
    assert_eq!(
        failed_error(&events, "p1/2"),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!((external.calls(), gated.calls()), (0, 0));
}

/// rule NT-09: an approval-required signal raised by a wrap during a nested
/// call's execution is the same refusal; the parent is not deferred.
#[tokio::test]
async fn nt_09_approval_required_raised_by_a_wrap_is_the_nested_refusal() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let deploy = named_leaf("deploy");
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("deploy", json!({}))]))]),
        vec![node.tool(), t(&deploy)],
        |b| b.tool_middleware(Wrap::new("deploy", WrapMode::AskApproval, &log)),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.suspended.is_none());
    let error = node.err("p1", 0);
    assert_eq!(
        error.to_string(),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(
        failed_error(&events, "p1/1"),
        "nested call 'deploy' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(deploy.calls(), 0);
}

/// rule NT-09: an approval-required error raised by the nested tool itself
/// (`Err(TinyAgentsError::ApprovalRequired)` through `anyhow`) is the same
/// refusal as the approval stage's.
#[tokio::test]
async fn nt_09_approval_required_raised_by_the_tool_is_the_nested_refusal() {
    let node = Node::plain();
    let deploy = scripted(spec("deploy"), |_| async {
        Err(anyhow::Error::new(TinyAgentsError::ApprovalRequired {
            tool: "deploy".into(),
            reason: "production needs a second pair of eyes".into(),
        }))
    });
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("deploy", json!({}))]))]),
        vec![node.tool(), t(&deploy)],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.suspended.is_none());
    let error = node.err("p1", 0);
    assert_eq!(
        error.to_string(),
        "nested call 'deploy' requires approval; nested calls cannot be deferred",
        "{error:?}"
    );
}

/// rule NT-10: `check_nested_tool` runs on every middleware in order,
/// after validation and before host authorisation; the first `Err` refuses
/// (naming the middleware, fail closed) and later ones are not asked; the
/// default admits.
#[tokio::test]
async fn nt_10_check_nested_tool_runs_in_order_between_validation_and_the_gate() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let flaky = named_leaf("flaky");
    let tree = plan(vec![
        child("leaf", json!({})),
        child("blocked", json!({})),
        child("add", json!({"a": "x"})),
        child("flaky", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            t(&leaf),
            t(&blocked),
            t(&flaky),
            Arc::new(add_tool()),
        ],
        |b| {
            b.middleware(Arc::new(Recorder::new("first", &log)))
                .middleware(Arc::new(Silent))
                .middleware(Arc::new(Recorder::new("second", &log).refusing("blocked")))
                .middleware(Arc::new(Recorder::new("third", &log).failing("flaky")))
                .security_gate(Gate::new("none", Answer::Allow, &log))
        },
    );
    run_checked(&harness).await;
    let nested: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| (e.contains(" check ") || e.starts_with("gate ")) && !e.starts_with("gate p1 "))
        .collect();
    assert_eq!(
        nested,
        [
            "first check p1/1 leaf",
            "second check p1/1 leaf",
            "third check p1/1 leaf",
            "gate p1/1 leaf parent=p1 nested=true",
            "first check p1/2 blocked",
            "second check p1/2 blocked",
            "first check p1/4 flaky",
            "second check p1/4 flaky",
            "third check p1/4 flaky",
        ],
        "in order; the first refusal stops the chain and the gate; invalid arguments are never checked"
    );
    node.ok("p1", 0);
    assert_eq!(
        node.err("p1", 1),
        TinyAgentsError::Denied {
            by: "second".into(),
            reason: "no blocked".into()
        }
    );
    assert_eq!(
        node.err("p1", 1).to_string(),
        "denied by second: no blocked"
    );
    assert!(matches!(
        node.err("p1", 2),
        TinyAgentsError::InvalidArguments { .. }
    ));
    assert_eq!(
        node.err("p1", 3),
        TinyAgentsError::Denied {
            by: "third".into(),
            reason: "state error: store offline".into()
        },
        "a middleware's error fails closed, naming it"
    );
    assert_eq!((blocked.calls(), flaky.calls()), (0, 0));
}

/// rule NT-10: the admission stages run in the table's order: lookup,
/// arguments, approval, middleware, host authorisation, then the wrap
/// onion.
#[tokio::test]
async fn nt_10_admission_stages_run_in_the_tables_order() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let deploy = scripted(
        ToolSpec::new(
            "deploy",
            "Deploys.",
            json!({"type": "object", "properties": {"env": {"type": "string"}}}),
        )
        .approval_required(),
        |_| async { Ok(ToolResult::text("deployed")) },
    );
    let vetoed = named_leaf("vetoed");
    let gated = named_leaf("gated");
    let tree = plan(vec![
        child("ghost", json!({})),               // lookup before middleware
        child("deploy", json!({"env": 1})),      // arguments before approval
        child("deploy", json!({"env": "prod"})), // approval before middleware
        child("vetoed", json!({})),              // middleware before the gate
        child("gated", json!({})),               // the gate before the wrap
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&deploy), t(&vetoed), t(&gated)],
        |b| {
            b.middleware(Arc::new(Recorder::new("veto", &log).refusing("vetoed")))
                .security_gate(Gate::new("gated", Answer::Deny, &log))
                .tool_middleware(Wrap::new("none", WrapMode::Observe, &log))
        },
    );
    run_checked(&harness).await;
    assert_eq!(
        node.err("p1", 0),
        TinyAgentsError::ToolNotFound {
            name: "ghost".into()
        }
    );
    assert!(
        matches!(node.err("p1", 1), TinyAgentsError::InvalidArguments { ref tool, .. } if tool == "deploy")
    );
    assert_eq!(
        node.err("p1", 2),
        TinyAgentsError::NestedApprovalRequired {
            tool: "deploy".into()
        }
    );
    assert_eq!(
        node.err("p1", 3),
        TinyAgentsError::Denied {
            by: "veto".into(),
            reason: "no vetoed".into()
        }
    );
    assert_eq!(
        node.err("p1", 4).to_string(),
        "denied by security gate: not on weekends"
    );
    let entries = log.entries();
    let asked = |what: &str| entries.iter().any(|e| e.contains(what));
    assert!(
        !asked("check p1/1") && !asked("check p1/2") && !asked("check p1/3"),
        "{entries:?}"
    );
    assert!(
        asked("veto check p1/4 vetoed") && !asked("gate p1/4"),
        "{entries:?}"
    );
    assert!(
        asked("gate p1/5 gated") && !asked("wrap p1/5"),
        "{entries:?}"
    );
    assert_eq!(deploy.calls() + vetoed.calls() + gated.calls(), 0);
}

/// rule NT-11: `ToolAllowlistMiddleware` refuses a nested call with the
/// same decision as its `before_tool`.
#[tokio::test]
async fn nt_11_allowlist_refuses_nested_calls_like_model_calls() {
    let node = Node::plain();
    let leaf = new_leaf();
    let write = named_leaf("write");
    let model = vec![
        ScriptedModel::tool_call(
            "node",
            plan(vec![child("leaf", json!({})), child("write", json!({}))]),
        ),
        ScriptedModel::tool_call("write", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf), t(&write)], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(["node", "leaf"])))
    });
    let (run, _) = run_checked(&harness).await;
    node.ok("p1", 0);
    let nested = node.err("p1", 1);
    assert_eq!(
        nested.to_string(),
        "denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: leaf, node"
    );
    assert_eq!(
        nested.to_string(),
        answer(&run, "p2").0,
        "the same decision on both paths"
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-11: `ToolPolicyMiddleware` (deny mask, sandbox, classification,
/// approval) refuses nested calls with the same decisions as `before_tool`;
/// an approval decision is the nested approval refusal, never a deferral.
#[tokio::test]
async fn nt_11_tool_policy_refuses_nested_calls_like_model_calls() {
    let node = Node::plain();
    let fetch = scripted(
        spec("fetch").side_effects(SideEffects::NETWORK_EGRESS),
        |_| async { Ok(ToolResult::text("fetched")) },
    );
    let shell = scripted(
        spec("shell")
            .side_effects(SideEffects::CODE_EXECUTION)
            .sandboxed(),
        |_| async { Ok(ToolResult::text("ran")) },
    );
    let read = named_leaf("read");
    let write = named_leaf("write");
    let calls = ["fetch", "shell", "read", "write"];
    let tree = plan(calls.iter().map(|n| child(n, json!({}))).collect());
    let mut model = vec![ScriptedModel::tool_call("node", tree)];
    model.push(ScriptedModel::tool_calls(
        calls[..3].iter().map(|n| (*n, json!({}))),
    ));
    model.push(ChatResponse::text("done"));
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT)
        .classify("read", SideEffects::PAYMENT)
        .require_approval("write");
    let (harness, _) = build(
        model,
        vec![node.tool(), t(&fetch), t(&shell), t(&read), t(&write)],
        |b| b.middleware(Arc::new(policy)),
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed, "never deferred");
    for (index, id) in [(0, "p2"), (1, "p3"), (2, "p4")] {
        let nested = node.err("p1", index).to_string();
        assert!(nested.starts_with("denied by tool_policy: "), "{nested}");
        assert_eq!(
            nested,
            answer(&run, id).0,
            "the same decision on both paths"
        );
    }
    assert_eq!(
        node.err("p1", 3).to_string(),
        "denied by tool_policy: nested call 'write' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(
        fetch.calls() + shell.calls() + read.calls() + write.calls(),
        0
    );
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

/// rule NT-11: `HumanApprovalMiddleware` fails a flagged nested call with
/// the approval error unless its callback allows it, and never interrupts
/// or defers the run.
#[tokio::test]
async fn nt_11_human_approval_fails_flagged_nested_calls_unless_the_callback_allows() {
    let node = Node::plain();
    let mail = named_leaf("mail");
    let (observe, outcomes) = outcome_recorder();
    let approve: ApprovalFn = Arc::new(|call: &ToolCall| call.arguments["to"] == "me@example.com");
    let approval = HumanApprovalMiddleware::new()
        .require("mail")
        .with_approval_fn(approve)
        .with_outcome_fn(observe);
    let tree = plan(vec![
        child("mail", json!({"to": "me@example.com"})),
        child("mail", json!({"to": "boss@example.com"})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&mail)],
        |b| b.middleware(Arc::new(approval)),
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert!(
        run.suspended.is_none(),
        "a nested call never suspends the run"
    );
    node.ok("p1", 0);
    assert_eq!(
        node.err("p1", 1).to_string(),
        "denied by human_approval: nested call 'mail' requires approval; nested calls cannot be deferred"
    );
    assert_eq!(mail.ids(), ["p1/1"]);
    assert_eq!(
        *outcomes.lock().unwrap(),
        [
            ("p1/1".to_owned(), ApprovalOutcome::Approved),
            ("p1/2".to_owned(), ApprovalOutcome::Refused)
        ]
    );

    // Without a callback, a flagged nested call fails; a panicking callback
    // fails closed.
    for callback in [
        None,
        Some(Arc::new(|_: &ToolCall| -> bool { panic!("approval service down") }) as ApprovalFn),
    ] {
        let node = Node::plain();
        let mail = named_leaf("mail");
        let mut approval = HumanApprovalMiddleware::new().require("mail");
        let panics = callback.is_some();
        if let Some(callback) = callback {
            approval = approval.with_approval_fn(callback);
        }
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("mail", json!({}))]))]),
            vec![node.tool(), t(&mail)],
            |b| b.middleware(Arc::new(approval)),
        );
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed);
        let text = node.err("p1", 0).to_string();
        if panics {
            assert!(
                text.starts_with("denied by human_approval: the approval callback failed"),
                "{text}"
            );
        } else {
            assert!(
                text.ends_with(
                    "nested call 'mail' requires approval; nested calls cannot be deferred"
                ),
                "{text}"
            );
        }
        assert_eq!(mail.calls(), 0);
    }
}

/// rule NT-11: `PlanModeMiddleware` refuses a nested call of a tool that is
/// not read-only, with the same message as `before_tool`.
#[tokio::test]
async fn nt_11_plan_mode_refuses_nested_calls_like_model_calls() {
    let survey = Node::new(spec("survey").read_only());
    let leaf = new_leaf();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = vec![
        ScriptedModel::tool_call(
            "survey",
            plan(vec![child("leaf", json!({})), child("write", json!({}))]),
        ),
        ScriptedModel::tool_call("write", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![survey.tool(), t(&leaf), t(&write)], |b| {
        b.middleware(Arc::new(PlanModeMiddleware::new(true)))
    });
    let (run, _) = run_checked(&harness).await;
    survey.ok("p1", 0);
    let nested = survey.err("p1", 1).to_string();
    assert!(
        nested.starts_with("denied by plan_mode: You are in plan mode"),
        "{nested}"
    );
    assert_eq!(
        nested,
        answer(&run, "p2").0,
        "the same decision on both paths"
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-12: the security gate sees a nested call with `parent_call_id`
/// set and `is_nested()` true (a model call with neither); it allows it.
#[tokio::test]
async fn nt_12_the_gate_sees_the_parent_of_a_nested_call() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let leaf = new_leaf();
    let tree = plan(vec![child("node", plan(vec![child("leaf", json!({}))]))]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&leaf)],
        |b| b.security_gate(Gate::new("leaf", Answer::Allow, &log)),
    );
    run_checked(&harness).await;
    let asked: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.starts_with("gate"))
        .collect();
    assert_eq!(
        asked,
        [
            "gate p1 node parent=- nested=false",
            "gate p1/1 node parent=p1 nested=true",
            "gate p1/1/1 leaf parent=p1/1 nested=true",
        ]
    );
    assert_eq!(leaf.ids(), ["p1/1/1"]);
}

/// rule NT-12: a gate's denial of a nested call is an `Err`; a question
/// (`Ask`) fails closed, since a nested call cannot be prompted for; a gate
/// that errors or panics refuses.
#[tokio::test]
async fn nt_12_a_gate_denial_question_error_or_panic_refuses_a_nested_call() {
    for answer_mode in [Answer::Deny, Answer::Ask, Answer::Fail, Answer::Panic] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("leaf", json!({}))]))]),
            vec![node.tool(), t(&leaf)],
            |b| b.security_gate(Gate::new("leaf", answer_mode, &log)),
        );
        let (run, events) = run_checked(&harness).await;
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "{answer_mode:?}: the parent is never deferred"
        );
        assert!(run.suspended.is_none());
        let error = node.err("p1", 0);
        let TinyAgentsError::Denied { by, reason } = &error else {
            panic!("{answer_mode:?}: {error:?}")
        };
        assert_eq!(by, "security gate");
        match answer_mode {
            Answer::Deny => assert_eq!(reason, "not on weekends"),
            Answer::Ask => assert!(reason.contains("ask the on-call engineer"), "{reason}"),
            Answer::Fail => assert!(reason.contains("policy store unreachable"), "{reason}"),
            Answer::Panic => assert!(reason.contains("panicked"), "{reason}"),
            Answer::Allow => unreachable!(),
        }
        assert_eq!(failed_error(&events, "p1/1"), error.to_string());
        assert_eq!(leaf.calls(), 0, "{answer_mode:?}");
    }
}

/// rule NT-13: `wrap_tool` runs around nested calls (it sees the parent),
/// and may deny or rewrite them.
#[tokio::test]
async fn nt_13_wrap_tool_runs_around_nested_calls_and_may_deny_or_rewrite() {
    for mode in [WrapMode::Observe, WrapMode::Refuse, WrapMode::Rewrite] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, _) = build(
            one_turn(&[("node", plan(vec![child("leaf", json!({"v": 1}))]))]),
            vec![node.tool(), t(&leaf)],
            |b| b.tool_middleware(Wrap::new("leaf", mode, &log)),
        );
        run_checked(&harness).await;
        assert_eq!(
            log.entries(),
            [
                "wrap p1 node nested=false parent=-",
                "wrap p1/1 leaf nested=true parent=p1"
            ]
        );
        match mode {
            WrapMode::Observe => assert_eq!(node.ok("p1", 0).content, "leaf {\"v\":1}"),
            WrapMode::Refuse => {
                assert_eq!(
                    node.err("p1", 0).to_string(),
                    "denied by wrap: no nested leaf"
                );
                assert_eq!(leaf.calls(), 0);
            }
            WrapMode::Rewrite => assert_eq!(node.ok("p1", 0).content, "leaf {\"rewritten\":true}"),
            _ => unreachable!(),
        }
    }
}

/// rule NT-14: a nested call is bounded by its tool's own timeout, by the
/// run's default tool timeout, and by the run's remaining wall-clock budget.
#[tokio::test(start_paused = true)]
async fn nt_14_nested_calls_get_the_tool_timeout_and_the_remaining_wall_clock() {
    let node = Node::new(spec("node").timeout(Duration::from_secs(60)));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)))
        .with_spec(|s| s.timeout(Duration::from_secs(1)));
    let slower = ProbeTool::new("slower", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[(
            "node",
            plan(vec![child("slow", json!({})), child("slower", json!({}))]),
        )]),
        vec![node.tool(), slow, slower],
        |b| b.limits(nesting(3).with_tool_timeout(Some(Duration::from_secs(2)))),
    );
    let (_, events) = run_checked(&harness).await;
    assert_eq!(
        node.err("p1", 0),
        TinyAgentsError::Timeout {
            what: "slow".into(),
            after_ms: 1000
        }
    );
    assert_eq!(
        node.err("p1", 0).to_string(),
        "'slow' timed out after 1000 ms"
    );
    assert_eq!(
        node.err("p1", 1),
        TinyAgentsError::Timeout {
            what: "slower".into(),
            after_ms: 2000
        }
    );
    assert_eq!(
        failed_error(&events, "p1/2"),
        "'slower' timed out after 2000 ms"
    );

    // The wall clock: 10 s for the run; the parent calls after 4 s, so its
    // nested call may take at most the 6 s left.
    let node = Node::plain();
    let clock = scripted(safe("clock"), |call| async move {
        Ok(ToolResult::text(format!("{:?}", call.opts.timeout)))
    });
    let tree = with(
        plan(vec![child("clock", json!({}))]),
        "sleep_ms",
        json!(4000),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&clock)],
        |b| {
            b.limits(
                nesting(3)
                    .with_tool_timeout(None)
                    .with_wall_clock(Some(Duration::from_secs(10))),
            )
        },
    );
    run_checked(&harness).await;
    assert_eq!(
        node.ok("p1", 0).content,
        format!("{:?}", Some(Duration::from_secs(6)))
    );
}

// ===========================================================================
// NT-15..NT-18: the shared budget
// ===========================================================================

/// rule NT-15: nested and model-issued calls draw on one `max_tool_calls`
/// pool; `tool_calls` counts the model-issued calls only.
#[tokio::test]
async fn nt_15_one_pool_and_tool_calls_counts_model_issued_calls_only() {
    let node = Node::plain();
    let leaf = new_leaf();
    let model = vec![
        ScriptedModel::tool_call(
            "node",
            plan(vec![
                child("leaf", json!({})),
                child("leaf", json!({})),
                child("leaf", json!({})),
            ]),
        ),
        ScriptedModel::tool_call("leaf", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| b);
    let (run, _) = run_checked(&harness).await;
    assert_eq!(run.budget.tool_calls, 2, "model-issued: node and leaf");
    assert_eq!(run.budget.nested_tool_calls, 3);

    // The tracker a host passes in sees the same split, against one cap.
    let tracker = Arc::new(LimitTracker::new(
        &RunLimits::default().with_max_tool_calls(4),
    ));
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b.limits(nesting(3).with_max_tool_calls(4)),
    );
    let mut request = RunRequest::new("go");
    request.tracker = Some(Arc::clone(&tracker));
    harness.run_with(request, &EventSink::none()).await.unwrap();
    assert_eq!(
        (
            tracker.tool_calls(),
            tracker.nested_tool_calls(),
            tracker.total_tool_calls()
        ),
        (1, 3, 4)
    );
    assert!(matches!(
        node.err("p1", 3),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::ToolCalls,
            limit: 4,
            used: 4
        }
    ));

    // Reserving a nested slot needs only `&LimitTracker` (what a tool future
    // holds), and counts against the same cap as model-issued calls.
    let shared: &LimitTracker = &LimitTracker::new(&RunLimits::default().with_max_tool_calls(2));
    shared.try_reserve_nested_tool_call().unwrap();
    shared.try_reserve_tool_call().unwrap();
    assert!(shared.try_reserve_nested_tool_call().is_err());
    assert!(shared.try_reserve_tool_call().is_err());
    assert_eq!((shared.tool_calls(), shared.nested_tool_calls()), (1, 1));
}

/// rule NT-16: concurrent parents cannot overspend the cap.
#[tokio::test(start_paused = true)]
async fn nt_16_concurrent_parents_cannot_overspend_the_cap() {
    let node = Node::new(safe("node"));
    let leaf = ProbeTool::new("leaf", true, Behaviour::Yield(2));
    let fan = with(
        plan((0..5).map(|_| child("leaf", json!({}))).collect()),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", fan.clone()), ("node", fan)]),
        vec![node.tool(), leaf.clone()],
        |b| b.limits(nesting(3).with_max_tool_calls(6)),
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        (run.budget.tool_calls, run.budget.nested_tool_calls),
        (2, 4)
    );
    let outcomes: Vec<Outcome> = node
        .outcomes("p1")
        .into_iter()
        .chain(node.outcomes("p2"))
        .collect();
    let ok = outcomes.iter().filter(|o| matches!(o, Some(Ok(_)))).count();
    let refused = outcomes
        .iter()
        .filter(|o| {
            matches!(
                o,
                Some(Err(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::ToolCalls,
                    limit: 6,
                    used: 6
                }))
            )
        })
        .count();
    assert_eq!((ok, refused), (4, 6), "{outcomes:?}");
    assert_eq!(leaf.calls.load(Ordering::SeqCst), 4);
    assert!(
        leaf.max_active.load(Ordering::SeqCst) >= 2,
        "the fan-outs ran together"
    );
    assert_eq!(nested_starts(&events).len(), 10);
}

/// rule NT-16: a cap spent by nested calls trips the next model-issued call.
#[tokio::test]
async fn nt_16_a_cap_spent_by_nested_calls_trips_the_next_model_issued_call() {
    for behavior in [LimitBehavior::Error, LimitBehavior::Stop] {
        let node = Node::plain();
        let leaf = new_leaf();
        let model = vec![
            ScriptedModel::tool_call(
                "node",
                plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
            ),
            ScriptedModel::tool_call("leaf", json!({})),
            ChatResponse::text("unreachable"),
        ];
        let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| {
            b.limits(nesting(3).with_max_tool_calls(3).with_behavior(behavior))
        });
        let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
        assert_one_terminal_per_start(&events);
        let expected = TinyAgentsError::LimitExceeded {
            kind: LimitKind::ToolCalls,
            limit: 3,
            used: 3,
        };
        match behavior {
            LimitBehavior::Error => assert_eq!(run.unwrap_err(), expected),
            LimitBehavior::Stop => {
                let run = run.unwrap();
                assert_eq!(run.status, RunStatus::LimitReached(LimitKind::ToolCalls));
                assert_eq!(
                    (run.budget.tool_calls, run.budget.nested_tool_calls),
                    (1, 2)
                );
                assert!(answer(&run, "p2").1, "the model-issued call was refused");
            }
        }
        assert_eq!(leaf.ids(), ["p1/1", "p1/2"], "the model's leaf never ran");
    }
}

/// rule NT-17: a refused nested call releases its slot (refusals at any
/// stage, the concurrency gate included); one that ran keeps it, whatever
/// its outcome.
#[tokio::test]
async fn nt_17_refused_calls_release_their_slot_and_calls_that_ran_keep_it() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let leaf = new_leaf();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let tree = plan(vec![
        child("ghost", json!({})),
        child("ghost", json!({})),
        child("ghost", json!({})),
        child("snode", plan(vec![child("write", json!({}))])),
        child("raises", json!({})),
        child("reports", json!({})),
        child("leaf", json!({})),
        child("leaf", json!({})),
    ]);
    // 1 model-issued + snode, raises, reports, leaf = 5 = the cap; the
    // refused ghosts and the refused write hold nothing.
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            snode.tool(),
            t(&leaf),
            t(&write),
            t(&raises()),
            t(&reports()),
        ],
        |b| b.limits(nesting(3).with_max_tool_calls(5)),
    );
    let (run, _) = run_checked(&harness).await;
    assert!(
        matches!(snode.err("p1/4", 0), TinyAgentsError::ToolFailed { .. }),
        "a safe call cannot nest an unsafe one"
    );
    assert_eq!(node.err("p1", 4).to_string(), "disk full");
    assert!(node.ok("p1", 5).is_error);
    node.ok("p1", 6);
    assert!(
        matches!(
            node.err("p1", 7),
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::ToolCalls,
                limit: 5,
                used: 5
            }
        ),
        "calls that ran (raised, reported an error, or succeeded) keep their slot"
    );
    assert_eq!(
        (run.budget.tool_calls, run.budget.nested_tool_calls),
        (1, 4)
    );
    assert_eq!(write.calls(), 0);
}

/// rule NT-17: a nested call that never ran (dropped with its parent while
/// it waited in admission for the concurrency gate) does not keep a slot.
#[tokio::test(start_paused = true)]
async fn nt_17_a_call_dropped_while_waiting_for_the_gate_gives_its_slot_back() {
    let node = Node::plain();
    let outer = Node::new(safe("outer").timeout(Duration::from_millis(30)));
    let quick = Node::new(safe("quick").timeout(Duration::from_millis(20)));
    let leaf = new_leaf();
    let model = one_turn(&[
        // p1/1 takes the exclusive side of the gate for 100 ms; p1 times out at 30 ms.
        (
            "outer",
            plan(vec![child(
                "node",
                with(plan(vec![]), "sleep_ms", json!(100)),
            )]),
        ),
        // p2/1 waits for the gate from 10 ms; p2 times out at 20 ms.
        (
            "quick",
            with(plan(vec![child("leaf", json!({}))]), "sleep_ms", json!(10)),
        ),
    ]);
    let (harness, _) = build(
        model,
        vec![node.tool(), outer.tool(), quick.tool(), t(&leaf)],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(leaf.calls(), 0, "p2/1 never ran");
    // Every request that reaches the loop has its pair of events: p2/1 ends,
    // abandoned while it waited for the gate, when its parent settled.
    assert_eq!(nested_starts(&events), ["p1/1", "p2/1"]);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolFailed { call_id, error, .. }
            if call_id.as_str() == "p2/1" && error.starts_with("parent settled: ")
    )));
    assert_eq!(
        run.budget.nested_tool_calls, 1,
        "only p1/1 ran; p2/1 gave its slot back"
    );
}

/// rule NT-18: a spent cap is an error for the nested caller
/// (`LimitExceeded` plus `LimitReached { ToolCalls }`) whatever
/// `LimitBehavior` says.
#[tokio::test]
async fn nt_18_a_spent_cap_is_an_error_for_the_nested_caller_under_either_behavior() {
    for behavior in [LimitBehavior::Stop, LimitBehavior::Error] {
        let node = Node::plain();
        let leaf = new_leaf();
        let (harness, model) = build(
            one_turn(&[(
                "node",
                plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
            )]),
            vec![node.tool(), t(&leaf)],
            |b| b.limits(nesting(3).with_max_tool_calls(2).with_behavior(behavior)),
        );
        let (run, events) = run_checked(&harness).await;
        node.ok("p1", 0);
        let error = node.err("p1", 1);
        assert_eq!(
            error,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::ToolCalls,
                limit: 2,
                used: 2
            },
            "{behavior:?}"
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                AgentEvent::LimitReached {
                    kind: LimitKind::ToolCalls,
                    limit: 2,
                    used: 2
                }
            )),
            "{behavior:?}"
        );
        assert_eq!(failed_error(&events, "p1/2"), error.to_string());
        assert_eq!(leaf.calls(), 1);
        assert_eq!(
            model.calls(),
            2,
            "the parent's result went back to the model ({behavior:?})"
        );
        assert_eq!(run.final_text, "done");
    }
}

// ===========================================================================
// NT-19, NT-21..NT-25: observation, refusals, cancellation, dropped calls
// ===========================================================================

/// rule NT-19: `observe_nested_result` runs on every middleware, in order,
/// after a nested call produced a result (including one reporting its own
/// failure); not for refused or raised calls, nor for model-issued ones; it
/// cannot rewrite the result.
#[tokio::test]
async fn nt_19_observe_nested_result_sees_every_result_and_nothing_else() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("reports", json!({})),
        child("ghost", json!({})),
        child("raises", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf()), t(&reports()), t(&raises())],
        |b| {
            b.middleware(Arc::new(Recorder::new("a", &log)))
                .middleware(Arc::new(Recorder::new("b", &log)))
        },
    );
    run_checked(&harness).await;
    let observed: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.contains(" observe "))
        .collect();
    assert_eq!(
        observed,
        [
            "a observe p1/1 leaf {} is_error=false",
            "b observe p1/1 leaf {} is_error=false",
            "a observe p1/2 no such file is_error=true",
            "b observe p1/2 no such file is_error=true",
        ]
    );
    assert_eq!(
        node.ok("p1", 0).content,
        "leaf {}",
        "the parent gets the result unchanged"
    );
}

/// A middleware that refuses every nested call of `blocked`, counting how
/// often it is asked.
fn counting_refuser(log: &Arc<Log>) -> Arc<Recorder> {
    Arc::new(Recorder::new("refuser", log).refusing("blocked"))
}

/// rule NT-21: a parent gets at most 8 refused nested calls; every later
/// call is refused without being evaluated; the quota is per immediate
/// parent.
#[tokio::test]
async fn nt_21_a_parent_gets_eight_refusals_then_calls_are_refused_unevaluated() {
    let log = Arc::new(Log::default());
    let refuser = counting_refuser(&log);
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let mut children: Vec<Value> = (0..10).map(|_| child("blocked", json!({}))).collect();
    children.push(child("leaf", json!({})));
    let model = vec![
        ScriptedModel::tool_call("node", plan(children)),
        ScriptedModel::tool_call(
            "node",
            plan(vec![child("blocked", json!({})), child("leaf", json!({}))]),
        ),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&leaf), t(&blocked)], |b| {
        b.middleware(refuser.clone())
    });
    let (run, events) = run_checked(&harness).await;
    let outcomes = node.outcomes("p1");
    for (index, outcome) in outcomes.iter().enumerate().take(8) {
        assert!(
            matches!(outcome, Some(Err(TinyAgentsError::Denied { .. }))),
            "{index}: {outcome:?}"
        );
    }
    for (index, tool) in [(8, "blocked"), (9, "blocked"), (10, "leaf")] {
        let error = node.err("p1", index);
        assert_eq!(
            error,
            TinyAgentsError::NestedRefusalCap {
                tool: tool.into(),
                parent: CallId::new("p1"),
                cap: 8
            }
        );
        assert!(
            error.to_string().contains("refused without evaluation"),
            "{error}"
        );
    }
    // p1's calls were evaluated 8 times; p2 (another parent) is evaluated again.
    assert_eq!(refuser.checks(), 8 + 2);
    assert!(matches!(node.err("p2", 0), TinyAgentsError::Denied { .. }));
    node.ok("p2", 1);
    assert_eq!(leaf.ids(), ["p2/2"]);
    assert_eq!(
        nested_starts(&events).len(),
        13,
        "every refused call has its events"
    );
    assert_eq!(summary(&run, "p1").len(), 11);
    assert!(summary(&run, "p1").iter().all(|e| e["status"] == "failed"));
}

/// rule NT-21: the quota belongs to the immediate parent: a nested parent's
/// refusals do not count against its own parent.
#[tokio::test]
async fn nt_21_the_refusal_quota_is_per_immediate_parent() {
    let log = Arc::new(Log::default());
    let refuser = counting_refuser(&log);
    let node = Node::plain();
    let leaf = new_leaf();
    let blocked = named_leaf("blocked");
    let eight = || {
        (0..8)
            .map(|_| child("blocked", json!({})))
            .collect::<Vec<_>>()
    };
    let mut children: Vec<Value> = vec![child("node", plan(eight())), child("node", plan(eight()))];
    children.push(child("leaf", json!({})));
    let (harness, _) = build(
        one_turn(&[("node", plan(children))]),
        vec![node.tool(), t(&leaf), t(&blocked)],
        |b| b.middleware(refuser.clone()),
    );
    run_checked(&harness).await;
    // p1's three calls, and eight refusals under each nested parent.
    assert_eq!(
        refuser.checks(),
        3 + 8 + 8,
        "each nested parent has its own quota"
    );
    node.ok("p1", 2);
    assert_eq!(leaf.ids(), ["p1/3"]);
}

/// rule NT-22: a cancelled run refuses the next nested call.
#[tokio::test]
async fn nt_22_a_cancelled_run_refuses_the_next_nested_call() {
    // The tool cancels the run, then calls: whether the loop services that
    // call before it stops the batch depends on the order it polls in, so
    // the scenario runs several times; when the call is serviced it is
    // refused, and it never runs.
    let mut observed = 0;
    for _ in 0..32 {
        let node = Node::plain();
        let leaf = new_leaf();
        let tree = with(plan(vec![child("leaf", json!({}))]), "cancel", json!(true));
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&leaf)],
            |b| b,
        );
        let token = CancellationToken::new();
        let (run, events) =
            run_collecting(&harness, RunRequest::new("go").with_cancellation(token)).await;
        let run = run.unwrap();
        assert_one_terminal_per_start(&events);
        assert_transcript_paired(&run.messages);
        assert_eq!(run.status, RunStatus::Cancelled);
        assert_eq!(leaf.calls(), 0, "the nested call never ran");
        if let Some(outcome) = node.outcomes("p1").first() {
            let Some(Err(error)) = outcome else {
                panic!("{outcome:?}")
            };
            assert!(error.to_string().contains("cancelled"), "{error}");
            observed += 1;
        }
        for id in nested_starts(&events) {
            assert!(failed_error(&events, &id).contains("cancelled"), "{id}");
        }
    }
    assert!(observed > 0, "the refusal was never observed");
}

/// rule NT-22: dropping the parent (the run is cancelled) drops its
/// in-flight nested calls, which end with "parent settled: ...".
#[tokio::test(start_paused = true)]
async fn nt_22_cancelling_the_run_drops_in_flight_nested_calls() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(60)));
    let tree = plan(vec![child(
        "node",
        plan(vec![child("slow", json!({"tag": "inner"}))]),
    )]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let token = CancellationToken::new();
    let canceller = {
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            token.cancel();
        }
    };
    let ((run, events), ()) = tokio::join!(
        run_collecting(&harness, RunRequest::new("go").with_cancellation(token)),
        canceller
    );
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_one_terminal_per_start(&events);
    assert_parent_ids_consistent(&events);
    assert_eq!(
        slow.order.entries(),
        ["start inner"],
        "the nested tool's future was dropped"
    );
    for id in ["p1/1", "p1/1/1"] {
        assert!(
            failed_error(&events, id).starts_with("parent settled: "),
            "{id}: {}",
            failed_error(&events, id)
        );
    }
}

/// rule NT-23: a tool that reports its own failure is an `Ok` result; a
/// refusal is an `Err`, and a tool that forwards it with `?` is answered to
/// the model as `ToolFailed`, with the message verbatim.
#[tokio::test]
async fn nt_23_reported_failures_are_ok_and_forwarded_refusals_reach_the_model_verbatim() {
    let node = Node::plain();
    let forwarder = scripted(spec("forwarder"), |call| async move {
        let found = call.harness.call_tool("ghost", json!({})).await?;
        Ok(found)
    });
    let model = one_turn(&[
        ("node", plan(vec![child("reports", json!({}))])),
        ("forwarder", json!({})),
    ]);
    let (harness, model) = build(
        model,
        vec![node.tool(), t(&forwarder), t(&reports())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let reported = node.ok("p1", 0);
    assert!(reported.is_error);
    assert_eq!(reported.content, "no such file");
    assert!(matches!(
        terminal(&events, "p1/1"),
        AgentEvent::ToolCompleted { is_error: true, .. }
    ));
    assert_eq!(
        answer(&run, "p2"),
        ("tool not found: ghost".to_owned(), true)
    );
    assert_eq!(failed_error(&events, "p2"), "tool not found: ghost");
    let read = tool_results(&model.requests().last().unwrap().messages);
    assert_eq!(
        read[1],
        (
            "forwarder".to_owned(),
            "tool not found: ghost".to_owned(),
            true
        )
    );
}

/// rule NT-24: a tool that drops the `call_tool` future ends the nested call
/// with `ToolFailed("parent settled: ...")`, status `abandoned` in the
/// summary with its error even without `tool_io` capture; the nested tool
/// is dropped.
#[tokio::test(start_paused = true)]
async fn nt_24_a_dropped_call_tool_future_abandons_the_nested_call() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let tree = with(
        with(
            plan(vec![child("slow", json!({"tag": "x"}))]),
            "drop_after_ms",
            json!(100),
        ),
        "after_ms",
        json!(50),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert!(
        node.outcome("p1", 0).is_none(),
        "the parent stopped waiting"
    );
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    let abandoned = entry(&run, "p1", "p1/1");
    assert_eq!(abandoned["status"], "abandoned");
    assert!(
        abandoned["error"]
            .as_str()
            .unwrap()
            .starts_with("parent settled: "),
        "{abandoned}"
    );
    assert!(abandoned.get("args").is_none(), "no capture, no args");
    assert_eq!(
        slow.order.entries(),
        ["start x"],
        "the nested tool was dropped"
    );
    assert!(!answer(&run, "p1").1, "the parent itself succeeded");
}

/// rule NT-24: a parent that times out while its nested call is in flight
/// ends that call with `ToolFailed("parent settled: ...")`.
#[tokio::test(start_paused = true)]
async fn nt_24_a_parent_that_times_out_abandons_its_nested_call() {
    let node = Node::new(spec("node").timeout(Duration::from_secs(1)));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("slow", json!({"tag": "x"}))]))]),
        vec![node.tool(), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("'node' timed out after 1000 ms".to_owned(), true)
    );
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    assert_eq!(slow.order.entries(), ["start x"]);
}

/// rule NT-24: a parent that settles (returns) while a nested call it
/// started from a spawned task is still in flight ends that call with
/// `ToolFailed("parent settled: ...")`, and the waiting task gets that error.
#[tokio::test(start_paused = true)]
async fn nt_24_a_parent_that_settles_abandons_its_nested_call() {
    type Handle = tokio::task::JoinHandle<Result<ToolResult, TinyAgentsError>>;
    let detached: Arc<Mutex<Option<Handle>>> = Arc::default();
    let slot = Arc::clone(&detached);
    let spawner = scripted(spec("spawner"), move |call| {
        let slot = Arc::clone(&slot);
        async move {
            let harness = call.harness.clone();
            *slot.lock().unwrap() = Some(tokio::spawn(async move {
                harness.call_tool("slow", json!({"tag": "x"})).await
            }));
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(ToolResult::text("left early"))
        }
    });
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let (harness, _) = build(
        one_turn(&[("spawner", json!({}))]),
        vec![t(&spawner), slow.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(answer(&run, "p1"), ("left early".to_owned(), false));
    let error = failed_error(&events, "p1/1");
    assert!(error.starts_with("parent settled: "), "{error}");
    assert_eq!(entry(&run, "p1", "p1/1")["status"], "abandoned");
    let handle = detached.lock().unwrap().take().unwrap();
    let waited = handle.await.unwrap().unwrap_err();
    assert!(
        waited.to_string().starts_with("parent settled: "),
        "{waited}"
    );
    assert_eq!(slow.order.entries(), ["start x"]);
}

/// rule NT-24: a nested call still waiting in admission (here for the
/// concurrency gate) when its parent stops waiting and settles is dropped
/// with it: it never runs, and it ends with "parent settled: ..." and the
/// abandoned status in the parent's summary.
#[tokio::test(start_paused = true)]
async fn nt_24_a_nested_call_waiting_for_the_gate_is_dropped_with_its_parent() {
    let holder = Node::new(safe("holder"));
    let quitter = Node::new(safe("quitter"));
    let hold = ProbeTool::new("hold", false, Behaviour::Sleep(Duration::from_millis(100)));
    let late = ProbeTool::new("late", false, Behaviour::Yield(0));
    let model = one_turn(&[
        (
            "holder",
            with(
                plan(vec![child("hold", json!({"tag": "h"}))]),
                "after_ms",
                json!(500),
            ),
        ),
        (
            "quitter",
            with(
                with(
                    plan(vec![child("late", json!({"tag": "l"}))]),
                    "sleep_ms",
                    json!(10),
                ),
                "drop_after_ms",
                json!(10),
            ),
        ),
    ]);
    let (harness, _) = build(
        model,
        vec![holder.tool(), quitter.tool(), hold.clone(), late.clone()],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    holder.ok("p1", 0);
    assert!(
        quitter.outcome("p2", 0).is_none(),
        "the quitter stopped waiting"
    );
    assert_eq!(
        late.calls.load(Ordering::SeqCst),
        0,
        "a call whose parent settled must not run"
    );
    let abandoned = entry(&run, "p2", "p2/1");
    assert_eq!(abandoned["status"], "abandoned", "{abandoned}");
    assert!(failed_error(&events, "p2/1").starts_with("parent settled: "));
}

/// rule NT-25: every nested `ToolStarted` has exactly one terminal event,
/// whatever way the call ends (ok, reported error, refusal, raise, timeout,
/// depth, abandonment), at every level.
#[tokio::test(start_paused = true)]
async fn nt_25_every_nested_start_has_exactly_one_terminal_event() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)))
        .with_spec(|s| s.timeout(Duration::from_millis(500)));
    let write = ProbeTool::new("write", false, Behaviour::Yield(1));
    let deep = plan(vec![child(
        "node",
        plan(vec![child("node", plan(vec![child("leaf", json!({}))]))]),
    )]);
    let dropper = with(
        plan(vec![child("slow", json!({})), child("leaf", json!({}))]),
        "drop_after_ms",
        json!(100),
    );
    let tree = with(
        plan(vec![
            child("leaf", json!({})),
            child("reports", json!({})),
            child("ghost", json!({})),
            child("raises", json!({})),
            child("slow", json!({})),
            child("node", deep),
            child("node", dropper),
            child(
                "snode",
                plan(vec![child("write", json!({})), child("leaf", json!({}))]),
            ),
        ]),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            snode.tool(),
            t(&new_leaf()),
            t(&reports()),
            t(&raises()),
            slow,
            write,
        ],
        |b| b.limits(nesting(3)),
    );
    let (_, events) = run_checked(&harness).await;
    let starts = nested_starts(&events);
    assert!(starts.len() >= 14, "{starts:?}");
    for id in &starts {
        let ends = events
            .iter()
            .filter(|e| e.is_tool_terminal() && e.call_id().is_some_and(|c| c.as_str() == id))
            .count();
        assert_eq!(ends, 1, "{id}");
    }
}

/// rule NT-25: the pairing holds when the run is cancelled while a refused
/// nested call's events wait for a slow consumer (an event buffer of one):
/// a refused call's `ToolStarted` is never left without its `ToolFailed`.
#[tokio::test(start_paused = true)]
async fn nt_25_refused_calls_keep_their_terminal_event_when_cancelled_under_backpressure() {
    let mut broken = Vec::new();
    for cancel_at_ms in 0u64..20 {
        let node = Node::plain();
        let children: Vec<Value> = (0..5).map(|_| child("ghost", json!({}))).collect();
        let tree = with(plan(children), "parallel", json!(true));
        let (harness, _) = build(one_turn(&[("node", tree)]), vec![node.tool()], |b| b);
        let (sink, mut receiver) = event_channel(1);
        let consumer = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(event) = receiver.recv().await {
                tokio::time::sleep(Duration::from_millis(1)).await;
                seen.push(event);
            }
            seen
        });
        let token = CancellationToken::new();
        let canceller = {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(cancel_at_ms)).await;
                token.cancel();
            })
        };
        let request = RunRequest::new("go").with_cancellation(token);
        let finished =
            tokio::time::timeout(Duration::from_secs(600), harness.run_with(request, &sink)).await;
        assert!(
            finished.is_ok(),
            "cancelled at {cancel_at_ms} ms: the run hung"
        );
        drop(sink);
        canceller.await.unwrap();
        let events = consumer.await.unwrap();
        for id in nested_starts(&events) {
            let ends = events
                .iter()
                .filter(|e| e.is_tool_terminal() && e.call_id().is_some_and(|c| c.as_str() == id))
                .count();
            if ends != 1 {
                broken.push(format!(
                    "cancelled at {cancel_at_ms} ms: {id} has {ends} terminal events"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

// ===========================================================================
// NT-26..NT-32: ids, events, transcript, the summary
// ===========================================================================

/// rule NT-26: a nested call's id is `<parent>/<n>`, n counting from 1 per
/// parent (a refused call takes its number too); nested-of-nested ids
/// extend the path.
#[tokio::test]
async fn nt_26_ids_extend_the_parents_path() {
    let node = Node::plain();
    let leaf = new_leaf();
    let model = one_turn(&[
        (
            "node",
            plan(vec![
                child("leaf", json!({})),
                child("ghost", json!({})),
                child(
                    "node",
                    plan(vec![child("leaf", json!({})), child("leaf", json!({}))]),
                ),
            ]),
        ),
        ("node", plan(vec![child("leaf", json!({}))])),
    ]);
    let (harness, _) = build(model, vec![node.tool(), t(&leaf)], |b| b);
    let (_, events) = run_checked(&harness).await;
    let mut starts = nested_starts(&events);
    starts.sort();
    assert_eq!(starts, ["p1/1", "p1/2", "p1/3", "p1/3/1", "p1/3/2", "p2/1"]);
    let mut ran = leaf.ids();
    ran.sort();
    assert_eq!(ran, ["p1/1", "p1/3/1", "p1/3/2", "p2/1"]);
}

/// rule NT-27: `ToolStarted`, `ToolCompleted` and `ToolFailed` carry
/// `parent_call_id` naming the immediate parent; it is omitted from the
/// serialized event when there is none.
#[tokio::test]
async fn nt_27_events_name_the_immediate_parent_and_omit_none() {
    let node = Node::plain();
    let tree = plan(vec![child(
        "node",
        plan(vec![child("leaf", json!({})), child("ghost", json!({}))]),
    )]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b,
    );
    let (_, events) = run_checked(&harness).await;
    let parent_of = |id: &str, terminal_kind: bool| {
        events
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolStarted {
                    call_id,
                    parent_call_id,
                    ..
                } if !terminal_kind && call_id.as_str() == id => Some(parent_call_id.clone()),
                AgentEvent::ToolCompleted {
                    call_id,
                    parent_call_id,
                    ..
                }
                | AgentEvent::ToolFailed {
                    call_id,
                    parent_call_id,
                    ..
                } if terminal_kind && call_id.as_str() == id => Some(parent_call_id.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no event for {id}"))
    };
    for terminal_kind in [false, true] {
        assert_eq!(parent_of("p1", terminal_kind), None);
        assert_eq!(parent_of("p1/1", terminal_kind), Some(CallId::new("p1")));
        assert_eq!(
            parent_of("p1/1/1", terminal_kind),
            Some(CallId::new("p1/1")),
            "the immediate parent, not p1"
        );
        assert_eq!(
            parent_of("p1/1/2", terminal_kind),
            Some(CallId::new("p1/1"))
        );
    }
    for event in &events {
        let Some(id) = event.call_id() else { continue };
        let text = serde_json::to_value(event).unwrap();
        match id.parent() {
            None => assert!(
                text.get("parent_call_id").is_none(),
                "omitted when none: {text}"
            ),
            Some(parent) => assert_eq!(text["parent_call_id"], json!(parent.as_str()), "{text}"),
        }
        let back: AgentEvent = serde_json::from_value(text).unwrap();
        assert_eq!(&back, event);
    }
    let old: AgentEvent =
        serde_json::from_value(json!({"type": "tool_started", "call_id": "p1", "name": "node"}))
            .unwrap();
    assert!(
        matches!(
            old,
            AgentEvent::ToolStarted {
                parent_call_id: None,
                ..
            }
        ),
        "serde default"
    );
}

/// rule NT-28: nested calls add no transcript rows.
#[tokio::test]
async fn nt_28_nested_calls_add_no_transcript_rows() {
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("node", plan(vec![child("leaf", json!({}))])),
        child("ghost", json!({})),
    ]);
    let (harness, model) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&new_leaf())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    assert_eq!(nested_starts(&events).len(), 4);
    let rows: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(rows, ["node"]);
    for message in run
        .messages
        .iter()
        .chain(model.requests().last().unwrap().messages.iter())
    {
        if let Message::Assistant { tool_calls, .. } = message {
            assert!(tool_calls.iter().all(|c| !c.id.is_nested()));
        }
        if let Message::Tool { call_id, .. } = message {
            assert!(!call_id.is_nested());
        }
    }
}

/// rule NT-29: the parent's result metadata (on `ToolCompleted` and in
/// `AgentRun::tool_metadata`) gains the `nested_calls` summary: the
/// specification's example, reproduced.
#[tokio::test(start_paused = true)]
async fn nt_29_the_summary_matches_the_specs_example() {
    let node = Node::plain();
    let leaf = scripted(
        ToolSpec::new(
            "leaf",
            "A leaf.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
        .read_only(),
        |call| async move {
            tokio::time::sleep(Duration::from_millis(3)).await;
            Ok(ToolResult::text(format!("leaf {}", call.args["n"])))
        },
    );
    let tree = plan(vec![
        child("leaf", json!({"n": 7})),
        child("ghost", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&leaf)],
        |b| {
            b.payload_capture(PayloadCapture {
                model_io: false,
                tool_io: true,
            })
        },
    );
    let (run, events) = run_checked(&harness).await;
    let expected = json!({
      "nested_calls": [
        {"id": "p1/1", "name": "leaf", "status": "ok", "duration_ms": 3,
         "args": "{\"n\":7}"},
        {"id": "p1/2", "name": "ghost", "status": "failed", "duration_ms": 0,
         "args": "{}", "error": "tool not found: ghost"}
      ]
    });
    assert_eq!(run.tool_metadata(&CallId::new("p1")), Some(&expected));
    assert_eq!(completed_metadata(&events, "p1"), Some(expected));
}

/// rule NT-29: each entry has id, name, status (ok, error, failed,
/// abandoned) and duration_ms; a nested parent's own result carries its
/// children's summary.
#[tokio::test(start_paused = true)]
async fn nt_29_summary_statuses_are_ok_error_failed_and_abandoned() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let tree = with(
        plan(vec![
            child("leaf", json!({})),
            child("reports", json!({})),
            child("ghost", json!({})),
            child("raises", json!({})),
            child("slow", json!({})),
            child("node", plan(vec![child("leaf", json!({}))])),
        ]),
        "drop_after_ms",
        json!(100),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            t(&new_leaf()),
            t(&reports()),
            t(&raises()),
            slow,
        ],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let statuses: BTreeMap<String, String> = summary(&run, "p1")
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        ("p1/1", "ok"),
        ("p1/2", "error"),
        ("p1/3", "failed"),
        ("p1/4", "failed"),
        ("p1/5", "abandoned"),
        ("p1/6", "ok"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(statuses, expected);
    for e in summary(&run, "p1") {
        let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(
            ["id", "name", "status", "duration_ms"]
                .iter()
                .all(|k| keys.contains(k)),
            "{e}"
        );
        assert!(e["duration_ms"].is_u64(), "{e}");
    }
    assert_eq!(entry(&run, "p1", "p1/5")["duration_ms"], json!(100));
    let inner =
        completed_metadata(&events, "p1/6").expect("the nested parent's result has metadata");
    assert_eq!(inner["nested_calls"][0]["id"], "p1/6/1");
    assert_eq!(inner["nested_calls"][0]["status"], "ok");
}

/// rule NT-30: `args` (cut at 1 KiB) and `error` (cut at 256 bytes) appear
/// only under `PayloadCapture::tool_io`, except an abandoned call's error,
/// which is always kept; an empty error is omitted.
#[tokio::test(start_paused = true)]
async fn nt_30_args_and_errors_appear_only_under_tool_io_and_are_cut() {
    for capture in [false, true] {
        let node = Node::plain();
        let long_error = scripted(safe("long_error"), |_| async {
            anyhow::bail!("{}", "e".repeat(400))
        });
        let empty_error = scripted(safe("empty_error"), |_| async { Ok(ToolResult::error("")) });
        let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
        let tree = with(
            plan(vec![
                child("leaf", json!({"blob": "x".repeat(2000)})),
                child("leaf", json!({"blob": "é".repeat(1000)})),
                child("long_error", json!({})),
                child("reports", json!({})),
                child("empty_error", json!({})),
                child("slow", json!({})),
            ]),
            "drop_after_ms",
            json!(100),
        );
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![
                node.tool(),
                t(&new_leaf()),
                t(&long_error),
                t(&reports()),
                t(&empty_error),
                slow,
            ],
            |b| {
                b.payload_capture(PayloadCapture {
                    model_io: false,
                    tool_io: capture,
                })
            },
        );
        let (run, _) = run_checked(&harness).await;
        let e = |id: &str| entry(&run, "p1", id);
        if capture {
            let ascii = e("p1/1")["args"].as_str().unwrap().to_owned();
            assert_eq!(ascii.len(), 1024);
            assert!(
                json!({"blob": "x".repeat(2000)})
                    .to_string()
                    .starts_with(&ascii)
            );
            let multibyte = e("p1/2")["args"].as_str().unwrap().to_owned();
            assert!(
                multibyte.len() <= 1024 && multibyte.len() >= 1023,
                "{}",
                multibyte.len()
            );
            assert!(
                json!({"blob": "é".repeat(1000)})
                    .to_string()
                    .starts_with(&multibyte)
            );
            assert_eq!(e("p1/3")["error"], json!("e".repeat(256)));
            assert_eq!(e("p1/4")["error"], "no such file");
            assert_eq!(e("p1/6")["args"], "{}");
        } else {
            for id in ["p1/1", "p1/2", "p1/3", "p1/4", "p1/5", "p1/6"] {
                assert!(e(id).get("args").is_none(), "{capture}: {}", e(id));
            }
            for id in ["p1/3", "p1/4"] {
                assert!(e(id).get("error").is_none(), "{}", e(id));
            }
        }
        assert_eq!(e("p1/5")["status"], "error");
        assert!(
            e("p1/5").get("error").is_none(),
            "an empty error is omitted: {}",
            e("p1/5")
        );
        assert_eq!(e("p1/6")["status"], "abandoned");
        let abandoned = e("p1/6")["error"]
            .as_str()
            .unwrap_or_else(|| panic!("abandoned keeps its error: {}", e("p1/6")))
            .to_owned();
        assert!(
            abandoned.starts_with("parent settled: ") && abandoned.len() <= 256,
            "{abandoned}"
        );
    }
}

/// rule NT-31: at most 32 entries; `nested_calls_truncated` counts the rest
/// and appears only when more than 32 calls ran.
#[tokio::test]
async fn nt_31_the_summary_keeps_32_entries_and_counts_the_rest() {
    for (calls, truncated) in [(32usize, None), (33, Some(1u64)), (40, Some(8))] {
        let node = Node::plain();
        let tree = plan((0..calls).map(|i| child("leaf", json!({"i": i}))).collect());
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&new_leaf())],
            |b| b,
        );
        let (run, _) = run_checked(&harness).await;
        let metadata = run.tool_metadata(&CallId::new("p1")).unwrap();
        assert_eq!(
            metadata["nested_calls"].as_array().unwrap().len(),
            32,
            "{calls} calls"
        );
        assert_eq!(
            metadata
                .get("nested_calls_truncated")
                .and_then(Value::as_u64),
            truncated,
            "{calls} calls"
        );
        assert_eq!(run.budget.nested_tool_calls as usize, calls);
    }
}

/// rule NT-32: the summary is attached only when the parent's metadata is
/// absent or an object; other metadata is kept unchanged.
#[tokio::test]
async fn nt_32_the_summary_is_attached_only_to_absent_or_object_metadata() {
    let node = Node::plain();
    let calls = |metadata: Option<Value>| {
        let tree = plan(vec![child("leaf", json!({}))]);
        match metadata {
            Some(metadata) => with(tree, "metadata", metadata),
            None => tree,
        }
    };
    let model = one_turn(&[
        ("node", calls(None)),
        ("node", calls(Some(json!({"source": "cache"})))),
        ("node", calls(Some(json!([1, 2])))),
        ("node", calls(Some(json!("a note")))),
        ("node", plan(vec![])),
    ]);
    let (harness, _) = build(model, vec![node.tool(), t(&new_leaf())], |b| b);
    let (run, events) = run_checked(&harness).await;
    let metadata = |id: &str| run.tool_metadata(&CallId::new(id)).cloned();
    let absent = metadata("p1").unwrap();
    assert_eq!(
        absent.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["nested_calls"]
    );
    let object = metadata("p2").unwrap();
    assert_eq!(object["source"], "cache");
    assert_eq!(object["nested_calls"][0]["id"], "p2/1");
    assert_eq!(metadata("p3"), Some(json!([1, 2])));
    assert_eq!(metadata("p4"), Some(json!("a note")));
    assert_eq!(metadata("p5"), None, "no nested calls, no summary");
    assert_eq!(completed_metadata(&events, "p3"), Some(json!([1, 2])));
}

// ===========================================================================
// NT-33..NT-38: what does not apply
// ===========================================================================

/// A middleware that, in `before_tool` of the first model call, grants
/// approvals by id: one for the nested id `p1/1` and one for the model id
/// `p2`, both for the arguments `{"to": "x"}`.
struct Granter;

#[async_trait]
impl Middleware for Granter {
    fn name(&self) -> &str {
        "granter"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        if call.id.as_str() == "p1" {
            let hash = args_hash(&json!({"to": "x"}));
            ctx.approvals.grant(CallId::new("p1/1"), hash.clone());
            ctx.approvals.grant(CallId::new("p2"), hash);
        }
        Ok(ToolVerdict::Allow)
    }
}

/// rule NT-33: an approval granted by id never applies to a nested call
/// with that id (human approval and tool policy alike), while the same
/// grant lets a model call run; approval callbacks receive the `ToolCall`,
/// whose id format marks it nested.
#[tokio::test]
async fn nt_33_approvals_granted_by_id_do_not_apply_to_nested_calls() {
    for policy in ["human_approval", "tool_policy"] {
        let node = Node::plain();
        let mail = named_leaf("mail");
        let (observe, outcomes) = outcome_recorder();
        let middleware: Arc<dyn Middleware> = if policy == "human_approval" {
            Arc::new(
                HumanApprovalMiddleware::new()
                    .require("mail")
                    .with_outcome_fn(observe),
            )
        } else {
            Arc::new(ToolPolicyMiddleware::new().require_approval("mail"))
        };
        let model = vec![
            ScriptedModel::tool_call("node", plan(vec![child("mail", json!({"to": "x"}))])),
            ScriptedModel::tool_call("mail", json!({"to": "x"})),
            ChatResponse::text("done"),
        ];
        let (harness, _) = build(model, vec![node.tool(), t(&mail)], |b| {
            b.middleware(Arc::new(Granter)).middleware(middleware)
        });
        let (run, _) = run_checked(&harness).await;
        assert_eq!(run.status, RunStatus::Completed, "{policy}");
        assert_eq!(
            node.err("p1", 0).to_string(),
            format!(
                "denied by {policy}: nested call 'mail' requires approval; nested calls cannot be deferred"
            )
        );
        assert_eq!(
            mail.ids(),
            ["p2"],
            "{policy}: the grant applied to the model call only"
        );
        if policy == "human_approval" {
            assert_eq!(
                *outcomes.lock().unwrap(),
                [
                    ("p1/1".to_owned(), ApprovalOutcome::Refused),
                    ("p2".to_owned(), ApprovalOutcome::Granted)
                ]
            );
        }
    }

    // The callback sees the ToolCall; a nested one is recognisable by its id.
    let node = Node::plain();
    let mail = named_leaf("mail");
    let asked: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let sink = Arc::clone(&asked);
    let approve: ApprovalFn = Arc::new(move |call: &ToolCall| {
        sink.lock()
            .unwrap()
            .push((call.id.to_string(), call.id.is_nested()));
        call.id.is_nested()
    });
    let approval = HumanApprovalMiddleware::new()
        .require("mail")
        .with_approval_fn(approve);
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("mail", json!({"to": "x"}))]))]),
        vec![node.tool(), t(&mail)],
        |b| b.middleware(Arc::new(approval)),
    );
    run_checked(&harness).await;
    assert_eq!(*asked.lock().unwrap(), [("p1/1".to_owned(), true)]);
    assert_eq!(mail.ids(), ["p1/1"]);
}

/// rule NT-34: the repeat-progress guard never counts nested calls (nor as
/// model repeats of the parent).
#[tokio::test]
async fn nt_34_the_repeat_guard_does_not_see_nested_calls() {
    let node = Node::plain();
    let search = named_leaf("search");
    let same = || child("search", json!({"q": "x"}));
    let model = vec![
        ScriptedModel::tool_call("node", plan(vec![same(), same(), same()])),
        ScriptedModel::tool_call("search", json!({"q": "x"})),
        ScriptedModel::tool_call("search", json!({"q": "x"})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&search)], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
    });
    let (run, _) = run_checked(&harness).await;
    for index in 0..3 {
        node.ok("p1", index);
    }
    assert!(
        !answer(&run, "p2").1,
        "the first model-issued search is not a repeat of the nested ones"
    );
    let (refusal, is_error) = answer(&run, "p3");
    assert!(
        is_error && refusal.starts_with("denied by repeat_progress"),
        "the guard still works: {refusal}"
    );
    assert_eq!(search.ids(), ["p1/1", "p1/2", "p1/3", "p2"]);
}

/// rule NT-34: redaction middleware does not run on nested calls: with
/// `tool_io` capture their arguments and results reach their events
/// unscrubbed, while the model-issued call's are scrubbed.
#[tokio::test]
async fn nt_34_redaction_does_not_scrub_nested_calls() {
    const SECRET: &str = "hunter2-corp";
    let node = Node::plain();
    let echo = scripted(safe("echo"), |call| async move {
        Ok(ToolResult::text(
            call.args["tag"].as_str().unwrap_or("").to_owned(),
        ))
    });
    let tree = with(
        plan(vec![child("echo", json!({"tag": SECRET}))]),
        "note",
        json!(SECRET),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&echo)],
        |b| {
            b.payload_capture(PayloadCapture::all())
                .middleware(Arc::new(RedactionMiddleware::with_redactor(
                    Redactor::new().with_secret(SECRET),
                )))
        },
    );
    let (run, events) = run_checked(&harness).await;
    let started = |id: &str| {
        events
            .iter()
            .find_map(|e| match e {
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == id => arguments.clone(),
                _ => None,
            })
            .unwrap()
    };
    assert!(
        !started("p1").to_string().contains(SECRET),
        "the model-issued call is redacted"
    );
    assert_eq!(
        started("p1/1"),
        json!({"tag": SECRET}),
        "the nested call is not"
    );
    let AgentEvent::ToolCompleted { result, .. } = terminal(&events, "p1/1") else {
        panic!()
    };
    assert_eq!(result.as_deref(), Some(SECRET));
    assert_eq!(
        node.ok("p1", 0).content,
        SECRET,
        "the nested result reaches the parent unscrubbed"
    );
    assert!(
        !answer(&run, "p1").0.contains(SECRET),
        "the parent's own result is scrubbed"
    );
}

/// rule NT-35: with `tool_io` capture, a nested call's arguments reach its
/// `ToolStarted` and `ToolCompleted` events unredacted (even a key the
/// redactor treats as sensitive); without capture, no arguments ride on
/// events.
#[tokio::test]
async fn nt_35_nested_arguments_reach_events_unredacted_under_tool_io() {
    for capture in [PayloadCapture::default(), PayloadCapture::all()] {
        let node = Node::plain();
        let args = json!({"password": "s3cret", "user": "ann"});
        let tree = with(
            plan(vec![child("leaf", args.clone())]),
            "password",
            json!("s3cret"),
        );
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&new_leaf())],
            |b| {
                b.payload_capture(capture)
                    .middleware(Arc::new(RedactionMiddleware::with_redactor(
                        Redactor::new().with_key("password"),
                    )))
            },
        );
        let (_, events) = run_checked(&harness).await;
        for event in &events {
            match event {
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == "p1/1" => {
                    assert_eq!(arguments.as_ref(), capture.tool_io.then_some(&args));
                }
                AgentEvent::ToolStarted {
                    call_id, arguments, ..
                } if call_id.as_str() == "p1" && capture.tool_io => {
                    assert_ne!(
                        arguments.as_ref().unwrap()["password"],
                        "s3cret",
                        "the model-issued call is redacted"
                    );
                }
                AgentEvent::ToolCompleted {
                    call_id, result, ..
                } if call_id.as_str() == "p1/1" => {
                    assert_eq!(result.is_some(), capture.tool_io);
                }
                _ => {}
            }
        }
    }
}

/// rule NT-36: `before_tool` and `after_tool` never run for nested calls.
#[tokio::test]
async fn nt_36_before_and_after_tool_never_run_for_nested_calls() {
    let log = Arc::new(Log::default());
    let node = Node::plain();
    let tree = plan(vec![
        child("leaf", json!({})),
        child("node", plan(vec![child("leaf", json!({}))])),
    ]);
    let model = vec![
        ScriptedModel::tool_call("node", tree),
        ScriptedModel::tool_call("leaf", json!({})),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&new_leaf())], |b| {
        b.middleware(Arc::new(Recorder::new("hooks", &log)))
    });
    run_checked(&harness).await;
    let hooks: Vec<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.contains("_tool "))
        .collect();
    assert_eq!(
        hooks,
        [
            "hooks before_tool p1",
            "hooks after_tool p1",
            "hooks before_tool p2",
            "hooks after_tool p2"
        ]
    );
}

/// A host hook that vetoes a tool in `before_tool` only.
struct BeforeToolVeto;

#[async_trait]
impl Middleware for BeforeToolVeto {
    fn name(&self) -> &str {
        "host_hooks"
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(if call.name == "write" {
            ToolVerdict::Deny {
                reason: "writes are vetoed".into(),
            }
        } else {
            ToolVerdict::Allow
        })
    }
}

/// rule NT-36: an enforcement that lives in `before_tool` only does not
/// bind nested calls (the specification's open follow-up for hosts: such a
/// hook must implement `check_nested_tool`, or `call_tool` goes around it).
#[tokio::test]
async fn nt_36_a_before_tool_only_veto_does_not_bind_nested_calls() {
    let node = Node::plain();
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = vec![
        ScriptedModel::tool_call("write", json!({})),
        ScriptedModel::tool_call("node", plan(vec![child("write", json!({}))])),
        ChatResponse::text("done"),
    ];
    let (harness, _) = build(model, vec![node.tool(), t(&write)], |b| {
        b.middleware(Arc::new(BeforeToolVeto))
    });
    let (run, _) = run_checked(&harness).await;
    assert_eq!(
        answer(&run, "p1"),
        ("denied by host_hooks: writes are vetoed".to_owned(), true)
    );
    assert_eq!(node.ok("p2", 0).content, "written");
    assert_eq!(write.ids(), ["p2/1"]);
}

/// rule NT-37: a nested tool's progress reports are not forwarded (a
/// model-issued call's are).
#[tokio::test]
async fn nt_37_nested_progress_is_not_forwarded() {
    let node = Node::plain();
    let long = ProbeTool::new("long", true, Behaviour::Progress);
    let model = one_turn(&[
        ("node", plan(vec![child("long", json!({}))])),
        ("long", json!({})),
    ]);
    let (harness, _) = build(model, vec![node.tool(), long.clone()], |b| b);
    let (_, events) = run_checked(&harness).await;
    assert_eq!(long.calls.load(Ordering::SeqCst), 2);
    let progress: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(progress, ["p2", "p2"]);
}

/// rule NT-38: a nested result's tool control (terminate, return-direct)
/// and a wrap's control request on it are ignored: the run goes on to the
/// model's answer; the final output is screened once, as a whole.
#[tokio::test]
async fn nt_38_nested_tool_control_is_ignored_and_the_final_output_is_screened_once() {
    for control in [ToolControl::ReturnDirect, ToolControl::Terminate] {
        for by_wrap in [false, true] {
            let log = Arc::new(Log::default());
            let node = Node::plain();
            let steer = if by_wrap {
                named_leaf("steer")
            } else {
                scripted(safe("steer"), move |_| async move {
                    Ok(ToolResult::text("steered").with_control(control))
                })
            };
            let (harness, model) = build(
                one_turn(&[("node", plan(vec![child("steer", json!({}))]))]),
                vec![node.tool(), t(&steer)],
                |b| {
                    let b = b.security_gate(Gate::new("none", Answer::Allow, &log));
                    if by_wrap {
                        b.tool_middleware(Wrap::new("steer", WrapMode::Control(control), &log))
                    } else {
                        b
                    }
                },
            );
            let (run, _) = run_checked(&harness).await;
            assert_eq!(
                run.status,
                RunStatus::Completed,
                "{control:?} by_wrap={by_wrap}"
            );
            assert_eq!(run.final_text, "done");
            assert_eq!(model.calls(), 2, "the model was asked again");
            assert_eq!(
                node.ok("p1", 0).control,
                None,
                "the control does not reach the parent"
            );
            let screened: Vec<String> = log
                .entries()
                .into_iter()
                .filter(|e| e.starts_with("screen"))
                .collect();
            assert_eq!(screened, ["screen done"]);
        }
    }
}

// ===========================================================================
// NT-39..NT-42: the runner and the concurrency gate
// ===========================================================================

/// rule NT-39: the runner is installed for exactly the calling call id, in
/// the task the loop polls: a context for another id, or a context built in
/// a spawned task, has no runner; a context for the calling id built in the
/// tool's own future has one; nested calls nest again.
#[tokio::test]
async fn nt_39_the_runner_is_scoped_to_the_calling_call_and_its_task() {
    let probe = scripted(spec("probe"), |call| async move {
        let run_id = call.run.run_id().clone();
        let cancel = call.run.cancellation().clone();
        let other = ToolRunContext::new(run_id.clone(), CallId::new("p9"), cancel.clone());
        let foreign = ToolExecutionContext::from_run_context(&other)
            .call_tool("leaf", json!({}))
            .await;
        let own = ToolRunContext::new(run_id.clone(), call.run.call_id().clone(), cancel.clone());
        let local = ToolExecutionContext::from_run_context(&own)
            .call_tool("leaf", json!({}))
            .await;
        let own_id = call.run.call_id().clone();
        let spawned = tokio::spawn(async move {
            let own = ToolRunContext::new(run_id, own_id, cancel);
            ToolExecutionContext::from_run_context(&own)
                .call_tool("leaf", json!({}))
                .await
        })
        .await
        .unwrap();
        let nested = call
            .harness
            .call_tool("node", plan(vec![child("leaf", json!({}))]))
            .await;
        Ok(ToolResult::text(
            json!([
                label(&Some(foreign)),
                label(&Some(local)),
                label(&Some(spawned)),
                label(&Some(nested))
            ])
            .to_string(),
        ))
    });
    let node = Node::plain();
    let leaf = new_leaf();
    let (harness, _) = build(
        one_turn(&[("probe", json!({}))]),
        vec![t(&probe), node.tool(), t(&leaf)],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    let labels: Vec<Value> = serde_json::from_str(&answer(&run, "p1").0).unwrap();
    let outside =
        "nested tool calls are only available while the agent loop executes the calling tool";
    assert!(
        labels[0]["err"].as_str().unwrap().ends_with(outside),
        "another call id: {}",
        labels[0]
    );
    assert_eq!(
        labels[1]["ok"], "leaf {}",
        "the task-local runner of the calling id"
    );
    assert!(
        labels[2]["err"].as_str().unwrap().ends_with(outside),
        "a spawned task: {}",
        labels[2]
    );
    assert!(labels[3]["ok"].is_string(), "nests again: {}", labels[3]);
    assert_eq!(leaf.ids(), ["p1/1", "p1/2/1"]);
}

/// rule NT-40: concurrency-safe nested calls of one parent run together
/// under the shared side of the gate.
#[tokio::test(start_paused = true)]
async fn nt_40_safe_nested_calls_of_one_parent_overlap() {
    let node = Node::plain();
    let meet = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(3))),
    )
    .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let fan = with(
        plan(
            (0..3)
                .map(|i| child("meet", json!({"tag": i.to_string()})))
                .collect(),
        ),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", fan)]),
        vec![node.tool(), meet.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    for index in 0..3 {
        assert!(node.ok("p1", index).content.starts_with("met"), "{index}");
    }
    assert_eq!(meet.max_active.load(Ordering::SeqCst), 3);
}

/// rule NT-40: a `ToolMiddleware` that is not `concurrent_safe` makes every
/// nested call exclusive.
#[tokio::test(start_paused = true)]
async fn nt_40_an_exclusive_wrap_makes_nested_calls_exclusive() {
    for exclusive in [false, true] {
        let log = Arc::new(Log::default());
        let node = Node::plain();
        let read = ProbeTool::new("read", true, Behaviour::Yield(5));
        let fan = with(
            plan(
                (0..3)
                    .map(|i| child("read", json!({"tag": i.to_string()})))
                    .collect(),
            ),
            "parallel",
            json!(true),
        );
        let mut wrap = Wrap::new("none", WrapMode::Observe, &log);
        Arc::get_mut(&mut wrap).unwrap().exclusive = exclusive;
        let (harness, _) = build(
            one_turn(&[("node", fan)]),
            vec![node.tool(), read.clone()],
            |b| b.tool_middleware(wrap),
        );
        run_checked(&harness).await;
        let expected = if exclusive { 1 } else { 3 };
        assert_eq!(
            read.max_active.load(Ordering::SeqCst),
            expected,
            "exclusive wrap: {exclusive}"
        );
    }
}

/// rule NT-40: unsafe nested calls are exclusive across the fan-outs of
/// concurrent parents, while their safe calls overlap.
#[tokio::test(start_paused = true)]
async fn nt_40_unsafe_nested_calls_of_concurrent_parents_do_not_overlap() {
    // Two concurrent parents (safe, model-issued) each fan out two writes.
    let snode = Node::new(safe("snode"));
    let write = ProbeTool::new("write", false, Behaviour::Yield(3));
    let fan = |p: &str| {
        let children = vec![
            child("write", json!({"tag": format!("{p}a")})),
            child("write", json!({"tag": format!("{p}b")})),
        ];
        with(plan(children), "parallel", json!(true))
    };
    let (harness, _) = build(
        one_turn(&[("snode", fan("1")), ("snode", fan("2"))]),
        vec![snode.tool(), write.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    for parent in ["p1", "p2"] {
        snode.ok(parent, 0);
        snode.ok(parent, 1);
    }
    assert_eq!(write.calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        write.max_active.load(Ordering::SeqCst),
        1,
        "{:?}",
        write.order.entries()
    );

    // Their safe nested calls share the gate: they meet at a barrier of 2.
    let snode = Node::new(safe("snode"));
    let meet = ProbeTool::new(
        "meet",
        true,
        Behaviour::Barrier(Arc::new(tokio::sync::Barrier::new(2))),
    )
    .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let (harness, _) = build(
        one_turn(&[
            ("snode", plan(vec![child("meet", json!({"tag": "1"}))])),
            ("snode", plan(vec![child("meet", json!({"tag": "2"}))])),
        ]),
        vec![snode.tool(), meet.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    assert_eq!(snode.ok("p1", 0).content, "met 1");
    assert_eq!(snode.ok("p2", 0).content, "met 2");
}

/// rule NT-40: unsafe nested calls are exclusive among themselves even when
/// their common parent is itself an unsafe nested call (its fan-out shares
/// the gate too).
#[tokio::test(start_paused = true)]
async fn nt_40_unsafe_children_of_an_exclusive_nested_parent_do_not_overlap() {
    let node = Node::plain();
    let write = ProbeTool::new("write", false, Behaviour::Yield(3));
    let inner = with(
        plan(vec![
            child("write", json!({"tag": "a"})),
            child("write", json!({"tag": "b"})),
        ]),
        "parallel",
        json!(true),
    );
    let (harness, _) = build(
        one_turn(&[("node", plan(vec![child("node", inner)]))]),
        vec![node.tool(), write.clone()],
        |b| b,
    );
    run_checked(&harness).await;
    node.ok("p1/1", 0);
    node.ok("p1/1", 1);
    assert_eq!(
        write.max_active.load(Ordering::SeqCst),
        1,
        "{:?}",
        write.order.entries()
    );
}

/// rule NT-40: an exclusive nested holder's own nested call completes while
/// another writer waits for the gate (it runs under its parent's hold: no
/// deadlock); so does a shared holder's safe child.
#[tokio::test(start_paused = true)]
async fn nt_40_a_holders_child_completes_while_a_writer_waits() {
    for holder in ["node", "snode"] {
        let node = Node::plain();
        let snode = Node::new(safe("snode"));
        let write = ProbeTool::new("write", false, Behaviour::Yield(1));
        let leaf = new_leaf();
        // p1 -> holder p1/1 (exclusive or shared hold) -> after 10 ms, leaf p1/1/1
        // p2 -> after 5 ms, write p2/1 (waits for the gate)
        let held = with(plan(vec![child("leaf", json!({}))]), "sleep_ms", json!(10));
        let model = one_turn(&[
            ("snode", plan(vec![child(holder, held)])),
            (
                "snode",
                with(
                    plan(vec![child("write", json!({"tag": "w"}))]),
                    "sleep_ms",
                    json!(5),
                ),
            ),
        ]);
        let (harness, _) = build(
            model,
            vec![node.tool(), snode.tool(), write.clone(), t(&leaf)],
            |b| b.limits(nesting(3).with_tool_timeout(Some(Duration::from_secs(30)))),
        );
        let (run, _) = tokio::time::timeout(Duration::from_secs(60), run_checked(&harness))
            .await
            .expect("no deadlock");
        let outer = if holder == "node" { &node } else { &snode };
        assert_eq!(
            outer.ok("p1/1", 0).content,
            "leaf {}",
            "{holder}: the holder's child ran"
        );
        snode.ok("p1", 0);
        assert_eq!(
            snode.ok("p2", 0).content,
            "ok w",
            "{holder}: the waiting writer ran after"
        );
        assert_eq!(leaf.ids(), ["p1/1/1"]);
        assert!(run.status == RunStatus::Completed);
    }
}

/// rule NT-41: a concurrency-safe nested call that calls an unsafe tool is
/// refused (a shared hold cannot be upgraded); a safe model-issued parent
/// is not a nested call and may.
#[tokio::test]
async fn nt_41_a_safe_nested_call_cannot_call_an_unsafe_tool() {
    let node = Node::plain();
    let snode = Node::new(safe("snode"));
    let write = scripted(spec("write"), |_| async { Ok(ToolResult::text("written")) });
    let model = one_turn(&[
        (
            "node",
            plan(vec![child(
                "snode",
                plan(vec![child("write", json!({})), child("leaf", json!({}))]),
            )]),
        ),
        ("snode", plan(vec![child("write", json!({}))])),
    ]);
    let (harness, _) = build(
        model,
        vec![node.tool(), snode.tool(), t(&write), t(&new_leaf())],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let error = snode.err("p1/1", 0);
    let TinyAgentsError::ToolFailed { tool, message } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(tool, "write");
    assert!(
        message.contains("'write'") && message.contains("shared hold cannot be upgraded"),
        "{message}"
    );
    assert_eq!(failed_error(&events, "p1/1/1"), error.to_string());
    snode.ok("p1/1", 1);
    assert_eq!(snode.ok("p2", 0).content, "written");
    assert_eq!(write.ids(), ["p2/1"]);
    assert_eq!(
        run.budget.nested_tool_calls, 3,
        "snode, leaf and p2's write: the refused write released its slot"
    );
}

/// rule NT-42: the gate covers nested calls only: a nested unsafe call may
/// overlap a model-issued sibling of its parent's batch.
#[tokio::test(start_paused = true)]
async fn nt_42_the_gate_does_not_serialise_against_model_issued_siblings() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let snode = Node::new(safe("snode"));
    let nested_write = ProbeTool::new("nested_write", false, Behaviour::Barrier(barrier.clone()))
        .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let sibling = ProbeTool::new("sibling", true, Behaviour::Barrier(barrier))
        .with_spec(|s| s.timeout(Duration::from_secs(5)));
    let model = one_turn(&[
        (
            "snode",
            plan(vec![child("nested_write", json!({"tag": "n"}))]),
        ),
        ("sibling", json!({"tag": "s"})),
    ]);
    let (harness, _) = build(
        model,
        vec![snode.tool(), nested_write.clone(), sibling],
        |b| b,
    );
    let (run, _) = run_checked(&harness).await;
    assert_eq!(
        snode.ok("p1", 0).content,
        "met n",
        "the nested write overlapped the model-issued sibling"
    );
    assert_eq!(answer(&run, "p2"), ("met s".to_owned(), false));
}

// ===========================================================================
// Proptest: random trees (NT-15, NT-16, NT-25, NT-26, NT-29 together)
// ===========================================================================

mod random_trees {
    use super::*;
    use proptest::prelude::*;

    /// One call of a random tree.
    #[derive(Debug, Clone)]
    enum Tree {
        /// A tool that does not nest: leaf, ghost (unknown), blocked
        /// (refused by a middleware), reports, raises, or sleepy (sleeps
        /// `ms` under a 20 ms timeout).
        Leaf(&'static str, u64),
        /// A node (or a node with a 30 ms timeout) running its children.
        Node {
            timed: bool,
            parallel: bool,
            drop_after_ms: Option<u64>,
            sleep_ms: u64,
            cancel: bool,
            children: Vec<Tree>,
        },
    }

    impl Tree {
        fn call(&self) -> (&'static str, Value) {
            match self {
                Tree::Leaf(name, ms) => (name, json!({"ms": ms})),
                Tree::Node {
                    timed,
                    parallel,
                    drop_after_ms,
                    sleep_ms,
                    cancel,
                    children,
                } => {
                    let children: Vec<Value> = children
                        .iter()
                        .map(|c| {
                            let (tool, args) = c.call();
                            child(tool, args)
                        })
                        .collect();
                    let mut args = json!({"children": children, "parallel": parallel, "sleep_ms": sleep_ms, "cancel": cancel});
                    if let Some(ms) = drop_after_ms {
                        args["drop_after_ms"] = json!(ms);
                    }
                    (if *timed { "tnode" } else { "node" }, args)
                }
            }
        }
    }

    fn tree() -> impl Strategy<Value = Tree> {
        let leaf = prop_oneof![
            3 => Just(Tree::Leaf("leaf", 0)),
            1 => Just(Tree::Leaf("ghost", 0)),
            1 => Just(Tree::Leaf("blocked", 0)),
            1 => Just(Tree::Leaf("reports", 0)),
            1 => Just(Tree::Leaf("raises", 0)),
            2 => (0u64..40).prop_map(|ms| Tree::Leaf("sleepy", ms)),
        ];
        leaf.prop_recursive(4, 40, 4, |inner| {
            (
                any::<bool>(),
                any::<bool>(),
                prop::option::weighted(0.3, 1u64..40),
                0u64..20,
                prop::bool::weighted(0.05),
                prop::collection::vec(inner, 0..4),
            )
                .prop_map(
                    |(timed, parallel, drop_after_ms, sleep_ms, cancel, children)| Tree::Node {
                        timed,
                        parallel,
                        drop_after_ms,
                        sleep_ms,
                        cancel,
                        children,
                    },
                )
        })
    }

    #[derive(Debug, Clone)]
    struct Case {
        trees: Vec<Tree>,
        max_tool_calls: u32,
        max_nested_depth: u32,
        cancel_at_ms: Option<u64>,
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            prop::collection::vec(tree(), 1..4),
            2u32..30,
            1u32..4,
            prop::option::weighted(0.15, 0u64..60),
        )
            .prop_map(
                |(trees, max_tool_calls, max_nested_depth, cancel_at_ms)| Case {
                    trees,
                    max_tool_calls,
                    max_nested_depth,
                    cancel_at_ms,
                },
            )
    }

    struct RunOutcome {
        budget: tinyagents::BudgetCounts,
        events: Vec<AgentEvent>,
        /// How many calls each node call made, by the node call's id.
        node_calls: HashMap<String, usize>,
    }

    async fn run_case(case: &Case) -> RunOutcome {
        let node = Node::new(safe("node"));
        let tnode = Node::new(safe("tnode").timeout(Duration::from_millis(30)));
        let sleepy = scripted(
            safe("sleepy").timeout(Duration::from_millis(20)),
            |call| async move {
                tokio::time::sleep(Duration::from_millis(call.args["ms"].as_u64().unwrap_or(0)))
                    .await;
                Ok(ToolResult::text("slept"))
            },
        );
        let log = Arc::new(Log::default());
        let calls: Vec<(&str, Value)> = case.trees.iter().map(Tree::call).collect();
        let limits = nesting(case.max_nested_depth)
            .with_max_tool_calls(case.max_tool_calls)
            .with_behavior(LimitBehavior::Stop);
        let (harness, _) = build(
            one_turn(&calls),
            vec![
                node.tool(),
                tnode.tool(),
                t(&sleepy),
                t(&new_leaf()),
                t(&named_leaf("blocked")),
                t(&reports()),
                t(&raises()),
            ],
            |b| {
                b.limits(limits.clone())
                    .middleware(Arc::new(Recorder::new("refuser", &log).refusing("blocked")))
            },
        );
        let tracker = Arc::new(LimitTracker::new(&limits));
        let token = CancellationToken::new();
        let mut request = RunRequest::new("go").with_cancellation(token.clone());
        request.tracker = Some(Arc::clone(&tracker));
        let canceller = async {
            if let Some(ms) = case.cancel_at_ms {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                token.cancel();
            }
        };
        // A buffer large enough that emission never waits: the pairing
        // under back-pressure has its own test.
        let (sink, mut receiver) = event_channel(1 << 16);
        let ((run, events), ()) = tokio::join!(
            async {
                let run = harness.run_with(request, &sink).await;
                drop(sink);
                let mut events = Vec::new();
                while let Some(event) = receiver.recv().await {
                    events.push(event);
                }
                (run, events)
            },
            canceller
        );
        if let Err(error) = &run {
            panic!("the run failed: {error:?}");
        }
        let mut node_calls = HashMap::new();
        for n in [&node, &tnode] {
            for seen in n.seen.lock().unwrap().iter() {
                *node_calls.entry(seen.parent.clone()).or_insert(0) += 1;
            }
        }
        RunOutcome {
            budget: tracker.counts(),
            events,
            node_calls,
        }
    }

    fn check(case: &Case, outcome: &RunOutcome) -> Result<(), TestCaseError> {
        let RunOutcome {
            budget,
            events,
            node_calls,
        } = outcome;
        // The budget is never exceeded.
        prop_assert!(
            budget.tool_calls + budget.nested_tool_calls <= case.max_tool_calls,
            "{budget:?}"
        );
        // One terminal per start.
        assert_one_terminal_per_start(events);
        // Ids and parent ids are consistent; children count from 1 per parent.
        assert_parent_ids_consistent(events);
        let mut started: Vec<CallId> = Vec::new();
        let mut children: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for event in events {
            if let AgentEvent::ToolStarted { call_id, .. } = event {
                if let Some(parent) = call_id.parent() {
                    prop_assert!(
                        started.contains(&parent),
                        "{call_id} started before its parent"
                    );
                    let n: u32 = call_id
                        .as_str()
                        .rsplit('/')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    children.entry(parent.to_string()).or_default().push(n);
                }
                started.push(call_id.clone());
            }
        }
        for (parent, ns) in &children {
            let mut sorted = ns.clone();
            sorted.sort_unstable();
            prop_assert_eq!(
                sorted,
                (1..=ns.len() as u32).collect::<Vec<_>>(),
                "children of {}",
                parent
            );
        }
        prop_assert!(
            budget.nested_tool_calls as usize <= started.iter().filter(|id| id.is_nested()).count()
        );
        // The summaries match what ran.
        for event in events {
            let AgentEvent::ToolCompleted {
                call_id, metadata, ..
            } = event
            else {
                continue;
            };
            let kids = children.get(call_id.as_str()).map_or(0, Vec::len);
            let made = node_calls.get(call_id.as_str()).copied().unwrap_or(0);
            prop_assert_eq!(
                made,
                kids,
                "{} made {} calls; {} started",
                call_id,
                made,
                kids
            );
            if kids == 0 {
                prop_assert!(
                    metadata
                        .as_ref()
                        .is_none_or(|m| m.get("nested_calls").is_none()),
                    "{call_id}: {metadata:?}"
                );
                continue;
            }
            let Some(metadata) = metadata else {
                return Err(TestCaseError::fail(format!(
                    "{call_id} has nested calls and no summary"
                )));
            };
            let entries = metadata["nested_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let truncated = metadata
                .get("nested_calls_truncated")
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize;
            prop_assert_eq!(entries.len() + truncated, kids, "{}: {}", call_id, metadata);
            prop_assert!(entries.len() <= 32);
            for e in &entries {
                let id = e["id"].as_str().unwrap();
                let parent = CallId::new(id).parent();
                prop_assert_eq!(parent.as_ref(), Some(call_id));
                let consistent = match (e["status"].as_str().unwrap(), terminal(events, id)) {
                    ("ok", AgentEvent::ToolCompleted { is_error, .. }) => !is_error,
                    ("error", AgentEvent::ToolCompleted { is_error, .. }) => *is_error,
                    ("failed", AgentEvent::ToolFailed { error, .. }) => {
                        !error.starts_with("parent settled: ")
                    }
                    ("abandoned", AgentEvent::ToolFailed { error, .. }) => {
                        error.starts_with("parent settled: ")
                    }
                    _ => false,
                };
                prop_assert!(consistent, "{} vs {:?}", e, terminal(events, id));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

        /// rule NT-25 (with NT-15, NT-16, NT-26, NT-29): over random trees
        /// of nested calls with refusals, timeouts, cancellations and
        /// dropped futures, the budget holds, every start has one end, ids
        /// are consistent and the summaries match what ran.
        #[test]
        fn nt_25_random_trees_keep_every_invariant(case in case()) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            let outcome = runtime.block_on(run_case(&case));
            check(&case, &outcome)?;
        }
    }
}
