//! Tools from async functions, with the JSON Schema derived from the
//! argument type (`schemars`).

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinyagents_core::ToolResult;

use crate::spec::ToolSpec;
use crate::tool::{Reconciled, Tool, ToolCallOptions, ToolFuture, ToolRunContext};

/// What a tool function may return: any `Serialize` value.
///
/// - a [`ToolResult`] is the result as it is (error flag, metadata and
///   control included), never serialised;
/// - a string (`String`, `&'static str`, or any value that serialises to a
///   JSON string) is [`ToolResult::text`];
/// - any other value is [`ToolResult::json`] of its JSON form.
///
/// Serialisation can fail (a map whose keys are not strings, a `Serialize`
/// impl that errs): [`FnTool`] then fails the call with an error naming the
/// tool.
pub trait IntoToolResult {
    /// The result the model reads.
    ///
    /// # Errors
    ///
    /// When the value cannot be serialised to JSON.
    fn into_tool_result(self) -> Result<ToolResult, serde_json::Error>;
}

impl<T: Serialize + 'static> IntoToolResult for T {
    fn into_tool_result(self) -> Result<ToolResult, serde_json::Error> {
        // The value sits in an `Option` so that the types that need no
        // serialising can be taken out of it by downcasting.
        let mut slot = Some(self);
        let any: &mut dyn Any = &mut slot;
        if let Some(result) = any
            .downcast_mut::<Option<ToolResult>>()
            .and_then(Option::take)
        {
            return Ok(result);
        }
        if let Some(text) = any.downcast_mut::<Option<String>>().and_then(Option::take) {
            return Ok(ToolResult::text(text));
        }
        if let Some(value) = any.downcast_mut::<Option<Value>>().and_then(Option::take) {
            return Ok(value_result(value));
        }
        // `slot` is still `Some`: each `take` above ran only when its
        // downcast matched, and then returned. `Some(value)` serialises as
        // `value`.
        serde_json::to_value(&slot).map(value_result)
    }
}

/// A JSON string is text; any other value, its JSON text.
fn value_result(value: Value) -> ToolResult {
    match value {
        Value::String(text) => ToolResult::text(text),
        other => ToolResult::json(&other),
    }
}

/// How a [`FnTool`] calls its function. Its future is awaited inside the
/// tool's own (boxed) future, so a call boxes once.
pub trait ToolHandler<A>: Send + Sync + 'static {
    /// What the function returns.
    type Output: IntoToolResult;
    /// The function's future.
    type Future: Future<Output = anyhow::Result<Self::Output>> + Send;

    /// Calls the function; `None` when the function needs the call's
    /// context and `context` is `None` (a direct
    /// [`execute_with_context`](Tool::execute_with_context) outside any
    /// harness).
    fn call(&self, args: A, context: Option<&ToolRunContext>) -> Option<Self::Future>;
}

/// A function of the arguments only.
#[derive(Debug, Clone, Copy)]
pub struct ArgsOnly<F>(F);

/// A function of the arguments and (a clone of) the call's context.
#[derive(Debug, Clone, Copy)]
pub struct WithContext<F>(F);

impl<A, F, Fut, R> ToolHandler<A> for ArgsOnly<F>
where
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<R>> + Send + 'static,
    R: IntoToolResult,
{
    type Output = R;
    type Future = Fut;

    fn call(&self, args: A, _context: Option<&ToolRunContext>) -> Option<Fut> {
        Some((self.0)(args))
    }
}

impl<A, F, Fut, R> ToolHandler<A> for WithContext<F>
where
    F: Fn(A, ToolRunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<R>> + Send + 'static,
    R: IntoToolResult,
{
    type Output = R;
    type Future = Fut;

    fn call(&self, args: A, context: Option<&ToolRunContext>) -> Option<Fut> {
        context.map(|context| (self.0)(args, context.clone()))
    }
}

/// A tool made from an async function whose argument type derives
/// `Deserialize` and `JsonSchema`.
pub struct FnTool<A, H> {
    spec: ToolSpec,
    handler: H,
    reconciler: Option<Reconciler>,
    _args: PhantomData<fn(A)>,
}

/// A [`FnTool`]'s answer to [`Tool::reconcile`], set with
/// [`FnTool::with_reconcile`].
type Reconciler = Arc<
    dyn Fn(ToolRunContext) -> Pin<Box<dyn Future<Output = anyhow::Result<Reconciled>> + Send>>
        + Send
        + Sync,
>;

impl<A, H> std::fmt::Debug for FnTool<A, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

fn derived_schema<A: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Value::Object(object) = &mut schema {
        object.remove("title");
    }
    schema
}

impl<A, F> FnTool<A, ArgsOnly<F>>
where
    A: DeserializeOwned + JsonSchema,
{
    /// A tool that calls `f` with the parsed arguments. `f` may return any
    /// `Serialize` value ([`IntoToolResult`]): a string is the text the
    /// model reads, a [`ToolResult`] is used as it is, any other value is
    /// sent as its JSON text.
    ///
    /// ```
    /// # use tinytools::FnTool;
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    /// let add = FnTool::new("add", "Adds two integers.", |args: Add| async move {
    ///     anyhow::Ok((args.a + args.b).to_string())
    /// });
    /// ```
    pub fn new<Fut, R>(name: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        F: Fn(A) -> Fut,
        Fut: Future<Output = anyhow::Result<R>>,
    {
        Self {
            spec: ToolSpec::new(name, description, derived_schema::<A>()),
            handler: ArgsOnly(f),
            reconciler: None,
            _args: PhantomData,
        }
    }
}

impl<A, F> FnTool<A, WithContext<F>>
where
    A: DeserializeOwned + JsonSchema,
{
    /// A tool that calls `f` with the parsed arguments and (a clone of) the
    /// call's context.
    ///
    /// The harness always gives a call its context. Executed without one (a
    /// direct [`execute_with_context`](Tool::execute_with_context) with
    /// `None`, outside any harness), the tool does not call `f`: the call
    /// fails with an `Err`, "tool 'x' needs the context of a run: call it
    /// through a harness".
    ///
    /// ```
    /// # use tinytools::FnTool;
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Query { q: String }
    /// let search = FnTool::with_context("search", "Searches.", |args: Query, ctx| async move {
    ///     ctx.report_progress(None, format!("searching for {}", args.q));
    ///     anyhow::Ok(format!("run {}: no results", ctx.run_id()))
    /// });
    /// ```
    pub fn with_context<Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> Self
    where
        F: Fn(A, ToolRunContext) -> Fut,
        Fut: Future<Output = anyhow::Result<R>>,
    {
        Self {
            spec: ToolSpec::new(name, description, derived_schema::<A>()),
            handler: WithContext(f),
            reconciler: None,
            _args: PhantomData,
        }
    }
}

impl<A, H> FnTool<A, H> {
    /// Changes the spec (flags, timeout, side effects).
    #[must_use]
    pub fn map_spec(mut self, f: impl FnOnce(ToolSpec) -> ToolSpec) -> Self {
        self.spec = f(self.spec);
        self
    }

    /// Answers [`Tool::reconcile`] with `f`: after a crash, recovery asks
    /// it whether the call it names (a clone of the call's context, with its
    /// idempotency key) had its effect. Without it the tool answers
    /// [`Reconciled::Unknown`].
    #[must_use]
    pub fn with_reconcile<Fut>(
        mut self,
        f: impl Fn(ToolRunContext) -> Fut + Send + Sync + 'static,
    ) -> Self
    where
        Fut: Future<Output = anyhow::Result<Reconciled>> + Send + 'static,
    {
        self.reconciler = Some(Arc::new(move |context| Box::pin(f(context))));
        self
    }
}

impl<A, H> FnTool<A, H>
where
    A: DeserializeOwned + Send + 'static,
    H: ToolHandler<A>,
{
    /// Calls the function with arguments parsed by the caller: a misfit is
    /// the model's to read, a missing context or a result that does not
    /// serialise is raised.
    async fn run_parsed(
        &self,
        parsed: Result<A, serde_json::Error>,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                return Ok(ToolResult::error(format!(
                    "arguments for tool '{}' do not fit its type: {e}",
                    self.spec.name
                )));
            }
        };
        let Some(call) = self.handler.call(parsed, context) else {
            anyhow::bail!(
                "tool '{}' needs the context of a run: call it through a harness",
                self.spec.name
            );
        };
        call.await?.into_tool_result().map_err(|e| {
            anyhow::anyhow!(
                "tool '{}' returned a value that cannot be serialised: {e}",
                self.spec.name
            )
        })
    }
}

#[async_trait]
impl<A, H> Tool for FnTool<A, H>
where
    A: DeserializeOwned + Send + 'static,
    H: ToolHandler<A>,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let parsed = serde_json::from_value(args);
        self.run_parsed(parsed, context).await
    }

    /// Parses `args` where they lie (no copy) before the future is built.
    fn execute_borrowed<'a>(
        &'a self,
        args: &Value,
        _opts: ToolCallOptions,
        context: Option<&'a ToolRunContext>,
    ) -> ToolFuture<'a> {
        let parsed = A::deserialize(args);
        Box::pin(self.run_parsed(parsed, context))
    }

    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        match &self.reconciler {
            Some(reconcile) => reconcile(context.clone()).await,
            None => Ok(Reconciled::Unknown),
        }
    }
}
