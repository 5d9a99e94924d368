//! Issue 10: the call path's regression tests, through the facade only.
//!
//! Each test's name starts with the item it covers (`i10_<item>_...`) and
//! says what it checks. Where a bug applies to several origins of a call,
//! there is a test per origin: model-issued (`p1`), nested (`p1/1`, a tool
//! calling `call_tool`), nested-of-nested (`p1/1/1`) and delegated (an
//! agent exposed as a tool to a coordinator through the orchestrator).
//!
//! - `redaction`: items 1 (secrets in nested calls' events, also in a
//!   delegated agent's forwarded events) and 6 (nested results in the
//!   ledger);
//! - `approval`: item 2 (`approval_required`/`external` on the model path
//!   without an approval middleware; the nested refusal);
//! - `containment`: item 3 (a panic in any hook, gate, wrap or redaction
//!   is contained and refuses, naming who);
//! - `capture`: items 4 (argument values in events with capture off) and 5
//!   (a secret inside malformed arguments persisted verbatim);
//! - `quota`: item 7 (the nested refusal cap under a concurrent fan-out);
//! - `origins_prop`: the property that every built-in policy decides a
//!   call the same whatever its origin, but for the documented exceptions;
//! - `invalid_args`: an invalid-arguments error names its tool once, on
//!   every origin (rule NT-07).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod approval;
mod cancellation;
mod capture;
mod containment;
mod identity;
mod invalid_args;
mod kept_context;
mod lent;
mod origins_prop;
mod quota;
mod redaction;
mod spare_context;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    harness::AgentHarnessBuilder, ledger::EffectLedger, middleware::ToolVerdict,
    orchestrator::AgentBuildRequest, orchestrator::AgentDefinition,
    orchestrator::AgentOrchestrator, orchestrator::BuildError, orchestrator::HostTools,
    orchestrator::InMemorySessionStore, orchestrator::ModelFactory, orchestrator::SessionStore,
};

// ===========================================================================
// Decision types, kept in one place (a later rename is a one-line fix here)
// ===========================================================================

/// A gate's "let it run".
pub(crate) fn gate_allow() -> ToolVerdict {
    ToolVerdict::Allow
}

/// A gate's refusal.
pub(crate) fn gate_deny(reason: &str) -> ToolVerdict {
    ToolVerdict::Deny {
        reason: reason.to_owned(),
    }
}

/// A gate's question for a person.
pub(crate) fn gate_ask(reason: &str) -> ToolVerdict {
    ToolVerdict::Defer {
        reason: reason.to_owned(),
    }
}

/// A `before_tool`'s "let it run".
pub(crate) fn verdict_allow() -> ToolVerdict {
    ToolVerdict::Allow
}

/// What a policy decided about a model-issued call, in the tests' own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    Deny(String),
    Defer(String),
}

/// A `before_tool` verdict as a [`Decision`].
pub(crate) fn decision_of(verdict: ToolVerdict) -> Decision {
    match verdict {
        ToolVerdict::Allow => Decision::Allow,
        ToolVerdict::Deny { reason } => Decision::Deny(reason),
        ToolVerdict::Defer { reason } => Decision::Defer(reason),
    }
}

/// What a host gate answers, in the tests' own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateAnswer {
    Allow,
    Deny,
    Ask,
}

/// A [`GateAnswer`] as the gate's decision; `reason` for a denial or a
/// question.
pub(crate) fn gate_decision(answer: GateAnswer, reason: &str) -> ToolVerdict {
    match answer {
        GateAnswer::Allow => gate_allow(),
        GateAnswer::Deny => gate_deny(reason),
        GateAnswer::Ask => gate_ask(reason),
    }
}

// ===========================================================================
// Origins
// ===========================================================================

/// Where a call comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The model issued it (`p1`).
    Model,
    /// A model-issued `hop` called it (`p1/1`).
    Nested,
    /// A nested `hop` called it (`p1/1/1`).
    NestedOfNested,
}

impl Origin {
    pub(crate) const ALL: [Origin; 3] = [Origin::Model, Origin::Nested, Origin::NestedOfNested];

    /// How many `hop`s stand between the model and the call.
    pub(crate) fn hops(self) -> u64 {
        match self {
            Origin::Model => 0,
            Origin::Nested => 1,
            Origin::NestedOfNested => 2,
        }
    }

    /// The call's id when it is the `n`-th (1-based) call of the model's
    /// first turn.
    pub(crate) fn id_of(self, n: usize) -> String {
        let mut id = format!("p{n}");
        for _ in 0..self.hops() {
            id.push_str("/1");
        }
        id
    }

    /// The model-issued call that makes a call of `tool` with `args` from
    /// this origin.
    pub(crate) fn call(self, tool: &str, args: Value) -> (String, Value) {
        match self.hops() {
            0 => (tool.to_owned(), args),
            hops => (
                "hop".to_owned(),
                json!({"hops": hops, "tool": tool, "args": args}),
            ),
        }
    }
}

/// `hop`: the shared nested-call tool (`tinyagents_tests::hop`).
pub(crate) fn hop() -> Arc<dyn Tool> {
    tinyagents_tests::hop()
}

// ===========================================================================
// Tools with observable behaviour
// ===========================================================================

type Body = Arc<dyn Fn(&Value) -> anyhow::Result<ToolResult> + Send + Sync>;

/// A tool that counts its executions and answers with `body(arguments)`.
pub(crate) struct Counted {
    spec: ToolSpec,
    runs: AtomicUsize,
    body: Body,
}

impl Counted {
    /// How many times it ran.
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

pub(crate) fn counted(
    spec: ToolSpec,
    body: impl Fn(&Value) -> anyhow::Result<ToolResult> + Send + Sync + 'static,
) -> Arc<Counted> {
    Arc::new(Counted {
        spec,
        runs: AtomicUsize::new(0),
        body: Arc::new(body),
    })
}

/// A counted tool `name` accepting any object, answering `ran <name>`.
pub(crate) fn plain(name: &str) -> Arc<Counted> {
    let label = format!("ran {name}");
    counted(spec(name), move |_| Ok(ToolResult::text(label.clone())))
}

/// A spec accepting any object.
pub(crate) fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "A test tool.", json!({"type": "object"}))
}

#[async_trait]
impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        _context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        (self.body)(&args)
    }
}

/// Upcasts a tool for registration.
pub(crate) fn t<T: Tool>(tool: &Arc<T>) -> Arc<dyn Tool> {
    Arc::clone(tool) as Arc<dyn Tool>
}

/// `add(a, b)` with a typed schema (`a` and `b` integers, both required).
pub(crate) fn add() -> Arc<dyn Tool> {
    Arc::new(tinyagents_tests::add_tool())
}

// ===========================================================================
// Harnesses and runs
// ===========================================================================

/// A model that issues `calls` in one turn, then answers `done`.
pub(crate) fn one_turn(calls: &[(String, Value)]) -> Vec<ChatResponse> {
    vec![tinyagents_tests::turn(calls), ChatResponse::text("done")]
}

/// A harness with nesting on (3 levels), `tools` and `hop`, configured by
/// `configure`.
pub(crate) fn harness(
    responses: Vec<ChatResponse>,
    tools: Vec<Arc<dyn Tool>>,
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> AgentHarness {
    let model = Arc::new(ScriptedModel::new(responses));
    let mut builder =
        AgentHarness::builder(model).limits(RunLimits::default().with_max_nested_depth(3));
    builder.register(hop()).unwrap();
    for tool in tools {
        builder.register(tool).unwrap();
    }
    configure(builder).build().unwrap()
}

/// Runs `harness` on "go" in the test's own task (a panic inside the run
/// reaches the test), collecting its events.
pub(crate) async fn run(
    harness: &AgentHarness,
) -> (Result<AgentRun, TinyAgentsError>, Vec<AgentEvent>) {
    tinyagents_tests::run_collecting(harness, RunRequest::new("go")).await
}

/// The error of the `ToolFailed` of `id`, if it failed.
pub(crate) fn failed_error(events: &[AgentEvent], id: &str) -> Option<String> {
    tinyagents_tests::call_failure(events, id)
}

/// The transcript's answer to the model-issued call `id`: (content, is_error).
pub(crate) fn answer(run: &AgentRun, id: &str) -> Option<(String, bool)> {
    tinyagents_tests::call_answer(&run.messages, id)
}

/// Asserts that the stream ends with exactly one run-terminal event
/// (`RunCompleted` or `RunFailed`) and has no other.
pub(crate) fn assert_one_run_end(events: &[AgentEvent]) {
    let ends: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            matches!(
                e,
                AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. }
            )
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ends.len(), 1, "one run-terminal event: {events:#?}");
    assert_eq!(
        ends[0],
        events.len() - 1,
        "the run-terminal event is the last: {events:#?}"
    );
}

// ===========================================================================
// Delegation: a coordinator calling an agent exposed as a tool
// ===========================================================================

/// A coordinator (`root`) whose model calls the exposed agent `helper`
/// (function `Helper`) once and then answers `done`; `helper` is built with
/// `helper_model`, may call `helper_tools` (and `hop`), and every built
/// agent gets `middleware` (the host's run middleware). Detailed tool
/// errors are on, so a raised error's text reaches the events.
pub(crate) async fn coordinator(
    helper_model: Vec<ChatResponse>,
    helper_tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    ledger: Option<Arc<dyn EffectLedger>>,
) -> tinyagents::orchestrator::ActiveAgent {
    let mut names: Vec<String> = helper_tools.iter().map(|t| t.spec().name.clone()).collect();
    names.push("hop".to_owned());
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        AgentDefinition::new("helper", "Helper")
            .description("Helps.")
            .tools(names)
            .exposed(),
    ];
    let root_model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("Helper", json!({"query": "go"})),
        ChatResponse::text("done"),
    ]));
    let helper_model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new(helper_model));
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            Ok(if d.id.as_str() == "helper" {
                Arc::clone(&helper_model)
            } else {
                Arc::clone(&root_model)
            })
        },
    );
    let mut tools = HostTools::new().with_shared(hop());
    for tool in helper_tools {
        tools = tools.with_shared(tool);
    }
    let mut orchestrator =
        AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()) as Arc<dyn SessionStore>)
            .limits(
                RunLimits::default()
                    .with_max_model_calls(40)
                    .with_max_nested_depth(3),
            )
            .include_detailed_errors(true);
    if let Some(ledger) = ledger {
        orchestrator = orchestrator.ledger(ledger);
    }
    let mut request =
        AgentBuildRequest::new("root", defs.into_iter().map(Arc::new), models).tools(tools);
    for layer in middleware {
        request = request.run_middleware(layer);
    }
    orchestrator.get_or_create_agent(request).await.unwrap()
}

/// Runs the coordinator on `request` in the test's own task, collecting
/// its events.
pub(crate) async fn run_coordinator(
    root: &tinyagents::orchestrator::ActiveAgent,
    request: RunRequest,
) -> (
    Result<AgentRun, tinyagents::orchestrator::RunError>,
    Vec<AgentEvent>,
) {
    let (sink, collected) = tinyagents_tests::collector();
    let result = root.run(request, &sink).await;
    drop(sink);
    (result, collected.await.unwrap())
}

/// The delegated agent's own events, unwrapped from their `Delegated`
/// envelopes (one level: the helper's events).
pub(crate) fn delegated_events(events: &[AgentEvent]) -> Vec<AgentEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delegated { event, .. } => Some((**event).clone()),
            _ => None,
        })
        .collect()
}
