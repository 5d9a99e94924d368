//! The middleware and policy layer through the facade, on real harness runs
//! with a scripted model: every built-in's allow, deny and defer cases, the
//! order rules, parallel calls under a wrap, every fail-closed path,
//! deferral and resume (through JSON), and redaction of planted secrets.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
// `&[tool.clone()]` unsizes each `Arc<ProbeTool>` to `Arc<dyn Tool>`, which
// the suggested `std::slice::from_ref(&tool)` cannot do.
#![allow(clippy::cloned_ref_to_slice_refs)]

mod builtins;
mod deferral;
mod fail_closed;
mod hook_mask;
mod order;
mod redaction;
mod wraps;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::LimitKind, core::ModelToolCall, core::RunContext, core::State, core::ToolReplay,
    harness::AgentHarnessBuilder, harness::ApprovalDecision, harness::SuspendedRun,
    harness::TurnEntry, middleware::ApprovalFn, middleware::ApprovalOutcome,
    middleware::ApprovalOutcomeFn, middleware::HumanApprovalMiddleware, middleware::Next,
    middleware::OutputVerdict, middleware::PlanModeMiddleware, middleware::RedactionMiddleware,
    middleware::Redactor, middleware::RepeatProgressMiddleware, middleware::RetryWrap,
    middleware::SecretMatcher, middleware::TimeoutWrap, middleware::ToolAllowlistMiddleware,
    middleware::ToolCallContext, middleware::ToolCallRequest, middleware::ToolPolicyMiddleware,
    middleware::ToolVerdict, tools::SideEffects,
};
use tinyagents_tests::parking_lot_free::Log;
use tinyagents_tests::*;

fn script(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses).recording())
}

/// A harness around `model` with `tools`, configured by `configure`.
fn build(
    model: &Arc<ScriptedModel>,
    tools: &[Arc<dyn Tool>],
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(model.clone());
    for tool in tools {
        builder.register(Arc::clone(tool)).unwrap();
    }
    configure(builder).build().unwrap()
}

/// A read-only probe (concurrency-safe, safe to replay) answering `ok <tag>`.
fn read_tool(name: &str) -> Arc<ProbeTool> {
    ProbeTool::new(name, true, Behaviour::Yield(1)).with_spec(ToolSpec::read_only)
}

/// A probe with side effects answering `ok <tag>`.
fn write_tool(name: &str) -> Arc<ProbeTool> {
    ProbeTool::new(name, false, Behaviour::Yield(1))
}

/// A probe whose spec says a person must approve each call.
fn deploy_tool() -> Arc<ProbeTool> {
    ProbeTool::new("deploy", false, Behaviour::Yield(1)).with_spec(ToolSpec::approval_required)
}

fn calls_of(tool: &ProbeTool) -> usize {
    tool.calls.load(Ordering::SeqCst)
}

/// The tool results of the last request the model received: what it read.
fn read_by_model(model: &ScriptedModel) -> Vec<(String, String, bool)> {
    tool_results(
        &model
            .requests()
            .last()
            .expect("the model was asked")
            .messages,
    )
}

/// The suspended state of an awaiting run, written to JSON and read back (a
/// host restarting in between).
fn through_json(run: &AgentRun) -> SuspendedRun {
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let suspended = run
        .suspended
        .as_ref()
        .expect("an awaiting run holds its state");
    let text = serde_json::to_string(suspended).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn pending_names(suspended: &SuspendedRun) -> Vec<String> {
    suspended.pending().map(|p| p.call.name.clone()).collect()
}

fn approve_all(suspended: &SuspendedRun) -> Vec<ApprovalDecision> {
    suspended.pending().map(|p| p.approve()).collect()
}

/// Which hook a [`Hooks`] middleware fails in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hook {
    BeforeModel,
    AfterModel,
    BeforeTool,
    AfterTool,
}

/// A lifecycle middleware that logs its hooks to a shared log, answers
/// `before_tool` with a fixed verdict, may fail one hook, and may rewrite.
struct Hooks {
    name: &'static str,
    log: Arc<Log>,
    verdict: ToolVerdict,
    fail: Option<Hook>,
    /// Appended to the call's `tag` in `before_tool` and to the result in
    /// `after_tool`.
    stamp: bool,
    /// Renames the call in `before_tool`.
    rename: Option<&'static str>,
}

impl Hooks {
    fn new(name: &'static str, log: &Arc<Log>) -> Self {
        Self {
            name,
            log: Arc::clone(log),
            verdict: ToolVerdict::Allow,
            fail: None,
            stamp: false,
            rename: None,
        }
    }

    fn verdict(mut self, verdict: ToolVerdict) -> Self {
        self.verdict = verdict;
        self
    }

    fn failing(mut self, hook: Hook) -> Self {
        self.fail = Some(hook);
        self
    }

    fn stamping(mut self) -> Self {
        self.stamp = true;
        self
    }

    fn renaming(mut self, to: &'static str) -> Self {
        self.rename = Some(to);
        self
    }

    fn arc(self) -> Arc<dyn Middleware> {
        Arc::new(self)
    }

    fn enter(&self, hook: Hook, label: &str) -> Result<(), TinyAgentsError> {
        self.log.push(format!("{label} {}", self.name));
        if self.fail == Some(hook) {
            return Err(TinyAgentsError::State(format!(
                "{}'s store is offline",
                self.name
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl Middleware for Hooks {
    fn name(&self) -> &str {
        self.name
    }

    async fn before_model(
        &self,
        _ctx: &mut RunContext,
        _state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        self.enter(Hook::BeforeModel, "before_model")
    }

    async fn after_model(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _response: &mut ChatResponse,
    ) -> Result<(), TinyAgentsError> {
        self.enter(Hook::AfterModel, "after_model")
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.enter(Hook::BeforeTool, "before_tool")?;
        if self.stamp {
            let tag = call.arguments["tag"].as_str().unwrap_or("").to_owned();
            call.arguments["tag"] = json!(format!("{tag}{}", self.name));
        }
        if let Some(to) = self.rename {
            call.name = to.to_owned();
        }
        Ok(self.verdict.clone())
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        _call: &ToolCall,
        result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.enter(Hook::AfterTool, "after_tool")?;
        if self.stamp {
            result.content.push_str(&format!(" +{}", self.name));
        }
        Ok(())
    }
}

fn deny(reason: &str) -> ToolVerdict {
    ToolVerdict::Deny {
        reason: reason.into(),
    }
}

fn defer(reason: &str) -> ToolVerdict {
    ToolVerdict::Defer {
        reason: reason.into(),
    }
}

/// A wrap layer that counts how many calls it holds at once, and may log
/// its entry and exit, declare itself exclusive, refuse or panic.
struct Layer {
    name: &'static str,
    log: Option<Arc<Log>>,
    exclusive: bool,
    refuse: bool,
    panic: bool,
    active: AtomicUsize,
    max_active: AtomicUsize,
    seen: AtomicUsize,
}

impl Layer {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            log: None,
            exclusive: false,
            refuse: false,
            panic: false,
            active: AtomicUsize::new(0),
            max_active: AtomicUsize::new(0),
            seen: AtomicUsize::new(0),
        }
    }

    fn logging(mut self, log: &Arc<Log>) -> Self {
        self.log = Some(Arc::clone(log));
        self
    }

    fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }
}

#[async_trait]
impl ToolMiddleware for Layer {
    fn name(&self) -> &str {
        self.name
    }

    fn concurrent_safe(&self) -> bool {
        !self.exclusive
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        if self.panic {
            panic!("layer {} panicked on purpose", self.name);
        }
        if self.refuse {
            return Err(TinyAgentsError::Denied {
                by: self.name.into(),
                reason: format!("no {}", call.name),
            });
        }
        if let Some(log) = &self.log {
            log.push(format!("enter {}", self.name));
        }
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_active.fetch_max(now, Ordering::SeqCst);
        let result = next.run(ctx, call).await;
        self.active.fetch_sub(1, Ordering::SeqCst);
        if let Some(log) = &self.log {
            log.push(format!("exit {}", self.name));
        }
        result
    }
}

/// What [`Gate`] answers about calls of its target tool.
#[derive(Clone)]
enum GateMode {
    Allow,
    Deny,
    Ask,
    Fail,
    Panic,
}

/// What [`Gate`] says about the final output.
#[derive(Clone)]
enum Screen {
    Allow,
    Rewrite(&'static str),
    Block,
    Fail,
}

/// A host security gate: `mode` for calls of `target` (every other call is
/// allowed), `screen` for the final output; records what it was asked.
struct Gate {
    target: &'static str,
    mode: GateMode,
    screen: Screen,
    asked: Log,
}

impl Gate {
    fn new(target: &'static str, mode: GateMode) -> Arc<Self> {
        Arc::new(Self {
            target,
            mode,
            screen: Screen::Allow,
            asked: Log::default(),
        })
    }

    fn screening(screen: Screen) -> Arc<Self> {
        Arc::new(Self {
            target: "",
            mode: GateMode::Allow,
            screen,
            asked: Log::default(),
        })
    }
}

#[async_trait]
impl SecurityGate for Gate {
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.asked.push(format!(
            "{} {} nested={} agent={} args={}",
            request.call_id,
            request.spec.name,
            request.is_nested(),
            request.agent_id.map_or("-", |a| a.as_str()),
            request.arguments
        ));
        if request.spec.name != self.target {
            return Ok(ToolVerdict::Allow);
        }
        match self.mode {
            GateMode::Allow => Ok(ToolVerdict::Allow),
            GateMode::Deny => Ok(ToolVerdict::Deny {
                reason: "not on weekends".into(),
            }),
            GateMode::Ask => Ok(ToolVerdict::Defer {
                reason: "ask the on-call engineer".into(),
            }),
            GateMode::Fail => Err(TinyAgentsError::State("policy store unreachable".into())),
            GateMode::Panic => panic!("gate panicked on purpose"),
        }
    }

    async fn screen_output(
        &self,
        _ctx: &RunContext,
        output: &str,
    ) -> Result<OutputVerdict, TinyAgentsError> {
        self.asked.push(format!("screen {output}"));
        match self.screen {
            Screen::Allow => Ok(OutputVerdict::Allow),
            Screen::Rewrite(text) => Ok(OutputVerdict::Rewrite(text.into())),
            Screen::Block => Ok(OutputVerdict::Block {
                reason: "the answer names a customer".into(),
            }),
            Screen::Fail => Err(TinyAgentsError::State("screening service down".into())),
        }
    }
}

/// What a [`StepTool`] does on one attempt.
#[derive(Clone)]
enum Step {
    Ok,
    Fail,
    Sleep(Duration),
}

/// A tool that takes the next step of its script on each attempt and
/// records the options it was given.
struct StepTool {
    spec: ToolSpec,
    steps: std::sync::Mutex<Vec<Step>>,
    attempts: std::sync::Mutex<Vec<u32>>,
    timeouts: std::sync::Mutex<Vec<Option<Duration>>>,
}

impl StepTool {
    fn new(spec: ToolSpec, mut steps: Vec<Step>) -> Arc<Self> {
        steps.reverse();
        Arc::new(Self {
            spec,
            steps: std::sync::Mutex::new(steps),
            attempts: Default::default(),
            timeouts: Default::default(),
        })
    }

    fn attempts(&self) -> Vec<u32> {
        self.attempts.lock().unwrap().clone()
    }

    fn timeouts(&self) -> Vec<Option<Duration>> {
        self.timeouts.lock().unwrap().clone()
    }
}

#[async_trait]
impl Tool for StepTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        opts: ToolCallOptions,
        _context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        self.attempts.lock().unwrap().push(opts.attempt);
        self.timeouts.lock().unwrap().push(opts.timeout);
        let step = self.steps.lock().unwrap().pop().unwrap_or(Step::Ok);
        match step {
            Step::Ok => Ok(ToolResult::text("ok")),
            Step::Fail => anyhow::bail!("flaky backend"),
            Step::Sleep(duration) => {
                tokio::time::sleep(duration).await;
                Ok(ToolResult::text("ok"))
            }
        }
    }
}

fn plain_spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "A scripted tool.", json!({"type": "object"}))
}

fn call(name: &str, tag: &str) -> ChatResponse {
    turn(&[probe_call(name, tag)])
}

fn done() -> ChatResponse {
    ChatResponse::text("done")
}
