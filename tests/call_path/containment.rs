//! Item 3: no host code can unwind a run. A panic in any middleware hook,
//! in the security gate's output screening, in a wrap layer or in a
//! redaction is contained: the run (driven in the test's own task, so an
//! escaping panic fails the test) returns, its stream ends with exactly
//! one `RunCompleted` or `RunFailed`, every `ToolStarted` has exactly one
//! terminal event, the refusal or failure names who panicked, and a
//! refused call does not run.
//!
//! The panics' messages never name the middleware: naming it is the
//! harness's job.

use std::sync::Arc;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::RunContext, core::State, middleware::Next, middleware::OutputVerdict,
    middleware::SecurityGate, middleware::ToolCallContext, middleware::ToolCallRequest,
    middleware::ToolVerdict,
};
use tinyagents_tests::assert_one_terminal_per_start;

use crate::{
    Counted, Origin, assert_one_run_end, coordinator, delegated_events, gate_allow, harness,
    one_turn, plain, run, run_coordinator, t, verdict_allow,
};

const BOOM: &str = "boom (a deliberate panic)";

/// The hook a [`Panicky`] middleware panics in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    BeforeModel,
    AfterModel,
    BeforeTool,
    AfterTool,
    CheckNested,
    ObserveNested,
    Redact,
}

/// A middleware that panics in one hook (for tool hooks, only on calls of
/// `tool` when set) and behaves as the default elsewhere.
struct Panicky {
    name: &'static str,
    hook: Hook,
    tool: Option<&'static str>,
}

impl Panicky {
    fn new(name: &'static str, hook: Hook) -> Arc<Self> {
        Arc::new(Self {
            name,
            hook,
            tool: None,
        })
    }

    fn trip(&self, hook: Hook, tool: Option<&str>) {
        let matches_tool = match (self.tool, tool) {
            (Some(only), Some(name)) => only == name,
            _ => true,
        };
        if self.hook == hook && matches_tool {
            panic!("{BOOM}");
        }
    }
}

#[async_trait]
impl Middleware for Panicky {
    fn name(&self) -> &str {
        self.name
    }

    async fn before_model(
        &self,
        _ctx: &mut RunContext,
        _state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        self.trip(Hook::BeforeModel, None);
        Ok(())
    }

    async fn after_model(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _response: &mut ChatResponse,
    ) -> Result<(), TinyAgentsError> {
        self.trip(Hook::AfterModel, None);
        Ok(())
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.trip(Hook::BeforeTool, Some(&call.name));
        Ok(verdict_allow())
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &ToolCall,
        _result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.trip(Hook::AfterTool, Some(&call.name));
        Ok(())
    }

    async fn check_nested_tool(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.trip(Hook::CheckNested, Some(&call.name));
        Ok(())
    }

    async fn observe_nested_result(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
        _result: &ToolResult,
    ) {
        self.trip(Hook::ObserveNested, Some(&call.name));
    }

    fn redact(&self, _payload: &mut Value) {
        self.trip(Hook::Redact, None);
    }
}

/// A gate that allows every call and panics while screening the output.
struct ScreenPanics;

#[async_trait]
impl SecurityGate for ScreenPanics {
    async fn authorize_tool(
        &self,
        _request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        Ok(gate_allow())
    }

    async fn screen_output(
        &self,
        _ctx: &RunContext,
        _output: &str,
    ) -> Result<OutputVerdict, TinyAgentsError> {
        panic!("{BOOM}");
    }
}

/// A wrap layer that panics instead of calling `work` (other tools it
/// passes through).
struct WrapPanics;

#[async_trait]
impl ToolMiddleware for WrapPanics {
    fn name(&self) -> &str {
        "wrap-layer-panicker-5"
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        if call.name == "work" {
            panic!("{BOOM}");
        }
        next.run(ctx, call).await
    }
}

/// Every refusal or failure text of a run: the `ToolFailed` errors, the
/// tool results in the transcript, the run's error and its `RunFailed`.
fn failure_texts(result: &Result<AgentRun, TinyAgentsError>, events: &[AgentEvent]) -> Vec<String> {
    let mut texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFailed { error, .. } | AgentEvent::RunFailed { error } => {
                Some(error.clone())
            }
            _ => None,
        })
        .collect();
    match result {
        Ok(run) => texts.extend(
            tinyagents_tests::tool_results(&run.messages)
                .into_iter()
                .map(|(_, content, _)| content),
        ),
        Err(error) => texts.push(error.to_string()),
    }
    texts
}

/// Runs `harness` in the test's task and checks what every contained panic
/// must leave: one run end, one terminal per start, a failure naming `who`.
async fn contained(harness: &AgentHarness, who: &str) -> Result<AgentRun, TinyAgentsError> {
    let (result, events) = run(harness).await;
    assert_one_run_end(&events);
    assert_one_terminal_per_start(&events);
    let texts = failure_texts(&result, &events);
    assert!(
        texts.iter().any(|t| t.contains(who)),
        "no refusal or failure names {who:?}: {texts:#?}"
    );
    result
}

fn work() -> Arc<Counted> {
    plain("work")
}

/// Item 3: a middleware whose `before_tool` panics refuses the model-issued
/// call, naming the middleware; the tool does not run; the run returns.
#[tokio::test]
async fn i10_3_a_panicking_before_tool_refuses_the_call_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-before-tool-41", Hook::BeforeTool)),
    );
    contained(&harness, "mw-before-tool-41").await.ok();
    assert_eq!(work.runs(), 0, "refused calls do not run");
}

/// Item 3: a middleware whose `after_tool` panics fails the call's result
/// (withheld), naming the middleware; the tool ran once; the run returns.
#[tokio::test]
async fn i10_3_a_panicking_after_tool_withholds_the_result_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-after-tool-42", Hook::AfterTool)),
    );
    let result = contained(&harness, "mw-after-tool-42").await;
    assert_eq!(work.runs(), 1);
    if let Ok(run) = result {
        let (content, _) = crate::answer(&run, "p1").unwrap();
        assert!(
            !content.contains("ran work"),
            "the unchecked result is withheld: {content}"
        );
    }
}

/// Item 3: a middleware whose `check_nested_tool` panics refuses the nested
/// call, naming the middleware; the nested tool does not run; the run
/// returns.
#[tokio::test]
async fn i10_3_a_panicking_check_nested_tool_refuses_the_nested_call_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Nested.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-check-nested-43", Hook::CheckNested)),
    );
    contained(&harness, "mw-check-nested-43").await.ok();
    assert_eq!(work.runs(), 0, "refused calls do not run");
}

/// Item 3: a middleware whose `observe_nested_result` panics is contained:
/// the nested call ran once and its failure names the middleware; the run
/// returns.
#[tokio::test]
async fn i10_3_a_panicking_observe_nested_result_is_contained_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Nested.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-observe-nested-44", Hook::ObserveNested)),
    );
    contained(&harness, "mw-observe-nested-44").await.ok();
    assert_eq!(work.runs(), 1);
}

/// Item 3: a middleware whose `before_model` panics ends the run with an
/// error naming the middleware (no call runs); the run returns.
#[tokio::test]
async fn i10_3_a_panicking_before_model_fails_the_run_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-before-model-45", Hook::BeforeModel)),
    );
    contained(&harness, "mw-before-model-45").await.ok();
    assert_eq!(work.runs(), 0);
}

/// Item 3: a middleware whose `after_model` panics ends the run with an
/// error naming the middleware (the response's calls do not run); the run
/// returns.
#[tokio::test]
async fn i10_3_a_panicking_after_model_fails_the_run_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-after-model-46", Hook::AfterModel)),
    );
    contained(&harness, "mw-after-model-46").await.ok();
    assert_eq!(work.runs(), 0, "an unchecked response's calls do not run");
}

/// Item 3: a security gate whose `screen_output` panics blocks the final
/// output, and the run's error names the security gate; the run returns.
#[tokio::test]
async fn i10_3_a_panicking_screen_output_blocks_the_output_naming_the_security_gate() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        |b| b.security_gate(Arc::new(ScreenPanics)),
    );
    let result = contained(&harness, "security gate").await;
    assert_eq!(work.runs(), 1, "the call before the answer ran");
    if let Ok(run) = result {
        assert_ne!(
            run.final_text, "done",
            "the unscreened answer is not delivered"
        );
    }
}

/// Item 3: a wrap layer whose `wrap_tool` panics refuses the model-issued
/// call and the nested call it wraps, naming the layer; the tool does not
/// run; the run returns.
#[tokio::test]
async fn i10_3_a_panicking_wrap_tool_refuses_model_issued_and_nested_calls_naming_the_layer() {
    for origin in [Origin::Model, Origin::Nested] {
        let work = work();
        let harness = harness(
            one_turn(&[origin.call("work", json!({}))]),
            vec![t(&work)],
            |b| b.tool_middleware(Arc::new(WrapPanics)),
        );
        let (result, events) = run(&harness).await;
        assert_one_run_end(&events);
        assert_one_terminal_per_start(&events);
        let texts = failure_texts(&result, &events);
        assert!(
            texts.iter().any(|t| t.contains("wrap-layer-panicker-5")),
            "{origin:?}: no refusal names the layer: {texts:#?}"
        );
        assert_eq!(work.runs(), 0, "{origin:?}: refused calls do not run");
    }
}

/// Item 3: a middleware whose `redact` panics (on the model-issued call's
/// arguments, before they are recorded) refuses the call, naming the
/// middleware; the tool does not run; the run returns.
#[tokio::test]
async fn i10_3_a_panicking_redact_refuses_the_call_naming_the_middleware() {
    let work = work();
    let harness = harness(
        one_turn(&[Origin::Model.call("work", json!({"q": "x"}))]),
        vec![t(&work)],
        |b| b.middleware(Panicky::new("mw-redact-47", Hook::Redact)),
    );
    contained(&harness, "mw-redact-47").await.ok();
    assert_eq!(work.runs(), 0, "refused calls do not run");
}

/// Item 3 (delegated): a host middleware whose `before_tool` panics on the
/// delegated agent's call is contained in the delegated run: its forwarded
/// stream ends with exactly one run-terminal event, its call is refused
/// naming the middleware and does not run, and the coordinator's run ends
/// normally with exactly one run-terminal event.
#[tokio::test]
async fn i10_3_a_panicking_before_tool_in_a_delegated_agent_is_contained_in_its_run() {
    let work = work();
    let panicky = Arc::new(Panicky {
        name: "mw-delegated-before-tool-48",
        hook: Hook::BeforeTool,
        tool: Some("work"),
    });
    let root = coordinator(
        one_turn(&[Origin::Model.call("work", json!({}))]),
        vec![t(&work)],
        vec![panicky],
        None,
    )
    .await;
    let (result, events) = run_coordinator(&root, RunRequest::new("go")).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_one_run_end(&events);
    assert_one_terminal_per_start(&events);
    let child = delegated_events(&events);
    assert_one_run_end(&child);
    assert_one_terminal_per_start(&child);
    let refusal = crate::failed_error(&child, "p1").expect("the delegated call was refused");
    assert!(refusal.contains("mw-delegated-before-tool-48"), "{refusal}");
    assert_eq!(work.runs(), 0, "refused calls do not run");
}

/// A tool whose `execute_with_context` panics while it builds its future
/// (a hand-written implementation, not `#[async_trait]`), before anything
/// is polled.
struct PanicsWhileBuilding {
    spec: ToolSpec,
}

impl Tool for PanicsWhileBuilding {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn execute_with_context<'life0, 'life1, 'async_trait>(
        &'life0 self,
        _args: Value,
        _opts: ToolCallOptions,
        _context: Option<&'life1 ToolRunContext>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = anyhow::Result<ToolResult>> + Send + 'async_trait>,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        panic!("built-sync-panic-81")
    }
}

/// A wrap layer whose `wrap_tool` panics while it builds its future.
struct WrapPanicsWhileBuilding;

impl ToolMiddleware for WrapPanicsWhileBuilding {
    fn name(&self) -> &str {
        "wrap-building-panicker-82"
    }

    fn wrap_tool<'life0, 'life1, 'life2, 'life3, 'life4, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 ToolCallContext<'life2>,
        _call: &'life3 ToolCall,
        _next: Next<'life4>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<ToolResult, TinyAgentsError>>
                + Send
                + 'async_trait,
        >,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        'life4: 'async_trait,
        Self: 'async_trait,
    {
        panic!("wrap-sync-panic")
    }
}

/// Issue 32 (the onion built before it is awaited): a tool or a wrap layer
/// that panics while building its future, not while it runs, is contained
/// the same way on every origin: the call fails naming the tool or the
/// layer, every start has one terminal event, the run ends.
#[tokio::test]
async fn i32_a_tool_or_a_layer_panicking_while_it_builds_its_future_is_contained_on_every_origin() {
    for origin in [Origin::Model, Origin::Nested] {
        let tool: Arc<dyn Tool> = Arc::new(PanicsWhileBuilding {
            spec: crate::spec("builds_badly"),
        });
        let built = harness(
            one_turn(&[origin.call("builds_badly", json!({}))]),
            vec![tool],
            |b| b.include_detailed_errors(true),
        );
        let result = contained(&built, "built-sync-panic-81").await;
        assert_eq!(result.unwrap().status, RunStatus::Completed, "{origin:?}");

        let work = work();
        let wrapped = harness(
            one_turn(&[origin.call("work", json!({}))]),
            vec![t(&work)],
            |b| b.tool_middleware(Arc::new(WrapPanicsWhileBuilding)),
        );
        let result = contained(&wrapped, "wrap-building-panicker-82").await;
        assert_eq!(result.unwrap().status, RunStatus::Completed, "{origin:?}");
        assert_eq!(
            work.runs(),
            0,
            "{origin:?}: the layer never called the tool"
        );
    }
}
