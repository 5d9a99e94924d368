//! The fixtures of the in-doubt tests: a payment service that remembers
//! every payment by its idempotency key (what a real payment API does), a
//! `pay` tool on it that never repeats and can stall after it paid (the
//! process dies there), and a `batch` tool that pays through nested calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::RunId, core::ToolReplay, harness::ToolExecutionContext, ledger::EffectLedger, tools,
    tools::Reconciled,
};

/// Payments by idempotency key.
#[derive(Default)]
pub(crate) struct Bank {
    paid: Mutex<HashMap<String, usize>>,
}

impl Bank {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn pay(&self, key: &str) {
        *self.paid.lock().unwrap().entry(key.to_owned()).or_default() += 1;
    }

    fn has(&self, key: &str) -> bool {
        self.paid.lock().unwrap().contains_key(key)
    }

    /// How many payments were made in all.
    pub(crate) fn payments(&self) -> usize {
        self.paid.lock().unwrap().values().sum()
    }

    /// Whether any key was paid twice.
    pub(crate) fn repeated(&self) -> Vec<String> {
        let paid = self.paid.lock().unwrap();
        paid.iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// How `pay` answers `reconcile`.
#[derive(Clone)]
pub(crate) enum Answer {
    /// Looks the key up in the bank: `Done` if it paid, else `NotDone`.
    Lookup,
    /// As `Lookup`, `Done` with this text.
    LookupSaying(&'static str),
    /// `Unknown`.
    Unknown,
    /// An error.
    Fail,
    /// A panic.
    Panic,
    /// Never answers (the harness's timeout ends it).
    Hang,
}

/// Where `pay` stops forever (the process "dies" there).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    Never,
    /// After its first call paid.
    AfterPaying,
    /// Before its first call paid.
    BeforePaying,
}

pub(crate) struct Pay {
    spec: ToolSpec,
    bank: Arc<Bank>,
    answer: Answer,
    stall: Stall,
    stalled: Arc<tokio::sync::Notify>,
    pub(crate) calls: AtomicUsize,
    pub(crate) asked: AtomicUsize,
}

impl Pay {
    pub(crate) fn new(bank: &Arc<Bank>, answer: Answer, stall: Stall) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::new(
                "pay",
                "Pays.",
                json!({"type": "object", "properties": {"to": {"type": "string"}}}),
            )
            .replay(ToolReplay::Never)
            .timeout(Duration::from_millis(200)),
            bank: bank.clone(),
            answer,
            stall,
            stalled: Arc::new(tokio::sync::Notify::new()),
            calls: AtomicUsize::new(0),
            asked: AtomicUsize::new(0),
        })
    }

    /// Notified when a call stalls.
    pub(crate) fn stalled(&self) -> Arc<tokio::sync::Notify> {
        self.stalled.clone()
    }
}

fn key_of(context: Option<&ToolRunContext>) -> String {
    context
        .and_then(ToolRunContext::idempotency_key)
        .map(ToString::to_string)
        .expect("a ledger gives every call an idempotency key")
}

#[async_trait]
impl Tool for Pay {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        let key = key_of(context);
        if first && self.stall == Stall::BeforePaying {
            self.stalled.notify_one();
            std::future::pending::<()>().await;
        }
        self.bank.pay(&key);
        if first && self.stall == Stall::AfterPaying {
            self.stalled.notify_one();
            std::future::pending::<()>().await;
        }
        let to = args.get("to").and_then(Value::as_str).unwrap_or("?");
        Ok(ToolResult::text(format!("paid {to}")))
    }

    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let key = key_of(Some(context));
        match self.answer {
            Answer::Lookup if self.bank.has(&key) => Ok(Reconciled::Done(ToolResult::text(
                "paid (found by its key)",
            ))),
            Answer::LookupSaying(text) if self.bank.has(&key) => {
                Ok(Reconciled::Done(ToolResult::text(text)))
            }
            Answer::Lookup | Answer::LookupSaying(_) => Ok(Reconciled::NotDone),
            Answer::Unknown => Ok(Reconciled::Unknown),
            Answer::Fail => Err(anyhow::anyhow!("the bank's API answered 503")),
            Answer::Panic => panic!("the bank's client panicked"),
            Answer::Hang => std::future::pending().await,
        }
    }
}

/// `batch`: pays each name of `to` through a nested `pay` call, in order,
/// and says what each answered. `reconcile` says how it answers for
/// itself (it has no effect of its own).
pub(crate) struct Batch {
    spec: ToolSpec,
    answer: Option<Reconciled>,
    target: &'static str,
    pub(crate) calls: AtomicUsize,
}

impl Batch {
    pub(crate) fn new(replay: ToolReplay, answer: Option<Reconciled>) -> Arc<Self> {
        Self::calling("pay", replay, answer)
    }

    /// A batch whose nested calls go to `target` instead of `pay`.
    pub(crate) fn calling(
        target: &'static str,
        replay: ToolReplay,
        answer: Option<Reconciled>,
    ) -> Arc<Self> {
        Self::named("batch", target, replay, answer)
    }

    /// A batch named `name` whose nested calls go to `target`.
    pub(crate) fn named(
        name: &'static str,
        target: &'static str,
        replay: ToolReplay,
        answer: Option<Reconciled>,
    ) -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec::new(
                name,
                "Pays several.",
                json!({"type": "object", "properties": {"to": {}}}),
            )
            .replay(replay),
            answer,
            target,
            calls: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl Tool for Batch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let harness = context
            .and_then(tools::ToolRunContext::host_extension)
            .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
            .expect("installed by the agent loop");
        let mut said = Vec::new();
        // A list of names, or one name (as a batch passes one on).
        let names = match &args["to"] {
            Value::Array(names) => names.clone(),
            one => vec![one.clone()],
        };
        for to in names {
            let answer = match harness.call_tool(self.target, json!({ "to": to })).await {
                Ok(result) => result.content,
                Err(error) => format!("refused: {error}"),
            };
            said.push(answer);
        }
        Ok(ToolResult::text(said.join(" | ")))
    }

    async fn reconcile(&self, _context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        Ok(self.answer.clone().unwrap_or(Reconciled::Unknown))
    }
}

/// A harness on `model` and `ledger` with `tools`, nesting allowed.
pub(crate) fn harness(
    model: Vec<ChatResponse>,
    ledger: Arc<dyn EffectLedger>,
    tools: Vec<Arc<dyn Tool>>,
) -> AgentHarness {
    harness_redacting(model, ledger, tools, None)
}

/// [`harness`], with a `RedactionMiddleware` for `secret` when given.
pub(crate) fn harness_redacting(
    model: Vec<ChatResponse>,
    ledger: Arc<dyn EffectLedger>,
    tools: Vec<Arc<dyn Tool>>,
    secret: Option<&str>,
) -> AgentHarness {
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(model)))
        .ledger(ledger)
        .limits(RunLimits::default().with_max_nested_depth(2));
    if let Some(secret) = secret {
        let redactor = tinyagents::middleware::Redactor::new().with_secret(secret);
        builder = builder.middleware(Arc::new(
            tinyagents::middleware::RedactionMiddleware::with_redactor(redactor),
        ));
    }
    for tool in tools {
        builder.register(tool).unwrap();
    }
    builder.build().unwrap()
}

/// Runs `harness` as run `run_id` until `stalled` fires, then drops the
/// run: the process died there.
pub(crate) async fn crash_when(
    harness: &AgentHarness,
    run_id: &str,
    stalled: &tokio::sync::Notify,
) {
    let events = EventSink::none();
    let run = harness.run_with(
        RunRequest::new("go").with_run_id(RunId::from(run_id)),
        &events,
    );
    tokio::select! {
        _ = run => panic!("the run was meant to die while its tool ran"),
        () = stalled.notified() => {}
    }
}
