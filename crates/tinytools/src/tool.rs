//! The `Tool` trait and what a tool receives with each call.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{AgentId, CallId, CancellationToken, IdempotencyKey, RunId, ToolResult};

use crate::spec::ToolSpec;

/// A tool's running call, as [`Tool::execute_borrowed`] returns it.
pub type ToolFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<ToolResult>> + Send + 'a>>;

/// A tool the model (or another tool) can call. Shared as `Arc<dyn Tool>`.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's contract and flags.
    fn spec(&self) -> &ToolSpec;

    /// Runs one call. `args` are prepared and validated against the spec's
    /// schema; `context` is `Some` whenever the harness runs the call.
    ///
    /// Report a failure the model should read as `Ok(ToolResult::error(..))`;
    /// an `Err` is a raised failure (the model still gets its message).
    async fn execute_with_context(
        &self,
        args: Value,
        opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult>;

    /// Runs one call whose arguments the caller keeps: the harness calls
    /// this, so the transcript's copy of a call's arguments is the only one.
    ///
    /// The returned future must not borrow `args`: a tool reads them while
    /// the future is built (a typed tool parses them there) and owns what
    /// it keeps. The default gives a copy to
    /// [`execute_with_context`](Tool::execute_with_context), so a tool that
    /// implements only that method behaves exactly as before.
    fn execute_borrowed<'a>(
        &'a self,
        args: &Value,
        opts: ToolCallOptions,
        context: Option<&'a ToolRunContext>,
    ) -> ToolFuture<'a> {
        self.execute_with_context(args.clone(), opts, context)
    }

    /// Whether calls may overlap other concurrency-safe calls. Defaults to
    /// the spec's flag.
    fn is_concurrency_safe(&self) -> bool {
        self.spec().concurrency_safe
    }

    /// Whether the effect of a call that a crash left in doubt happened.
    ///
    /// Recovery asks this of every in-doubt call of a tool that must not
    /// repeat (`ToolReplay::Never`), model-issued and nested, before it
    /// answers the call. `context` names the call: its run and call ids and,
    /// with them, its [`idempotency_key`](ToolRunContext::idempotency_key),
    /// which the tool's own system can look up (a payment API's idempotency
    /// key). It carries no arguments: a nested call's arguments are not
    /// persisted, only their hash. When a run meets the call again (a
    /// recovery, a resume), the context's host extension is the run's node
    /// of its tree's tokens and money (`tinyagents_core::Spend`): a tool
    /// that delegated work records there what the abandoned work spent.
    ///
    /// - [`Reconciled::Done`]: the effect happened; the result answers the
    ///   call as if it had returned it, and its row settles with it.
    /// - [`Reconciled::NotDone`]: it never happened; the call runs once now.
    /// - [`Reconciled::Unknown`] (the default), an error, a panic or a
    ///   timeout: the call is answered "interrupted, outcome unknown" and
    ///   stays listed in doubt for a person.
    ///
    /// Answer `NotDone` only when the system is sure: the call will run.
    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        let _ = context;
        Ok(Reconciled::Unknown)
    }
}

/// What a tool found out about a call in doubt ([`Tool::reconcile`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// The effect happened; this is the call's result.
    Done(ToolResult),
    /// The effect never happened: the call may run now, once.
    NotDone,
    /// The tool cannot tell.
    Unknown,
}

/// Per-call options the harness passes to a tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCallOptions {
    /// The timeout the harness enforces on this call, if any.
    pub timeout: Option<Duration>,
    /// 0 for the first attempt; a retry wrap counts up.
    pub attempt: u32,
}

impl ToolCallOptions {
    /// Options with a timeout.
    pub fn with_timeout(timeout: Option<Duration>) -> Self {
        Self {
            timeout,
            attempt: 0,
        }
    }
}

/// Progress a long tool reports, or a warning it gives.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// The call reporting.
    pub call_id: CallId,
    /// Fraction done, 0.0 to 1.0, when known.
    pub fraction: Option<f32>,
    /// What it is doing.
    pub message: String,
    /// A warning for the run's host (a `Warning` event), not progress.
    pub warning: bool,
}

/// Where progress reports go.
pub type ProgressSink = Arc<dyn Fn(ToolProgress) + Send + Sync>;

/// What the harness tells a tool about the call it runs.
#[derive(Clone)]
pub struct ToolRunContext {
    run_id: RunId,
    call_id: CallId,
    agent_id: Option<AgentId>,
    cancel: CancellationToken,
    progress: Option<ProgressSink>,
    extension: Option<Arc<dyn Any + Send + Sync>>,
    idempotency_key: Option<IdempotencyKey>,
    /// `None` for none: most calls have no workspace, and an empty
    /// `Arc<[_]>` still allocates.
    workspaces: Option<Arc<[std::path::PathBuf]>>,
}

impl fmt::Debug for ToolRunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRunContext")
            .field("run_id", &self.run_id)
            .field("call_id", &self.call_id)
            .field("agent_id", &self.agent_id)
            .field("has_extension", &self.extension.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolRunContext {
    /// A context for `call_id` in `run_id`.
    pub fn new(run_id: RunId, call_id: CallId, cancel: CancellationToken) -> Self {
        Self {
            run_id,
            call_id,
            agent_id: None,
            cancel,
            progress: None,
            extension: None,
            idempotency_key: None,
            workspaces: None,
        }
    }

    /// Sets the agent.
    #[must_use]
    pub fn with_agent(mut self, agent_id: Option<AgentId>) -> Self {
        self.agent_id = agent_id;
        self
    }

    /// Sets where progress goes.
    #[must_use]
    pub fn with_progress(mut self, sink: Option<ProgressSink>) -> Self {
        self.progress = sink;
        self
    }

    /// Installs the host's extension (the harness installs its
    /// `ToolExecutionContext` here).
    #[must_use]
    pub fn with_host_extension(mut self, extension: Arc<dyn Any + Send + Sync>) -> Self {
        self.extension = Some(extension);
        self
    }

    /// Sets the call's idempotency key.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the directories the tool may touch.
    #[must_use]
    pub fn with_workspaces(mut self, workspaces: Arc<[std::path::PathBuf]>) -> Self {
        self.workspaces = Some(workspaces);
        self
    }

    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// This call.
    pub fn call_id(&self) -> &CallId {
        &self.call_id
    }

    /// The agent running the call.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.agent_id.as_ref()
    }

    /// The run's cancellation token: a long tool should stop when it fires.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The host's extension, for downcasting to the type the host installed.
    pub fn host_extension(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.extension.as_deref()
    }

    /// The call's idempotency key, when the harness has a ledger.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The directories the tool may touch; empty when the host set none.
    pub fn workspaces(&self) -> &[std::path::PathBuf] {
        self.workspaces.as_deref().unwrap_or_default()
    }

    /// Reports progress. Best effort: progress is dropped when nobody
    /// listens or the event buffer is full.
    pub fn report_progress(&self, fraction: Option<f32>, message: impl Into<String>) {
        if let Some(sink) = &self.progress {
            sink(ToolProgress {
                call_id: self.call_id.clone(),
                fraction,
                message: message.into(),
                warning: false,
            });
        }
    }

    /// Warns the run's host (a `Warning` event): something a person should
    /// know that is not the call's result, such as a remote tool whose
    /// definition changed. Best effort, like progress: dropped when nobody
    /// listens, and for nested calls.
    pub fn warn(&self, message: impl Into<String>) {
        if let Some(sink) = &self.progress {
            sink(ToolProgress {
                call_id: self.call_id.clone(),
                fraction: None,
                message: message.into(),
                warning: true,
            });
        }
    }
}
