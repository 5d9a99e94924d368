//! Tools from async functions, with the JSON Schema derived from the
//! argument type (`schemars`).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinyagents_core::ToolResult;

use crate::spec::ToolSpec;
use crate::tool::{Reconciled, Tool, ToolCallOptions, ToolRunContext};

/// What a tool function may return.
pub trait IntoToolResult {
    /// The result the model reads.
    fn into_tool_result(self) -> ToolResult;
}

impl IntoToolResult for ToolResult {
    fn into_tool_result(self) -> ToolResult {
        self
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::text(self)
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> ToolResult {
        ToolResult::text(self)
    }
}

impl IntoToolResult for Value {
    fn into_tool_result(self) -> ToolResult {
        match self {
            Value::String(text) => ToolResult::text(text),
            other => ToolResult::json(&other),
        }
    }
}

/// How a [`FnTool`] calls its function. Its future is awaited inside the
/// tool's own (boxed) future, so a call boxes once.
pub trait ToolHandler<A>: Send + Sync + 'static {
    /// What the function returns.
    type Output: IntoToolResult;
    /// The function's future.
    type Future: Future<Output = anyhow::Result<Self::Output>> + Send;

    /// Calls the function.
    fn call(&self, args: A, context: Option<&ToolRunContext>) -> Self::Future;
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

    fn call(&self, args: A, _context: Option<&ToolRunContext>) -> Fut {
        (self.0)(args)
    }
}

impl<A, F, Fut, R> ToolHandler<A> for WithContext<F>
where
    F: Fn(A, Option<ToolRunContext>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<R>> + Send + 'static,
    R: IntoToolResult,
{
    type Output = R;
    type Future = Fut;

    fn call(&self, args: A, context: Option<&ToolRunContext>) -> Fut {
        (self.0)(args, context.cloned())
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
    /// A tool that calls `f` with the parsed arguments.
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
    /// A tool that calls `f` with the parsed arguments and the call's context.
    pub fn with_context<Fut, R>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> Self
    where
        F: Fn(A, Option<ToolRunContext>) -> Fut,
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
        let parsed: A = match serde_json::from_value(args) {
            Ok(parsed) => parsed,
            Err(e) => {
                return Ok(ToolResult::error(format!(
                    "arguments for tool '{}' do not fit its type: {e}",
                    self.spec.name
                )));
            }
        };
        self.handler
            .call(parsed, context)
            .await
            .map(IntoToolResult::into_tool_result)
    }

    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        match &self.reconciler {
            Some(reconcile) => reconcile(context.clone()).await,
            None => Ok(Reconciled::Unknown),
        }
    }
}
