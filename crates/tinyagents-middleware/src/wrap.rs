//! The `wrap_tool` onion.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures_util::FutureExt;

use async_trait::async_trait;
use tinyagents_core::{CallId, RunContext, TinyAgentsError, ToolCall, ToolResult, error_chain};
use tinytools::{Tool, ToolCallOptions, ToolRunContext, ToolSpec};

/// What a wrap layer knows about the call it wraps.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallContext<'a> {
    /// The run.
    pub run: &'a RunContext,
    /// The tool's spec.
    pub spec: &'a ToolSpec,
    /// The immediate parent of a nested call.
    pub parent_call_id: Option<&'a CallId>,
    /// What the tool receives as its context.
    pub tool_context: &'a ToolRunContext,
    /// The options the tool receives.
    pub opts: ToolCallOptions,
    /// Whether the text of a tool's raised error may reach the model. When
    /// `false`, the model reads only that the tool failed; a refusal the
    /// tool forwarded from the harness is not such detail and stays verbatim.
    pub detailed_errors: bool,
}

impl ToolCallContext<'_> {
    /// Whether the wrapped call is nested.
    pub fn is_nested(&self) -> bool {
        self.parent_call_id.is_some()
    }
}

/// A layer around tool execution: it may deny, rewrite, retry or time the
/// call. The first registered layer is the outermost.
#[async_trait]
pub trait ToolMiddleware: Send + Sync {
    /// The name errors cite.
    fn name(&self) -> &str;

    /// Whether calls wrapped by this layer may run concurrently. `false`
    /// makes every call run exclusively. Defaults to `true`.
    fn concurrent_safe(&self) -> bool {
        true
    }

    /// Runs the call, usually by calling `next.run(ctx, call)`.
    ///
    /// The call is lent: a layer that only looks at it, or runs it as it
    /// is (once or again, as a retry does), copies nothing. A layer that
    /// rewrites it runs a changed copy: `next.run(ctx, &changed)`.
    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError>;
}

/// The rest of the onion. `Copy`, so a retry layer can call it again.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    rest: &'a [Arc<dyn ToolMiddleware>],
    tool: &'a dyn Tool,
}

impl std::fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("layers", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Next<'a> {
    /// The onion of `layers` around `tool`.
    pub fn new(layers: &'a [Arc<dyn ToolMiddleware>], tool: &'a dyn Tool) -> Self {
        Self { rest: layers, tool }
    }

    /// Runs the remaining layers and then the tool, which reads the
    /// arguments where they lie ([`Tool::execute_borrowed`]).
    ///
    /// Not an `async fn`: the next layer's (or the tool's) future is built
    /// at once, so nothing is kept beside it at every layer. A panic while
    /// building it or while it runs is contained all the same.
    pub fn run<'c, 'd>(
        self,
        ctx: &'c ToolCallContext<'d>,
        call: &'c ToolCall,
    ) -> impl Future<Output = Result<ToolResult, TinyAgentsError>> + Send + use<'a, 'c, 'd>
    where
        'a: 'c,
        'd: 'c,
    {
        use futures_util::future::Either;
        // Each layer and the tool are contained on their own, so a panic
        // fails the call naming what panicked, never the layer around it.
        match self.rest.split_first() {
            Some((layer, rest)) => {
                let next = Next {
                    rest,
                    tool: self.tool,
                };
                let built: Result<Building<'c, TinyAgentsError>, _> =
                    catch_unwind(AssertUnwindSafe(|| layer.wrap_tool(ctx, call, next)));
                Either::Left(async move {
                    let ran = match built {
                        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
                        Err(panic) => Err(panic),
                    };
                    ran.unwrap_or_else(|panic| {
                        Err(TinyAgentsError::Denied {
                            by: layer.name().to_owned(),
                            reason: format!(
                                "the wrap layer panicked: {}",
                                panic_text(panic.as_ref())
                            ),
                        })
                    })
                })
            }
            None => {
                let tool = self.tool;
                let built: Result<Building<'c, anyhow::Error>, _> =
                    catch_unwind(AssertUnwindSafe(|| {
                        tool.execute_borrowed(&call.arguments, ctx.opts, Some(ctx.tool_context))
                    }));
                Either::Right(tool_outcome(ctx, built))
            }
        }
    }
}

/// What the onion's tool answered: its result, its raised error as the
/// call's failure, or a panic (while its future was built or while it ran)
/// as the call's failure naming the tool.
async fn tool_outcome<'c>(
    ctx: &'c ToolCallContext<'_>,
    built: std::thread::Result<Building<'c, anyhow::Error>>,
) -> Result<ToolResult, TinyAgentsError> {
    let ran = match built {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    match ran {
        Ok(result) => result.map_err(|error| tool_error(ctx, &error)),
        Err(panic) => {
            // The tool that panicked is the onion's own.
            let name = ctx.spec.name.clone();
            let text = format!("tool '{name}' panicked: {}", panic_text(panic.as_ref()));
            Err(if ctx.detailed_errors {
                TinyAgentsError::tool_failed(name, text)
            } else {
                let message = withheld(&name);
                TinyAgentsError::tool_failed_withheld(name, message, text)
            })
        }
    }
}

/// A layer's or a tool's future, as `#[async_trait]` boxes it.
type Building<'c, E> = std::pin::Pin<Box<dyn Future<Output = Result<ToolResult, E>> + Send + 'c>>;

/// The message a panic carried, when it was text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// What the model reads of a raised error whose detail is withheld.
pub fn withheld(tool: &str) -> String {
    format!("tool '{tool}' failed (details withheld)")
}

/// What a tool's raised error becomes: `ToolFailed`, named by the tool's
/// spec; a `TinyAgentsError` the tool forwarded with `?` keeps its message
/// verbatim, and a request for approval stays one.
fn tool_error(ctx: &ToolCallContext<'_>, error: &anyhow::Error) -> TinyAgentsError {
    // Asking for approval is a signal to the harness, not a failure: it
    // defers a model-issued call and refuses a nested one.
    if let Some(asked @ TinyAgentsError::ApprovalRequired { .. }) =
        error.downcast_ref::<TinyAgentsError>()
    {
        return asked.clone();
    }
    match error.downcast_ref::<TinyAgentsError>() {
        // A forwarded error keeps what the host may read of it.
        Some(inner) => TinyAgentsError::ToolFailed {
            message: inner.to_string(),
            detail: match inner {
                TinyAgentsError::ToolFailed { detail, .. } => detail.clone(),
                _ => None,
            },
            tool: ctx.spec.name.clone(),
        },
        None if ctx.detailed_errors => {
            TinyAgentsError::tool_failed(ctx.spec.name.clone(), error_chain(error.as_ref()))
        }
        // The model reads that it failed; the host keeps the text.
        None => {
            let withheld = withheld(&ctx.spec.name);
            let name = ctx.spec.name.clone();
            TinyAgentsError::tool_failed_withheld(name, withheld, error_chain(error.as_ref()))
        }
    }
}
