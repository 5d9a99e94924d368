//! Shared helpers of the scenario tests: tools with observable behaviour,
//! and event collection. Everything goes through the `tinyagents` facade.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // test support

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::core::CallId;
use tinyagents::prelude::*;

/// The guides' examples, compiled and run as doc tests against the facade
/// alone (`cargo test --doc -p tinyagents-tests`).
pub mod guides {
    #[doc = include_str!("../README.md")]
    pub mod readme {}
    #[doc = include_str!("../docs/middleware.md")]
    pub mod middleware {}
    #[doc = include_str!("../docs/writing-tools.md")]
    pub mod writing_tools {}
    #[doc = include_str!("../docs/recovery.md")]
    pub mod recovery {}
    #[doc = include_str!("../docs/agent-as-tool.md")]
    pub mod agent_as_tool {}
    #[doc = include_str!("../docs/nested-tool-calls.md")]
    pub mod nested_tool_calls {}
    #[doc = include_str!("../docs/models.md")]
    pub mod models {}
    #[doc = include_str!("../docs/approval.md")]
    pub mod approval {}
    #[doc = include_str!("../docs/mcp.md")]
    pub mod mcp {}
    #[doc = include_str!("../docs/budgets.md")]
    pub mod budgets {}
}

mod hooked_ledger;
pub use hooked_ledger::{HookedLedger, LedgerWrite, Verdict};

/// A sink whose events a task of their own collects: drop the sink when the
/// run is done, then await the handle for every event it sent.
pub fn collector() -> (EventSink, tokio::task::JoinHandle<Vec<AgentEvent>>) {
    let (sink, mut receiver) = event_channel(16);
    let collected = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        events
    });
    (sink, collected)
}

/// Runs `harness` on `request`, collecting every event it emits.
pub async fn run_collecting(
    harness: &AgentHarness,
    request: RunRequest,
) -> (Result<AgentRun, TinyAgentsError>, Vec<AgentEvent>) {
    let (sink, collected) = collector();
    let result = harness.run_with(request, &sink).await;
    drop(sink);
    (result, collected.await.unwrap())
}

/// Joins futures, polling them together on the current task (no `futures`
/// crate needed).
pub async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    use std::pin::Pin;
    use std::task::Poll;
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

/// Asserts that every `ToolStarted` has exactly one terminal event, and no
/// terminal event lacks its start.
pub fn assert_one_terminal_per_start(events: &[AgentEvent]) {
    let mut open: std::collections::HashMap<CallId, usize> = Default::default();
    for event in events {
        match event {
            AgentEvent::ToolStarted { call_id, .. } => {
                assert!(
                    open.insert(call_id.clone(), 0).is_none(),
                    "{call_id} started twice"
                );
            }
            AgentEvent::ToolCompleted { call_id, .. } | AgentEvent::ToolFailed { call_id, .. } => {
                let count = open
                    .get_mut(call_id)
                    .unwrap_or_else(|| panic!("{call_id} ended without a start"));
                *count += 1;
                assert_eq!(*count, 1, "{call_id} has more than one terminal event");
            }
            _ => {}
        }
    }
    for (call_id, count) in open {
        assert_eq!(count, 1, "{call_id} has no terminal event");
    }
}

/// Asserts that every tool call in the transcript has exactly one result.
pub fn assert_transcript_paired(messages: &[Message]) {
    let mut expected = Vec::new();
    let mut answered = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                expected.extend(tool_calls.iter().map(|c| c.id.clone()))
            }
            Message::Tool { call_id, .. } => answered.push(call_id.clone()),
            _ => {}
        }
    }
    let mut sorted = answered.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        answered.len(),
        "a call was answered twice: {answered:?}"
    );
    expected.sort();
    assert_eq!(expected, sorted, "calls and results do not pair");
}

/// The transcript's answer to the call `id`: (content, is_error).
pub fn call_answer(messages: &[Message], id: &str) -> Option<(String, bool)> {
    messages.iter().find_map(|m| match m {
        Message::Tool {
            call_id,
            content,
            is_error,
            ..
        } if call_id.as_str() == id => Some((content.clone(), *is_error)),
        _ => None,
    })
}

/// The error of the `ToolFailed` event of the call `id`, if it failed.
pub fn call_failure(events: &[AgentEvent], id: &str) -> Option<String> {
    events.iter().find_map(|e| match e {
        AgentEvent::ToolFailed { call_id, error, .. } if call_id.as_str() == id => {
            Some(error.clone())
        }
        _ => None,
    })
}

/// The tool results in the transcript, in order: (name, content, is_error).
pub fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => Some((name.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    pub a: i64,
    pub b: i64,
}

/// `add(a, b)`, read-only.
pub fn add_tool() -> impl Tool {
    FnTool::new("add", "Adds two integers.", |args: AddArgs| async move {
        anyhow::Ok((args.a + args.b).to_string())
    })
    .map_spec(ToolSpec::read_only)
}

/// A tool whose behaviour the test scripts, counting how many of its calls
/// run at once.
#[derive(Debug)]
pub struct ProbeTool {
    spec: ToolSpec,
    pub active: AtomicUsize,
    pub max_active: AtomicUsize,
    pub calls: AtomicUsize,
    pub order: parking_lot_free::Log,
    behaviour: Behaviour,
}

/// What a [`ProbeTool`] does.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answers `ok` after yielding `yields` times.
    Yield(usize),
    /// Sleeps (tokio time, so paused clocks make it instant).
    Sleep(Duration),
    /// Waits until the run is cancelled.
    UntilCancelled(Arc<tokio::sync::Notify>),
    /// Waits on a barrier of the given size (only completes if that many
    /// calls run at once).
    Barrier(Arc<tokio::sync::Barrier>),
    /// Panics.
    Panic,
    /// Raises an error.
    Raise(String),
    /// Returns this result.
    Return(ToolResult),
    /// Reports progress twice, then answers.
    Progress,
    /// The first call notifies and never ends (a crash happens while it
    /// runs); later calls answer `ok <tag>`.
    BlockOnce(Arc<tokio::sync::Notify>),
}

/// A tiny append-only log without extra dependencies.
pub mod parking_lot_free {
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    pub struct Log(Mutex<Vec<String>>);

    impl Log {
        pub fn push(&self, entry: String) {
            self.0.lock().unwrap().push(entry);
        }
        pub fn entries(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }
}

impl ProbeTool {
    pub fn new(name: &str, concurrency_safe: bool, behaviour: Behaviour) -> Arc<Self> {
        let spec = ToolSpec::new(
            name,
            "A probe.",
            json!({"type": "object", "properties": {"tag": {"type": "string"}}}),
        )
        .concurrency_safe(concurrency_safe);
        Arc::new(Self {
            spec,
            active: AtomicUsize::new(0),
            max_active: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            order: Default::default(),
            behaviour,
        })
    }

    pub fn with_spec(self: Arc<Self>, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Arc<Self> {
        let mut inner = Arc::try_unwrap(self).expect("configure before sharing");
        inner.spec = f(inner.spec);
        Arc::new(inner)
    }
}

#[async_trait]
impl Tool for ProbeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let tag = args
            .get("tag")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
        self.order.push(format!("start {tag}"));
        let outcome = match &self.behaviour {
            Behaviour::Yield(n) => {
                for _ in 0..*n {
                    tokio::task::yield_now().await;
                }
                Ok(ToolResult::text(format!("ok {tag}")))
            }
            Behaviour::Sleep(d) => {
                tokio::time::sleep(*d).await;
                Ok(ToolResult::text(format!("slept {tag}")))
            }
            Behaviour::UntilCancelled(started) => {
                started.notify_one();
                context.expect("context").cancellation().cancelled().await;
                Ok(ToolResult::text("saw cancellation"))
            }
            Behaviour::Barrier(barrier) => {
                barrier.wait().await;
                Ok(ToolResult::text(format!("met {tag}")))
            }
            Behaviour::Panic => panic!("probe panicked on purpose"),
            Behaviour::Raise(message) => Err(anyhow::anyhow!(message.clone())),
            Behaviour::Return(result) => Ok(result.clone()),
            Behaviour::BlockOnce(started) => {
                if self.calls.load(Ordering::SeqCst) == 1 {
                    started.notify_one();
                    std::future::pending::<()>().await;
                }
                Ok(ToolResult::text(format!("ok {tag}")))
            }
            Behaviour::Progress => {
                let ctx = context.expect("context");
                ctx.report_progress(Some(0.5), "halfway");
                ctx.report_progress(Some(1.0), "done");
                Ok(ToolResult::text("progressed"))
            }
        };
        self.order.push(format!("end {tag}"));
        self.active.fetch_sub(1, Ordering::SeqCst);
        outcome
    }
}

/// A scripted call of `name` with a tag.
pub fn probe_call(name: &str, tag: &str) -> (String, Value) {
    (name.to_owned(), json!({ "tag": tag }))
}

/// A model turn issuing these calls.
pub fn turn(calls: &[(String, Value)]) -> ChatResponse {
    ScriptedModel::tool_calls(calls.iter().map(|(n, a)| (n.as_str(), a.clone())))
}

/// Resumes `suspended` on `harness` with `decisions`, collecting every event
/// the resumed segment emits.
pub async fn resume_collecting(
    harness: &AgentHarness,
    suspended: tinyagents::harness::SuspendedRun,
    decisions: &[tinyagents::harness::ApprovalDecision],
) -> (Result<AgentRun, TinyAgentsError>, Vec<AgentEvent>) {
    let (sink, collected) = collector();
    let result = harness
        .resume(
            suspended,
            decisions,
            tinyagents::harness::ResumeOptions::default(),
            &sink,
        )
        .await;
    drop(sink);
    (result, collected.await.unwrap())
}

/// The JSON text of every event, one per line, for searching.
pub fn events_text(events: &[AgentEvent]) -> String {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A model that answers `answer N to: <query>`, N counting the user turns
/// it has read: a conversation that continues shows it (the MCP tests'
/// served agent, here and in the `mcp-test-server` binary).
#[derive(Debug)]
pub struct CountingModel;

#[tinyagents::async_trait]
impl ChatModel for CountingModel {
    fn name(&self) -> &str {
        "counting"
    }

    async fn chat(
        &self,
        request: tinyagents::core::ChatRequest<'_>,
    ) -> Result<ChatResponse, tinyagents::core::ModelError> {
        let users: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let query = users.last().copied().unwrap_or_default();
        Ok(ChatResponse::text(format!(
            "answer {} to: {query}",
            users.len()
        )))
    }
}

/// `hop {"hops": n, "tool": t, "args": a}`: calls `hop` with `n - 1` hops
/// through the harness, or `t(a)` when `n` is 1, and forwards the outcome:
/// the result's content and error flag, or the refusal (with `?`, so the
/// caller reads it verbatim).
#[derive(Debug)]
pub struct Hop {
    spec: ToolSpec,
}

/// The `hop` tool.
pub fn hop() -> Arc<dyn Tool> {
    Arc::new(Hop {
        spec: ToolSpec::new(
            "hop",
            "Calls a tool through the harness.",
            json!({"type": "object"}),
        ),
    })
}

#[async_trait]
impl Tool for Hop {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let context = context.expect("the harness passes a context");
        let harness = ToolExecutionContext::from_run_context(context);
        let hops = args["hops"].as_u64().unwrap_or(1);
        let (tool, arguments) = if hops > 1 {
            (
                "hop".to_owned(),
                json!({"hops": hops - 1, "tool": args["tool"], "args": args["args"]}),
            )
        } else {
            (
                args["tool"].as_str().unwrap_or_default().to_owned(),
                args.get("args").cloned().unwrap_or_else(|| json!({})),
            )
        };
        let result = harness.call_tool(&tool, arguments).await?;
        Ok(ToolResult {
            content: result.content,
            is_error: result.is_error,
            metadata: None,
            control: None,
        })
    }
}
