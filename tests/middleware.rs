//! The middleware and policy layer through the facade, on real harness runs
//! with a scripted model: every built-in's allow, deny and defer cases, the
//! order rules, parallel calls under a wrap, every fail-closed path,
//! deferral and resume (through JSON), and redaction of planted secrets.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
// `&[tool.clone()]` unsizes each `Arc<ProbeTool>` to `Arc<dyn Tool>`, which
// the suggested `std::slice::from_ref(&tool)` cannot do.
#![allow(clippy::cloned_ref_to_slice_refs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    AgentHarnessBuilder, ApprovalDecision, ApprovalFn, ApprovalOutcome, ApprovalOutcomeFn,
    GateDecision, HumanApprovalMiddleware, LimitKind, ModelToolCall, Next, OutputVerdict,
    PlanModeMiddleware, RedactionMiddleware, Redactor, RepeatProgressMiddleware, RetryWrap,
    RunContext, SecretMatcher, SideEffects, State, SuspendedRun, TimeoutWrap,
    ToolAllowlistMiddleware, ToolCallContext, ToolCallRequest, ToolPolicyMiddleware, ToolReplay,
    TurnEntry,
};
use tinyagents_tests::parking_lot_free::Log;
use tinyagents_tests::*;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

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
        call: ToolCall,
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
    ) -> Result<GateDecision, TinyAgentsError> {
        self.asked.push(format!(
            "{} {} nested={} agent={} args={}",
            request.call_id,
            request.spec.name,
            request.is_nested(),
            request.agent_id.map_or("-", |a| a.as_str()),
            request.arguments
        ));
        if request.spec.name != self.target {
            return Ok(GateDecision::Allow);
        }
        match self.mode {
            GateMode::Allow => Ok(GateDecision::Allow),
            GateMode::Deny => Ok(GateDecision::Deny {
                reason: "not on weekends".into(),
            }),
            GateMode::Ask => Ok(GateDecision::Ask {
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

// ---------------------------------------------------------------------------
// ToolAllowlistMiddleware (allow, deny; it never defers)
// ---------------------------------------------------------------------------

/// Allowlist: a listed tool runs; an unlisted one gets a refusal the model
/// reads, naming the middleware and the allowed tools.
#[tokio::test]
async fn allowlist_runs_listed_tools_and_refuses_others_naming_itself() {
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("write", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(["read"])))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&read), calls_of(&write)), (1, 0));
    assert_eq!(
        read_by_model(&model),
        vec![
            ("read".into(), "ok a".into(), false),
            (
                "write".into(),
                "denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: read"
                    .into(),
                true
            ),
        ]
    );
    assert_transcript_paired(&run.messages);
    assert_one_terminal_per_start(&events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolFailed { name, .. } if name == "write"))
    );
}

/// Allowlist: an empty list refuses every call.
#[tokio::test]
async fn allowlist_that_is_empty_refuses_every_call() {
    let read = read_tool("read");
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[read.clone()], |b| {
        b.middleware(Arc::new(ToolAllowlistMiddleware::new(Vec::<String>::new())))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(calls_of(&read), 0);
    assert_eq!(
        tool_results(&run.messages),
        vec![(
            "read".into(),
            "denied by tool_allowlist: tool 'read' is not allowed here; no tools are allowed"
                .into(),
            true
        )]
    );
}

// ---------------------------------------------------------------------------
// ToolPolicyMiddleware (allow, deny by mask, deny by sandbox, classification,
// defer for approval)
// ---------------------------------------------------------------------------

/// ToolPolicy: the deny mask over side-effect classes refuses a tool of a
/// masked class, and tools of other classes run in the same turn.
#[tokio::test]
async fn tool_policy_deny_mask_refuses_masked_side_effects_and_allows_the_rest() {
    let read = read_tool("read");
    let fetch = write_tool("fetch").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    let mail = write_tool("mail").with_spec(|s| s.side_effects(SideEffects::MESSAGING));
    let model = script(vec![
        turn(&[
            probe_call("read", "a"),
            probe_call("fetch", "b"),
            probe_call("mail", "c"),
        ]),
        done(),
    ]);
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT);
    let harness = build(&model, &[read.clone(), fetch.clone(), mail.clone()], |b| {
        b.middleware(Arc::new(policy))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        (calls_of(&read), calls_of(&fetch), calls_of(&mail)),
        (1, 0, 1)
    );
    assert_eq!(
        read_by_model(&model),
        vec![
            ("read".into(), "ok a".into(), false),
            (
                "fetch".into(),
                "denied by tool_policy: tool 'fetch' is refused by the tool policy: side effects not allowed here: network_egress"
                    .into(),
                true
            ),
            ("mail".into(), "ok c".into(), false),
        ]
    );
    assert_transcript_paired(&run.messages);
}

/// ToolPolicy: a sandboxed tool is refused when no sandbox is available and
/// runs when the host declares one.
#[tokio::test]
async fn tool_policy_sandbox_requirement_refuses_without_a_sandbox_and_allows_with_one() {
    for available in [false, true] {
        let shell = write_tool("shell")
            .with_spec(|s| s.side_effects(SideEffects::CODE_EXECUTION).sandboxed());
        let model = script(vec![call("shell", "ls"), done()]);
        let policy = ToolPolicyMiddleware::new().sandbox_available(available);
        let harness = build(&model, &[shell.clone()], |b| b.middleware(Arc::new(policy)));
        let run = harness.run("go").await.unwrap();
        let results = tool_results(&run.messages);
        if available {
            assert_eq!(calls_of(&shell), 1);
            assert_eq!(results, vec![("shell".into(), "ok ls".into(), false)]);
        } else {
            assert_eq!(calls_of(&shell), 0);
            assert_eq!(
                results,
                vec![(
                    "shell".into(),
                    "denied by tool_policy: tool 'shell' must run in a sandbox and no sandbox is available here".into(),
                    true
                )]
            );
        }
    }
}

/// ToolPolicy: the host's classification adds classes to a spec (so a
/// read-only tool classified as payment is refused by the mask) or replaces
/// them (so a network tool reclassified as harmless runs).
#[tokio::test]
async fn tool_policy_classification_adds_or_replaces_a_tools_classes() {
    let read = read_tool("read");
    let fetch = write_tool("fetch").with_spec(|s| s.side_effects(SideEffects::NETWORK_EGRESS));
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("fetch", "b")]),
        done(),
    ]);
    let policy = ToolPolicyMiddleware::new()
        .deny_side_effects(SideEffects::NETWORK_EGRESS | SideEffects::PAYMENT)
        .classify("read", SideEffects::PAYMENT)
        .reclassify("fetch", SideEffects::NONE);
    let harness = build(&model, &[read.clone(), fetch.clone()], |b| {
        b.middleware(Arc::new(policy))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&fetch)), (0, 1));
    let results = tool_results(&run.messages);
    assert_eq!(
        results[0].1,
        "denied by tool_policy: tool 'read' is refused by the tool policy: side effects not allowed here: payment"
    );
    assert_eq!(results[1], ("fetch".into(), "ok b".into(), false));
}

/// ToolPolicy: a tool named for approval and a tool of a class needing
/// approval both defer the run; approved on resume, each runs once.
#[tokio::test]
async fn tool_policy_defers_calls_needing_approval_and_runs_them_once_approved() {
    let pay = write_tool("pay").with_spec(|s| s.side_effects(SideEffects::PAYMENT));
    let write = write_tool("write");
    let read = read_tool("read");
    let model = script(vec![
        turn(&[
            probe_call("pay", "5 EUR"),
            probe_call("write", "w"),
            probe_call("read", "r"),
        ]),
        done(),
    ]);
    let tools: [Arc<dyn Tool>; 3] = [pay.clone(), write.clone(), read.clone()];
    let configure = |b: AgentHarnessBuilder| {
        b.middleware(Arc::new(
            ToolPolicyMiddleware::new()
                .require_approval("write")
                .require_approval_for(SideEffects::PAYMENT),
        ))
    };
    let run = build(&model, &tools, configure).run("go").await.unwrap();
    let suspended = through_json(&run);
    let reasons: Vec<String> = suspended.pending().map(|p| p.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            "tool 'pay' requires approval for its side effects: payment",
            "tool 'write' requires approval"
        ]
    );
    assert_eq!(
        (calls_of(&pay), calls_of(&write), calls_of(&read)),
        (0, 0, 1)
    );

    let decisions = approve_all(&suspended);
    let run = build(&model, &tools, configure)
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        (calls_of(&pay), calls_of(&write), calls_of(&read)),
        (1, 1, 1)
    );
    assert_eq!(
        tool_results(&run.messages),
        vec![
            ("pay".into(), "ok 5 EUR".into(), false),
            ("write".into(), "ok w".into(), false),
            ("read".into(), "ok r".into(), false),
        ]
    );
    assert_transcript_paired(&run.messages);
}

// ---------------------------------------------------------------------------
// HumanApprovalMiddleware (allow, defer, deny when a callback fails)
// ---------------------------------------------------------------------------

type Outcomes = Arc<std::sync::Mutex<Vec<(String, ApprovalOutcome)>>>;

fn outcome_recorder() -> (ApprovalOutcomeFn, Outcomes) {
    let seen: Outcomes = Default::default();
    let sink = Arc::clone(&seen);
    let observe: ApprovalOutcomeFn = Arc::new(move |call: &ToolCall, outcome| {
        sink.lock().unwrap().push((call.id.to_string(), outcome));
    });
    (observe, seen)
}

/// HumanApproval: an unflagged tool runs, a tool whose spec requires
/// approval defers the run, and the approval granted on resume runs it.
#[tokio::test]
async fn human_approval_defers_flagged_calls_and_lets_unflagged_ones_run() {
    let read = read_tool("read");
    let deploy = deploy_tool();
    let (observe, outcomes) = outcome_recorder();
    let approval = Arc::new(HumanApprovalMiddleware::new().with_outcome_fn(observe));
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), deploy.clone()], |b| {
        b.middleware(approval.clone())
    });
    let run = harness.run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(pending_names(&suspended), ["deploy"]);
    assert_eq!(
        suspended.pending().next().unwrap().reason,
        "tool 'deploy' requires a person's approval"
    );
    assert_eq!((calls_of(&read), calls_of(&deploy)), (1, 0));

    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&read), calls_of(&deploy)), (1, 1));
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![
            ("p2".to_owned(), ApprovalOutcome::Deferred),
            ("p2".to_owned(), ApprovalOutcome::Granted)
        ]
    );
}

/// HumanApproval: a tool flagged by name defers, and an approval callback
/// that allows a call lets it run without suspending the run.
#[tokio::test]
async fn human_approval_flags_by_name_and_its_callback_may_approve() {
    let mail = write_tool("mail");
    let (observe, outcomes) = outcome_recorder();
    let approve: ApprovalFn = Arc::new(|call: &ToolCall| call.arguments["tag"] == "me@example.com");
    let approval = Arc::new(
        HumanApprovalMiddleware::new()
            .require("mail")
            .with_approval_fn(approve)
            .with_outcome_fn(observe),
    );
    let model = script(vec![
        call("mail", "me@example.com"),
        call("mail", "boss@example.com"),
        done(),
    ]);
    let harness = build(&model, &[mail.clone()], |b| b.middleware(approval.clone()));
    let run = harness.run("go").await.unwrap();
    // The first call was approved by the callback and ran; the second waits.
    assert_eq!(calls_of(&mail), 1);
    let suspended = through_json(&run);
    assert_eq!(
        suspended
            .pending()
            .map(|p| p.call.arguments["tag"].clone())
            .collect::<Vec<_>>(),
        [json!("boss@example.com")]
    );
    assert_eq!(
        *outcomes.lock().unwrap(),
        vec![
            ("p1".to_owned(), ApprovalOutcome::Approved),
            ("p2".to_owned(), ApprovalOutcome::Deferred)
        ]
    );
}

/// HumanApproval (fail closed): an approval callback that panics refuses
/// the call with a message naming the middleware; the tool never runs.
#[tokio::test]
async fn human_approval_callback_that_panics_refuses_the_call() {
    let deploy = deploy_tool();
    let boom: ApprovalFn = Arc::new(|_: &ToolCall| panic!("approval service down"));
    let approval = Arc::new(HumanApprovalMiddleware::new().with_approval_fn(boom));
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| b.middleware(approval));
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "a refusal is not a suspension"
    );
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "deploy".into(),
            "denied by human_approval: the approval callback failed for tool 'deploy'; the call is refused".into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// HumanApproval (fail closed): an outcome callback that panics refuses the
/// call even when the approval callback allowed it.
#[tokio::test]
async fn human_approval_outcome_callback_that_panics_refuses_the_call() {
    let deploy = deploy_tool();
    let yes: ApprovalFn = Arc::new(|_: &ToolCall| true);
    let boom: ApprovalOutcomeFn = Arc::new(|_: &ToolCall, _| panic!("audit log down"));
    let approval = Arc::new(
        HumanApprovalMiddleware::new()
            .with_approval_fn(yes)
            .with_outcome_fn(boom),
    );
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| b.middleware(approval));
    let run = harness.run("go").await.unwrap();
    assert_eq!(calls_of(&deploy), 0);
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(is_error);
    assert_eq!(
        content,
        "denied by human_approval: the approval outcome callback failed for tool 'deploy'; the call is refused"
    );
}

// ---------------------------------------------------------------------------
// PlanModeMiddleware (allow read-only, deny others; never defers)
// ---------------------------------------------------------------------------

/// PlanMode: read-only tools run; any other call is refused with the
/// plan-mode message, which the model reads.
#[tokio::test]
async fn plan_mode_lets_read_only_tools_run_and_refuses_others_with_the_plan_mode_message() {
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("write", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Arc::new(PlanModeMiddleware::new(true)))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&write)), (1, 0));
    let seen = read_by_model(&model);
    assert_eq!(seen[0], ("read".into(), "ok a".into(), false));
    let (name, refusal, is_error) = &seen[1];
    assert_eq!(name, "write");
    assert!(is_error);
    assert!(
        refusal.starts_with(
            "denied by plan_mode: You are in plan mode: only read-only tools are available, and 'write' is not read-only, so it was not run."
        ),
        "{refusal}"
    );
    assert_transcript_paired(&run.messages);
}

/// PlanMode: switched off at run time (shared in an `Arc`), the same call
/// runs.
#[tokio::test]
async fn plan_mode_switched_off_lets_the_same_call_run() {
    let write = write_tool("write");
    let plan = Arc::new(PlanModeMiddleware::new(true));
    let model = script(vec![call("write", "a"), done(), call("write", "a"), done()]);
    let harness = build(&model, &[write.clone()], |b| b.middleware(plan.clone()));
    let first = harness.run("go").await.unwrap();
    assert!(tool_results(&first.messages)[0].2);
    assert_eq!(calls_of(&write), 0);
    plan.set_enabled(false);
    let second = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&second.messages),
        vec![("write".into(), "ok a".into(), false)]
    );
    assert_eq!(calls_of(&write), 1);
}

// ---------------------------------------------------------------------------
// RepeatProgressMiddleware (allow, deny the K-th; never defers)
// ---------------------------------------------------------------------------

/// RepeatProgress: the K-th identical consecutive call (K = 3) is refused,
/// and so is every identical call after it; the earlier ones ran.
#[tokio::test]
async fn repeat_progress_refuses_the_kth_identical_consecutive_call() {
    let search = read_tool("search");
    let model = script(vec![
        call("search", "x"),
        call("search", "x"),
        call("search", "x"),
        call("search", "x"),
        done(),
    ]);
    let harness = build(&model, &[search.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(3)))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&search), 2);
    let results = tool_results(&run.messages);
    assert!(!results[0].2 && !results[1].2);
    assert!(
        results[2].1.starts_with("denied by repeat_progress: refused: this is call 3 in a row of 'search' with the same arguments"),
        "{}",
        results[2].1
    );
    assert!(results[3].1.contains("call 4 in a row"), "{}", results[3].1);
}

/// RepeatProgress: a different call in between resets the streak, and
/// identical calls within one turn count as consecutive.
#[tokio::test]
async fn repeat_progress_resets_on_a_different_call_and_counts_within_a_turn() {
    let search = read_tool("search");
    let model = script(vec![
        call("search", "x"),
        call("search", "y"),
        call("search", "x"),
        turn(&[probe_call("search", "z"), probe_call("search", "z")]),
        done(),
    ]);
    let harness = build(&model, &[search.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
    });
    let run = harness.run("go").await.unwrap();
    let errors: Vec<bool> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, _, e)| e)
        .collect();
    assert_eq!(errors, [false, false, false, false, true]);
    assert_eq!(calls_of(&search), 4);
}

// ---------------------------------------------------------------------------
// Order rules
// ---------------------------------------------------------------------------

/// Order: before_model and before_tool run in registration order,
/// after_model and after_tool in reverse; wrap layers sit between
/// before_tool and after_tool, first registered outermost.
#[tokio::test]
async fn hooks_run_before_in_registration_order_and_after_in_reverse() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe], |b| {
        b.middleware(Hooks::new("A", &log).arc())
            .middleware(Hooks::new("B", &log).arc())
            .middleware(Hooks::new("C", &log).arc())
            .tool_middleware(Arc::new(Layer::new("W1").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("W2").logging(&log)))
    });
    harness.run("go").await.unwrap();
    let expected = [
        "before_model A",
        "before_model B",
        "before_model C",
        "after_model C",
        "after_model B",
        "after_model A",
        "before_tool A",
        "before_tool B",
        "before_tool C",
        "enter W1",
        "enter W2",
        "exit W2",
        "exit W1",
        "after_tool C",
        "after_tool B",
        "after_tool A",
        "before_model A",
        "before_model B",
        "before_model C",
        "after_model C",
        "after_model B",
        "after_model A",
    ];
    assert_eq!(log.entries(), expected);
}

/// Order: wrap layers nest first-registered outermost, for every call of a
/// turn (three layers, two calls run one after the other).
#[tokio::test]
async fn wrap_layers_nest_first_registered_outermost() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![
        turn(&[probe_call("write", "1"), probe_call("write", "2")]),
        done(),
    ]);
    let harness = build(&model, &[probe], |b| {
        b.tool_middleware(Arc::new(Layer::new("outer").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("middle").logging(&log)))
            .tool_middleware(Arc::new(Layer::new("inner").logging(&log)))
    });
    harness.run("go").await.unwrap();
    let one = [
        "enter outer",
        "enter middle",
        "enter inner",
        "exit inner",
        "exit middle",
        "exit outer",
    ];
    assert_eq!(log.entries(), [one, one].concat());
}

/// Order: before_tool rewrites flow in registration order (each sees the
/// previous rewrite, the tool gets the last), after_tool rewrites in
/// reverse.
#[tokio::test]
async fn rewrites_flow_through_before_tool_in_order_and_after_tool_in_reverse() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "-"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("A", &log).stamping().arc())
            .middleware(Hooks::new("B", &log).stamping().arc())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(probe.order.entries()[0], "start -AB");
    assert_eq!(tool_results(&run.messages)[0].1, "ok -AB +B +A");
}

/// A before_tool that changes which tool is called is refused (fail
/// closed), naming the middleware; neither tool runs.
#[tokio::test]
async fn a_before_tool_that_renames_the_call_is_refused() {
    let log = Arc::new(Log::default());
    let read = read_tool("read");
    let write = write_tool("write");
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[read.clone(), write.clone()], |b| {
        b.middleware(Hooks::new("sneaky", &log).renaming("write").arc())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!((calls_of(&read), calls_of(&write)), (0, 0));
    assert_eq!(
        tool_results(&run.messages)[0].1,
        "denied by sneaky: a middleware may not change which tool is called"
    );
}

/// Verdicts combine most-restrictive first: with allow, defer and deny
/// registered in each of the six orders the call is denied (by the denier),
/// and with allow and defer in either order it is deferred.
#[tokio::test]
async fn verdicts_combine_deny_over_defer_over_allow_in_any_registration_order() {
    let verdicts = [
        ("allower", ToolVerdict::Allow),
        ("deferrer", defer("hold it")),
        ("denier", deny("never")),
    ];
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |mut b| {
            for i in order {
                let (name, verdict) = verdicts[i].clone();
                b = b.middleware(Hooks::new(name, &log).verdict(verdict).arc());
            }
            b
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "order {order:?}");
        assert_eq!(calls_of(&probe), 0, "order {order:?}");
        assert_eq!(
            tool_results(&run.messages)[0].1,
            "denied by denier: never",
            "order {order:?}"
        );
    }
    for order in [[0, 1], [1, 0]] {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |mut b| {
            for i in order {
                let (name, verdict) = verdicts[i].clone();
                b = b.middleware(Hooks::new(name, &log).verdict(verdict).arc());
            }
            b
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(run.status, RunStatus::AwaitingApproval, "order {order:?}");
        assert_eq!(run.pending()[0].reason, "hold it");
        assert_eq!(calls_of(&probe), 0);
    }
}

/// Verdicts combine across the gate too: a gate's denial beats a
/// middleware's deferral, and a middleware's deferral stands when the gate
/// allows.
#[tokio::test]
async fn a_gate_denial_beats_a_middleware_deferral_and_a_gate_allow_keeps_it() {
    for (mode, awaiting) in [(GateMode::Deny, false), (GateMode::Allow, true)] {
        let log = Arc::new(Log::default());
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let harness = build(&model, &[probe.clone()], |b| {
            b.middleware(Hooks::new("deferrer", &log).verdict(defer("hold it")).arc())
                .security_gate(Gate::new("write", mode))
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(calls_of(&probe), 0);
        if awaiting {
            assert_eq!(run.status, RunStatus::AwaitingApproval);
        } else {
            assert_eq!(run.status, RunStatus::Completed);
            assert_eq!(
                tool_results(&run.messages)[0].1,
                "denied by security gate: not on weekends"
            );
        }
    }
}

/// The gate is asked about each admitted model-issued call with its id, the
/// tool's spec, the prepared arguments, the agent, and is_nested() false.
#[tokio::test]
async fn the_gate_sees_each_call_with_its_id_spec_arguments_and_agent() {
    let gate = Gate::new("none", GateMode::Allow);
    let read = read_tool("read");
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("read", "b")]),
        done(),
    ]);
    let harness = build(&model, &[read], |b| {
        b.security_gate(gate.clone())
            .agent_id(tinyagents::AgentId::new("ops"))
    });
    harness.run("go").await.unwrap();
    assert_eq!(
        gate.asked.entries(),
        [
            r#"p1 read nested=false agent=ops args={"tag":"a"}"#,
            r#"p2 read nested=false agent=ops args={"tag":"b"}"#,
            "screen done",
        ]
    );
}

// ---------------------------------------------------------------------------
// Wraps and parallel execution
// ---------------------------------------------------------------------------

/// A concurrency-safe wrap does not serialise parallel calls: 100
/// concurrency-safe calls of one turn all meet at a barrier of 100 inside
/// the tool (a timeout turns a regression into a failure), and the wrap
/// itself holds all 100 at once.
#[tokio::test(start_paused = true)]
async fn a_wrap_lets_100_concurrency_safe_calls_overlap() {
    const N: usize = 100;
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let probe = ProbeTool::new("meet", true, Behaviour::Barrier(barrier));
    let calls: Vec<_> = (0..N).map(|i| probe_call("meet", &i.to_string())).collect();
    let model = script(vec![turn(&calls), done()]);
    let layer = Arc::new(Layer::new("counting"));
    let limits = RunLimits::default()
        .with_max_parallel_calls(N as u32)
        .with_tool_timeout(Some(Duration::from_secs(5)));
    let harness = build(&model, &[probe.clone()], |b| {
        b.limits(limits).tool_middleware(layer.clone())
    });
    let run = harness.run("go").await.unwrap();
    let results = tool_results(&run.messages);
    assert_eq!(results.len(), N);
    assert!(
        results.iter().all(|(_, c, e)| c.starts_with("met ") && !e),
        "{:?}",
        results.iter().find(|r| r.2)
    );
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        N,
        "every call ran at once"
    );
    assert_eq!(
        layer.max_active.load(Ordering::SeqCst),
        N,
        "the wrap held every call at once"
    );
    assert_eq!(layer.seen.load(Ordering::SeqCst), N);
}

/// A wrap whose concurrent_safe() is false makes concurrency-safe calls run
/// one at a time, in call order.
#[tokio::test(start_paused = true)]
async fn an_exclusive_wrap_makes_concurrency_safe_calls_run_one_at_a_time() {
    const N: usize = 100;
    let probe = ProbeTool::new("read", true, Behaviour::Yield(3));
    let calls: Vec<_> = (0..N).map(|i| probe_call("read", &i.to_string())).collect();
    let model = script(vec![turn(&calls), done()]);
    let layer = Arc::new(Layer::new("exclusive").exclusive());
    let limits = RunLimits::default().with_max_parallel_calls(N as u32);
    let harness = build(&model, &[probe.clone()], |b| {
        b.limits(limits).tool_middleware(layer.clone())
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(tool_results(&run.messages).len(), N);
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 1);
    assert_eq!(layer.max_active.load(Ordering::SeqCst), 1);
    let expected: Vec<String> = (0..N)
        .flat_map(|i| [format!("start {i}"), format!("end {i}")])
        .collect();
    assert_eq!(probe.order.entries(), expected);
}

/// RetryWrap: a replay-safe tool that fails once is retried and succeeds;
/// the host sees one start and one completion.
#[tokio::test(start_paused = true)]
async fn retry_wrap_retries_a_replay_safe_tool_that_fails_once() {
    let tool = StepTool::new(
        plain_spec("lookup").replay(ToolReplay::Safe),
        vec![Step::Fail, Step::Ok],
    );
    let model = script(vec![call("lookup", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(3)))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("lookup".into(), "ok".into(), false)]
    );
    assert_eq!(tool.attempts(), [0, 1]);
    assert_one_terminal_per_start(&events);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::ToolCompleted {
            is_error: false,
            ..
        }
    )));
}

/// RetryWrap: a `ToolReplay::Never` tool that fails is not retried; its
/// failure goes to the model.
#[tokio::test(start_paused = true)]
async fn retry_wrap_does_not_retry_a_tool_that_must_not_replay() {
    let tool = StepTool::new(
        plain_spec("pay").replay(ToolReplay::Never),
        vec![Step::Fail, Step::Ok],
    );
    let model = script(vec![call("pay", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(3)))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("pay".into(), "flaky backend".into(), true)]
    );
    assert_eq!(tool.attempts(), [0]);
}

/// RetryWrap registered outside TimeoutWrap retries a replay-safe call that
/// timed out.
#[tokio::test(start_paused = true)]
async fn retry_wrap_outside_timeout_wrap_retries_a_timeout() {
    let tool = StepTool::new(
        plain_spec("lookup").replay(ToolReplay::Safe),
        vec![Step::Sleep(Duration::from_secs(30)), Step::Ok],
    );
    let model = script(vec![call("lookup", "a"), done()]);
    let harness = build(&model, &[tool.clone()], |b| {
        b.tool_middleware(Arc::new(RetryWrap::new(2)))
            .tool_middleware(Arc::new(TimeoutWrap::new(Duration::from_secs(1))))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("lookup".into(), "ok".into(), false)]
    );
    assert_eq!(tool.attempts(), [0, 1]);
}

/// TimeoutWrap: a call slower than its bound fails with a timeout result the
/// model reads, and the run goes on.
#[tokio::test(start_paused = true)]
async fn timeout_wrap_fails_a_slow_call_and_the_run_goes_on() {
    let slow = ProbeTool::new("slow", false, Behaviour::Sleep(Duration::from_secs(60)));
    let model = script(vec![call("slow", "a"), done()]);
    let harness = build(&model, &[slow], |b| {
        b.tool_middleware(Arc::new(TimeoutWrap::new(Duration::from_secs(1))))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        read_by_model(&model),
        vec![("slow".into(), "'slow' timed out after 1000 ms".into(), true)]
    );
    assert!(events.iter().any(|e| matches!(e, AgentEvent::ToolFailed { error, .. } if error == "'slow' timed out after 1000 ms")));
    assert_one_terminal_per_start(&events);
}

/// TimeoutWrap: a per-tool bound overrides the default, a fast call passes,
/// and each tool is told its bound in `ToolCallOptions::timeout`.
#[tokio::test(start_paused = true)]
async fn timeout_wrap_per_tool_bounds_override_the_default_and_reach_the_tool() {
    let quick = StepTool::new(
        plain_spec("quick"),
        vec![Step::Sleep(Duration::from_millis(500))],
    );
    let other = StepTool::new(
        plain_spec("other"),
        vec![Step::Sleep(Duration::from_secs(2))],
    );
    let model = script(vec![
        turn(&[probe_call("quick", "a"), probe_call("other", "b")]),
        done(),
    ]);
    let wrap = TimeoutWrap::new(Duration::from_secs(5)).with_tool("quick", Duration::from_secs(1));
    let harness = build(&model, &[quick.clone(), other.clone()], |b| {
        b.tool_middleware(Arc::new(wrap))
    });
    let run = harness.run("go").await.unwrap();
    assert!(
        tool_results(&run.messages)
            .iter()
            .all(|(_, c, e)| c == "ok" && !e)
    );
    assert_eq!(quick.timeouts(), [Some(Duration::from_secs(1))]);
    assert_eq!(other.timeouts(), [Some(Duration::from_secs(5))]);
}

// ---------------------------------------------------------------------------
// Fail closed
// ---------------------------------------------------------------------------

/// Fail closed: an Err from before_tool refuses the call with a message
/// naming the middleware; the tool never runs, the model reads why.
#[tokio::test]
async fn an_error_in_before_tool_refuses_the_call() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("audit", &log).failing(Hook::BeforeTool).arc())
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&probe), 0);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "write".into(),
            "denied by audit: state error: audit's store is offline".into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// Fail closed: an Err from after_tool withholds the result (the tool ran,
/// but the model reads a refusal naming the middleware, never the result)
/// and the call's terminal event is a failure.
#[tokio::test]
async fn an_error_in_after_tool_withholds_the_result() {
    let log = Arc::new(Log::default());
    let probe = ProbeTool::new(
        "read",
        true,
        Behaviour::Return(ToolResult::text("the confidential figures")),
    );
    let model = script(vec![call("read", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("dlp", &log).failing(Hook::AfterTool).arc())
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(calls_of(&probe), 1);
    assert_eq!(
        read_by_model(&model),
        vec![(
            "read".into(),
            "result withheld: denied by dlp: state error: dlp's store is offline".into(),
            true
        )]
    );
    assert!(!format!("{:?}", run.messages).contains("confidential"));
    assert!(!events_text(&events).contains("confidential"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolFailed { .. }))
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolCompleted { .. }))
    );
}

/// Fail closed: an Err from before_model ends the run with `Denied` naming
/// the middleware; the model is never called.
#[tokio::test]
async fn an_error_in_before_model_ends_the_run_denied() {
    let log = Arc::new(Log::default());
    let model = script(vec![done()]);
    let harness = build(&model, &[], |b| {
        b.middleware(Hooks::new("budget", &log).failing(Hook::BeforeModel).arc())
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "budget".into(),
            reason: "state error: budget's store is offline".into()
        }
    );
    assert_eq!(model.calls(), 0);
}

/// Fail closed: an Err from after_model ends the run with `Denied` naming
/// the middleware; the response's tool calls never run.
#[tokio::test]
async fn an_error_in_after_model_ends_the_run_denied() {
    let log = Arc::new(Log::default());
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.middleware(Hooks::new("guard", &log).failing(Hook::AfterModel).arc())
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "guard".into(),
            reason: "state error: guard's store is offline".into()
        }
    );
    assert_eq!(calls_of(&probe), 0);
}

/// Fail closed: a gate that returns an error refuses the call, saying so.
#[tokio::test]
async fn a_gate_that_errors_refuses_the_call() {
    let probe = write_tool("write");
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| {
        b.security_gate(Gate::new("write", GateMode::Fail))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(calls_of(&probe), 0);
    assert_eq!(
        tool_results(&run.unwrap().messages),
        vec![(
            "write".into(),
            "denied by security gate: the gate failed: state error: policy store unreachable"
                .into(),
            true
        )]
    );
    assert_one_terminal_per_start(&events);
}

/// Fail closed: a gate that panics refuses the call; the run goes on.
#[tokio::test]
async fn a_gate_that_panics_refuses_the_call() {
    let probe = write_tool("write");
    let read = read_tool("read");
    let model = script(vec![
        turn(&[probe_call("write", "a"), probe_call("read", "b")]),
        done(),
    ]);
    let harness = build(&model, &[probe.clone(), read.clone()], |b| {
        b.security_gate(Gate::new("write", GateMode::Panic))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&probe), calls_of(&read)), (0, 1));
    assert_eq!(
        tool_results(&run.messages),
        vec![
            (
                "write".into(),
                "denied by security gate: the gate panicked".into(),
                true
            ),
            ("read".into(), "ok b".into(), false),
        ]
    );
}

/// A gate that says Ask defers a model-issued call; approved on resume, the
/// gate is asked again, sees the approval, and the call runs once.
#[tokio::test]
async fn a_gate_that_asks_defers_the_call_until_approved() {
    let probe = write_tool("write");
    let gate = Gate::new("write", GateMode::Ask);
    let model = script(vec![call("write", "a"), done()]);
    let harness = build(&model, &[probe.clone()], |b| b.security_gate(gate.clone()));
    let run = harness.run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(
        suspended.pending().next().unwrap().reason,
        "ask the on-call engineer"
    );
    assert_eq!(calls_of(&probe), 0);
    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&probe), 1);
    let asked = gate
        .asked
        .entries()
        .iter()
        .filter(|e| e.starts_with("p1 write"))
        .count();
    assert_eq!(asked, 2, "asked at admission and again on resume");
}

/// Fail closed: output screening that errors blocks the final answer; the
/// run ends with `Denied`.
#[tokio::test]
async fn output_screening_that_errors_blocks_the_answer() {
    let model = script(vec![ChatResponse::text("the answer")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Fail))
    });
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "screening failed, output blocked: state error: screening service down".into()
        }
    );
}

/// Output screening that blocks ends the run with `Denied` and its reason.
#[tokio::test]
async fn output_screening_that_blocks_ends_the_run_denied() {
    let model = script(vec![ChatResponse::text("Alice Smith owes 300 EUR")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Block))
    });
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(
        run.unwrap_err(),
        TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "the answer names a customer".into()
        }
    );
    assert!(!events.iter().any(|e| matches!(
        e,
        AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            ..
        }
    )));
}

/// Output screening also screens an answer a tool returns directly.
#[tokio::test]
async fn output_screening_blocks_a_return_direct_answer() {
    let direct = ProbeTool::new(
        "direct",
        false,
        Behaviour::Return(ToolResult::text("Alice Smith").with_control(ToolControl::ReturnDirect)),
    );
    let model = script(vec![call("direct", ""), done()]);
    let harness = build(&model, &[direct], |b| {
        b.security_gate(Gate::screening(Screen::Block))
    });
    assert!(matches!(
        harness.run("go").await,
        Err(TinyAgentsError::Denied { .. })
    ));
}

/// Output screening may rewrite the answer: the run delivers the rewrite,
/// and the transcript holds it instead of the original.
#[tokio::test]
async fn output_screening_may_rewrite_the_answer() {
    let model = script(vec![ChatResponse::text("Alice Smith owes 300 EUR")]);
    let harness = build(&model, &[], |b| {
        b.security_gate(Gate::screening(Screen::Rewrite(
            "[a customer] owes 300 EUR",
        )))
    });
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "[a customer] owes 300 EUR");
    assert!(!format!("{:?}", run.messages).contains("Alice"));
}

/// Fail closed: a wrap layer may refuse a call (the tool never runs), and a
/// wrap layer that panics fails only that call.
#[tokio::test]
async fn a_wrap_that_refuses_or_panics_fails_the_call_closed() {
    for panic in [false, true] {
        let probe = write_tool("write");
        let model = script(vec![call("write", "a"), done()]);
        let mut layer = Layer::new("screen");
        layer.refuse = !panic;
        layer.panic = panic;
        let harness = build(&model, &[probe.clone()], |b| {
            b.tool_middleware(Arc::new(layer))
        });
        let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
        let run = run.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(calls_of(&probe), 0);
        let (_, content, is_error) = &tool_results(&run.messages)[0];
        assert!(is_error);
        if panic {
            assert!(content.contains("panicked"), "{content}");
        } else {
            assert_eq!(content, "denied by screen: no write");
        }
        assert_one_terminal_per_start(&events);
    }
}

// ---------------------------------------------------------------------------
// Deferral and resume
// ---------------------------------------------------------------------------

/// The tools of the mixed turn: two reads, a flagged deploy, and a write the
/// allowlist refuses.
fn mixed_tools() -> (Arc<ProbeTool>, Arc<ProbeTool>, Arc<ProbeTool>) {
    (read_tool("read"), deploy_tool(), write_tool("write"))
}

fn mixed_harness(
    model: &Arc<ScriptedModel>,
    read: &Arc<ProbeTool>,
    deploy: &Arc<ProbeTool>,
    write: &Arc<ProbeTool>,
) -> AgentHarness {
    build(model, &[read.clone(), deploy.clone(), write.clone()], |b| {
        b.middleware(Arc::new(HumanApprovalMiddleware::new()))
            .middleware(Arc::new(ToolAllowlistMiddleware::new(["read", "deploy"])))
    })
}

fn mixed_turn() -> ChatResponse {
    turn(&[
        probe_call("read", "a"),
        probe_call("deploy", "prod"),
        probe_call("write", "w"),
        probe_call("read", "b"),
    ])
}

/// Deferral: in a turn where one call needs approval, the calls that need
/// none run and settle (including a refusal), then the run ends `Ok` as
/// awaiting approval, holding its pending call and its turn in call order.
#[tokio::test]
async fn a_deferred_call_suspends_the_run_after_the_rest_of_its_turn_settles() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    assert_eq!(
        (calls_of(&read), calls_of(&deploy), calls_of(&write)),
        (2, 0, 0)
    );
    assert_eq!(
        model.calls(),
        1,
        "the model is not asked again while a call waits"
    );
    let suspended = run.suspended.as_ref().unwrap();
    assert_eq!(suspended.format, tinyagents::SUSPENDED_RUN_FORMAT);
    let shape: Vec<String> = suspended
        .turn
        .iter()
        .map(|entry| match entry {
            TurnEntry::Settled {
                message: Message::Tool {
                    call_id, content, ..
                },
            } => format!("{call_id} settled: {content}"),
            TurnEntry::Settled { message } => panic!("unexpected {message:?}"),
            TurnEntry::Pending { pending } => {
                format!("{} pending: {}", pending.call.id, pending.reason)
            }
        })
        .collect();
    assert_eq!(
        shape,
        [
            "p1 settled: ok a",
            "p2 pending: tool 'deploy' requires a person's approval",
            "p3 settled: denied by tool_allowlist: tool 'write' is not allowed here; allowed tools: deploy, read",
            "p4 settled: ok b",
        ]
    );
    assert_eq!(run.pending().len(), 1);
    assert_eq!(
        suspended.budget.tool_calls, 4,
        "every issued call spent its slot"
    );
    // The settled calls' events are complete; the pending call has none yet.
    assert_one_terminal_per_start(&events);
    assert!(
        !events
            .iter()
            .any(|e| e.call_id().is_some_and(|id| id.as_str() == "p2"))
    );
    assert!(matches!(
        events.last(),
        Some(AgentEvent::RunCompleted {
            status: RunStatus::AwaitingApproval,
            ..
        })
    ));
}

/// Resume after JSON: the suspended state is written to JSON and read back
/// (a restart), a fresh harness resumes it with an approval, the approved
/// call runs exactly once, the settled calls do not run again, the budget
/// carries over and the transcript pairs every call in call order.
#[tokio::test]
async fn resume_after_json_runs_the_approved_call_exactly_once() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let run = mixed_harness(&model, &read, &deploy, &write)
        .run("go")
        .await
        .unwrap();
    let suspended = through_json(&run);
    let decisions = approve_all(&suspended);

    let restarted = mixed_harness(&model, &read, &deploy, &write);
    let (run, events) = resume_collecting(&restarted, suspended, &decisions).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert_eq!(
        (calls_of(&read), calls_of(&deploy), calls_of(&write)),
        (2, 1, 0)
    );
    assert_eq!(
        run.budget.tool_calls, 4,
        "the approved call spent no second slot"
    );
    assert_eq!(run.budget.model_calls, 2);
    assert_transcript_paired(&run.messages);
    let contents: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    assert_eq!(contents[0], "ok a");
    assert_eq!(contents[1], "ok prod");
    assert!(contents[2].starts_with("denied by tool_allowlist"));
    assert_eq!(contents[3], "ok b");
    assert_eq!(
        read_by_model(&model),
        tool_results(&run.messages),
        "the model read every result"
    );
    assert_one_terminal_per_start(&events);
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["p2"], "only the approved call runs on resume");
}

/// Resume: a denied call gets a refusal result the model reads, with the
/// person's reason; it never runs.
#[tokio::test]
async fn resume_with_a_denial_gives_the_call_a_refusal_result() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions: Vec<_> = suspended
        .pending()
        .map(|p| p.deny("not during the freeze"))
        .collect();
    let (run, events) = resume_collecting(&harness, suspended, &decisions).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        read_by_model(&model)[1],
        (
            "deploy".into(),
            "denied by a person: not during the freeze".into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
    assert_one_terminal_per_start(&events);
}

/// Resume: an approval binds to the call's arguments. When the stored
/// pending call's arguments were changed after the approval was made, the
/// call is refused, not run.
#[tokio::test]
async fn an_approval_does_not_apply_to_a_pending_call_whose_arguments_changed() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let mut suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    for entry in &mut suspended.turn {
        if let TurnEntry::Pending { pending } = entry {
            pending.call.arguments = json!({"tag": "prod --force"});
        }
    }
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(calls_of(&deploy), 0);
    assert_eq!(
        tool_results(&run.messages)[1],
        (
            "deploy".into(),
            "refused: the approval does not match this call's arguments, so it was not run".into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
}

/// Resume: an approval built from a different call (same id, other
/// arguments) does not approve the pending call; it is refused, not run.
#[tokio::test]
async fn an_approval_built_from_a_different_call_does_not_apply() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let mut other = suspended.pending().next().unwrap().clone();
    other.call.arguments = json!({"tag": "staging"});
    let decisions = [other.approve()];
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(calls_of(&deploy), 0);
    assert!(
        tool_results(&run.messages)[1]
            .1
            .starts_with("refused: the approval does not match")
    );
}

/// Resume: a resume missing a decision for a pending call is an error, runs
/// nothing and emits only its `RunFailed`; the same state resumed again with the decision
/// completes (nothing was lost).
#[tokio::test]
async fn a_resume_missing_a_decision_is_an_error_that_loses_nothing() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let run = harness.run("go").await.unwrap();
    let stored = serde_json::to_string(run.suspended.as_ref().unwrap()).unwrap();

    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let (result, events) = resume_collecting(&harness, suspended, &[]).await;
    assert_eq!(
        result.unwrap_err(),
        TinyAgentsError::State(
            "no decision for pending call p2 (deploy); every pending call needs one".into()
        )
    );
    assert_eq!(
        events,
        [AgentEvent::RunFailed {
            error: "state error: no decision for pending call p2 (deploy); every pending call needs one".into()
        }]
    );
    assert_eq!((calls_of(&read), calls_of(&deploy)), (2, 0));
    assert_eq!(model.calls(), 1);

    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!((calls_of(&read), calls_of(&deploy)), (2, 1));
}

/// Resume: a state of another format is refused with a clear error, and
/// nothing runs.
#[tokio::test]
async fn a_suspended_state_of_another_format_is_refused() {
    let (read, deploy, write) = mixed_tools();
    let model = script(vec![mixed_turn(), done()]);
    let harness = mixed_harness(&model, &read, &deploy, &write);
    let run = harness.run("go").await.unwrap();
    let mut stored: Value = serde_json::to_value(run.suspended.as_ref().unwrap()).unwrap();
    stored["format"] = json!(tinyagents::SUSPENDED_RUN_FORMAT + 1);
    let suspended: SuspendedRun = serde_json::from_value(stored).unwrap();
    let decisions = approve_all(&suspended);
    let error = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        TinyAgentsError::State(format!(
            "suspended run {} has format {}, this version reads format {}",
            run.run_id,
            tinyagents::SUSPENDED_RUN_FORMAT + 1,
            tinyagents::SUSPENDED_RUN_FORMAT
        ))
    );
    assert_eq!(calls_of(&deploy), 0);
}

/// Resume: waiting for a person does not spend the wall-clock budget. With
/// a 10-minute budget, a run that was active 4 minutes waits an hour
/// (paused time), is resumed after JSON, runs 4 more minutes and completes.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_person_does_not_spend_the_wall_clock_budget() {
    let read = ProbeTool::new("read", true, Behaviour::Sleep(Duration::from_secs(240)))
        .with_spec(ToolSpec::read_only);
    let deploy = ProbeTool::new("deploy", false, Behaviour::Sleep(Duration::from_secs(240)))
        .with_spec(ToolSpec::approval_required);
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let limits = RunLimits::default()
        .with_wall_clock(Some(Duration::from_secs(600)))
        .with_tool_timeout(None);
    let tools: [Arc<dyn Tool>; 2] = [read.clone(), deploy.clone()];
    let configure = |b: AgentHarnessBuilder| {
        b.limits(limits.clone())
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    };
    let run = build(&model, &tools, configure).run("go").await.unwrap();
    let suspended = through_json(&run);
    assert_eq!(suspended.active_ms, 240_000);

    tokio::time::advance(Duration::from_secs(3600)).await;

    let decisions = approve_all(&suspended);
    let run = build(&model, &tools, configure)
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        tool_results(&run.messages)[1],
        ("deploy".into(), "slept prod".into(), false)
    );
    assert_eq!(calls_of(&deploy), 1);
}

/// Resume: the active time before the suspension still counts. With a
/// 10-minute budget, 6 minutes active before and a 6-minute call after,
/// the call is cut at the 4 minutes left and the run reaches its limit.
#[tokio::test(start_paused = true)]
async fn active_time_before_the_suspension_still_counts_after_resume() {
    let read = ProbeTool::new("read", true, Behaviour::Sleep(Duration::from_secs(360)))
        .with_spec(ToolSpec::read_only);
    let deploy = ProbeTool::new("deploy", false, Behaviour::Sleep(Duration::from_secs(360)))
        .with_spec(ToolSpec::approval_required);
    let model = script(vec![
        turn(&[probe_call("read", "a"), probe_call("deploy", "prod")]),
        done(),
    ]);
    let limits = RunLimits::default()
        .with_wall_clock(Some(Duration::from_secs(600)))
        .with_tool_timeout(None)
        .with_behavior(LimitBehavior::Stop);
    let harness = build(&model, &[read.clone(), deploy.clone()], |b| {
        b.limits(limits)
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    tokio::time::advance(Duration::from_secs(3600)).await;
    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::WallClock));
    assert_eq!(
        tool_results(&run.messages)[1],
        (
            "deploy".into(),
            "'deploy' timed out after 240000 ms".into(),
            true
        )
    );
    assert_transcript_paired(&run.messages);
}

/// Resume: a resumed run that meets another flagged call suspends again;
/// call ids keep counting across the segments, and the second approval
/// completes the run.
#[tokio::test]
async fn a_resumed_run_may_suspend_again_and_ids_keep_counting() {
    let deploy = deploy_tool();
    let model = script(vec![call("deploy", "one"), call("deploy", "two"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| {
        b.middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let first = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&first);
    let run = harness
        .resume(first, &decisions, Default::default(), &EventSink::none())
        .await
        .unwrap();
    let second = through_json(&run);
    assert_eq!(
        second
            .pending()
            .map(|p| p.call.id.to_string())
            .collect::<Vec<_>>(),
        ["p2"]
    );
    let decisions = approve_all(&second);
    let run = harness
        .resume(second, &decisions, Default::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls_of(&deploy), 2);
    assert_eq!(
        tool_results(&run.messages),
        vec![
            ("deploy".into(), "ok one".into(), false),
            ("deploy".into(), "ok two".into(), false)
        ]
    );
}

/// Resume: the approved call is re-admitted through before_tool, but a
/// stateful policy must not count it twice: RepeatProgress (K = 2) lets the
/// single approved deploy run.
#[tokio::test]
async fn an_approved_call_is_not_counted_twice_by_repeat_progress() {
    let deploy = deploy_tool();
    let model = script(vec![call("deploy", "prod"), done()]);
    let harness = build(&model, &[deploy.clone()], |b| {
        b.middleware(Arc::new(RepeatProgressMiddleware::new(2)))
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    let run = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(
        tool_results(&run.messages),
        vec![("deploy".into(), "ok prod".into(), false)]
    );
    assert_eq!(calls_of(&deploy), 1);
}

/// Resume: output screening also applies when the resumed segment ends the
/// run (an approved tool that returns its answer directly), not only when a
/// run ends without a suspension.
#[tokio::test]
async fn output_screening_applies_to_a_run_that_ends_after_resume() {
    let direct = ProbeTool::new(
        "direct",
        false,
        Behaviour::Return(ToolResult::text("Alice Smith").with_control(ToolControl::ReturnDirect)),
    )
    .with_spec(ToolSpec::approval_required);
    let model = script(vec![call("direct", ""), done()]);
    let gate = Arc::new(Gate {
        target: "",
        mode: GateMode::Allow,
        screen: Screen::Block,
        asked: Log::default(),
    });
    let harness = build(&model, &[direct], |b| {
        b.security_gate(gate)
            .middleware(Arc::new(HumanApprovalMiddleware::new()))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    let result = harness
        .resume(
            suspended,
            &decisions,
            Default::default(),
            &EventSink::none(),
        )
        .await;
    assert_eq!(
        result.map(|run| run.final_text),
        Err(TinyAgentsError::Denied {
            by: "security gate (output screening)".into(),
            reason: "the answer names a customer".into()
        })
    );
}

// ---------------------------------------------------------------------------
// Redaction
// ---------------------------------------------------------------------------

const SECRET: &str = "sk-live-9fQ2xT7bLm4Zr8Kc1Vw6Yh3Jd5Np0Gs";

/// A tool that echoes its `api_key` argument back inside its result, with
/// a second key of its own, and logs the key it received.
fn leaky_tool(received: &Arc<Log>) -> impl Tool + use<> {
    let received = Arc::clone(received);
    FnTool::new("configure", "Configures the client.", move |args: serde_json::Map<String, Value>| {
        let received = Arc::clone(&received);
        async move {
            let key = args.get("api_key").and_then(Value::as_str).unwrap_or("").to_owned();
            received.push(key.clone());
            anyhow::Ok(format!("configured with {key}; backup sk-live-BackupKey0123456789abcdef"))
        }
    })
    .map_spec(|s| {
        ToolSpec::new(
            s.name,
            s.description,
            json!({"type": "object", "properties": {"api_key": {"type": "string"}, "region": {"type": "string"}}}),
        )
    })
}

fn secret_harness(model: &Arc<ScriptedModel>, received: &Arc<Log>) -> AgentHarness {
    AgentHarness::builder(model.clone())
        .payload_capture(PayloadCapture::all())
        .middleware(Arc::new(RedactionMiddleware::new()))
        .tool(leaky_tool(received))
        .unwrap()
        .build()
        .unwrap()
}

/// Redaction: with `PayloadCapture::all()` and RedactionMiddleware, a key
/// planted in a call's arguments and in its result appears in no event
/// (every event serialised with serde_json and searched), while the tool
/// itself received the real key.
#[tokio::test]
async fn a_planted_secret_never_appears_in_any_event() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"api_key": SECRET, "region": "eu"})),
        ScriptedModel::tool_call("configure", json!({"region": format!("eu {SECRET}")})),
        done(),
    ]);
    let received = Arc::new(Log::default());
    let (run, events) =
        run_collecting(&secret_harness(&model, &received), RunRequest::new("go")).await;
    run.unwrap();
    let text = events_text(&events);
    assert!(!text.contains(SECRET), "{text}");
    assert!(!text.contains("sk-live-"), "{text}");
    assert!(
        text.contains("[REDACTED]"),
        "the payloads were captured, scrubbed: {text}"
    );
    assert!(
        text.contains("\"region\":\"eu\""),
        "what is not secret stays: {text}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(
                e,
                AgentEvent::ToolCompleted {
                    result: Some(_),
                    ..
                }
            ))
            .count(),
        2
    );
    // The tool got the real key (redaction never changes what a tool receives).
    assert_eq!(received.entries(), [SECRET, ""]);
}

/// Redaction: a key planted in a result never reaches the transcript or
/// what the model reads.
#[tokio::test]
async fn a_secret_in_a_tool_result_never_reaches_the_transcript() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"region": "eu"})),
        done(),
    ]);
    let run = secret_harness(&model, &Arc::default())
        .run("go")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&run.messages).unwrap();
    assert!(!transcript.contains("sk-live-"), "{transcript}");
    assert_eq!(
        read_by_model(&model)[0].1,
        "configured with ; backup [REDACTED]"
    );
}

/// Redaction: a key planted in a call's arguments never reaches the
/// transcript (the persisted conversation), in the assistant message that
/// issued the call as well as in the result.
#[tokio::test]
async fn a_secret_in_tool_arguments_never_reaches_the_transcript() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"api_key": SECRET, "region": "eu"})),
        done(),
    ]);
    let run = secret_harness(&model, &Arc::default())
        .run("go")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&run.messages).unwrap();
    assert!(!transcript.contains(SECRET), "{transcript}");
}

/// Redaction: a key inside arguments the harness refuses (not JSON, or
/// breaking the schema) appears in no event and not in the refusal the
/// transcript holds.
#[tokio::test]
async fn a_secret_in_refused_arguments_never_appears_in_events_or_the_transcript() {
    let model = script(vec![
        ChatResponse::tool_calls(vec![
            ModelToolCall::from_text(None, "configure", &format!("{{\"api_key\": \"{SECRET}\", ")),
            ModelToolCall::new(None, "configure", json!({"region": [SECRET]})),
        ]),
        done(),
    ]);
    let (run, events) = run_collecting(
        &secret_harness(&model, &Arc::default()),
        RunRequest::new("go"),
    )
    .await;
    let run = run.unwrap();
    assert!(
        tool_results(&run.messages).iter().all(|(_, _, e)| *e),
        "both calls were refused"
    );
    let text = events_text(&events);
    assert!(!text.contains(SECRET), "{text}");
    let transcript = serde_json::to_string(&tool_results(&run.messages)).unwrap();
    assert!(!transcript.contains(SECRET), "{transcript}");
}

/// Redaction fails closed: a host matcher that panics redacts the whole
/// result rather than letting it through; a literal the host adds is
/// redacted too.
#[tokio::test]
async fn redaction_with_a_panicking_matcher_redacts_everything_and_host_literals_are_found() {
    let boom: SecretMatcher = Arc::new(|_: &str| panic!("matcher bug"));
    for (redactor, expected) in [
        (Redactor::new().with_matcher(boom), "[REDACTED]"),
        (
            Redactor::new().with_secret("hunter2-corp"),
            "password is [REDACTED] today",
        ),
    ] {
        let probe = ProbeTool::new(
            "read",
            true,
            Behaviour::Return(ToolResult::text("password is hunter2-corp today")),
        );
        let model = script(vec![call("read", ""), done()]);
        let harness = build(&model, &[probe], |b| {
            b.middleware(Arc::new(RedactionMiddleware::with_redactor(redactor)))
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(tool_results(&run.messages)[0].1, expected);
    }
}
