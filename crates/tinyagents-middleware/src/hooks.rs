//! Lifecycle hooks: `Middleware`.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use serde_json::Value;
use tinyagents_core::{ChatResponse, RunContext, State, TinyAgentsError, ToolCall, ToolResult};
use tinytools::{ToolRegistry, ToolSpec};

use crate::decision::ToolVerdict;

/// Hooks around the model and tool calls of a run.
///
/// `before_*` hooks run in registration order and `after_*` hooks in
/// reverse. An `Err` from any hook fails closed: the call is refused (or
/// the result withheld) with a message that names the middleware.
///
/// `before_tool` and `after_tool` never run for nested calls (they take
/// `&mut RunContext`, which a tool future cannot lend): an enforcement must
/// also implement [`Middleware::check_nested_tool`], and accounting
/// [`Middleware::observe_nested_result`].
#[async_trait]
pub trait Middleware: Send + Sync {
    /// The name errors and refusals cite.
    fn name(&self) -> &str;

    /// Before each model call; may change the state (for example trim it).
    ///
    /// (The provided hooks are written out as `#[async_trait]` would write
    /// them, so that building one notes that it is the default; the harness
    /// then stops calling it. Implement them with `async fn` as usual.)
    fn before_model<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 mut RunContext,
        _state: &'life2 mut State,
    ) -> HookFuture<'async_trait, Result<(), TinyAgentsError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::BeforeModel, Ok(()))
    }

    /// After each model call; may rewrite the response.
    fn after_model<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 mut RunContext,
        _state: &'life2 State,
        _response: &'life3 mut ChatResponse,
    ) -> HookFuture<'async_trait, Result<(), TinyAgentsError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::AfterModel, Ok(()))
    }

    /// Before a model-issued call runs: may rewrite the call, deny it or
    /// defer it for approval.
    fn before_tool<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 mut RunContext,
        _state: &'life2 State,
        _call: &'life3 mut ToolCall,
    ) -> HookFuture<'async_trait, Result<ToolVerdict, TinyAgentsError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::BeforeTool, Ok(ToolVerdict::Allow))
    }

    /// After a model-issued call produced its result: may rewrite it.
    fn after_tool<'life0, 'life1, 'life2, 'life3, 'life4, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 mut RunContext,
        _state: &'life2 State,
        _call: &'life3 ToolCall,
        _result: &'life4 mut ToolResult,
    ) -> HookFuture<'async_trait, Result<(), TinyAgentsError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        'life4: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::AfterTool, Ok(()))
    }

    /// Admission of a nested call, after validation and before host
    /// authorisation. The first `Err` refuses the call. The default admits.
    fn check_nested_tool<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 RunContext,
        _state: &'life2 State,
        _call: &'life3 ToolCall,
    ) -> HookFuture<'async_trait, Result<(), TinyAgentsError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::CheckNestedTool, Ok(()))
    }

    /// Sees the result of a nested call that produced one. Cannot rewrite
    /// it; keep state behind interior mutability.
    fn observe_nested_result<'life0, 'life1, 'life2, 'life3, 'life4, 'async_trait>(
        &'life0 self,
        _ctx: &'life1 RunContext,
        _state: &'life2 State,
        _call: &'life3 ToolCall,
        _result: &'life4 ToolResult,
    ) -> HookFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        'life4: 'async_trait,
        Self: 'async_trait,
    {
        provided(self, Hook::ObserveNestedResult, ())
    }

    /// Scrubs a payload of a model-issued call bound for events or
    /// persistence (arguments under payload capture, ledger rows). Never
    /// changes what the tool receives.
    fn redact(&self, _payload: &mut Value) {
        note_default(self, Hook::Redact);
    }

    /// The implementing type's name, which tells the harness whose
    /// provided hook ran (see [`take_default_hook`]). Not for overriding.
    #[doc(hidden)]
    fn hook_owner(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// The future of a hook, as `#[async_trait]` writes it.
pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The hooks of [`Middleware`], as bits of a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Hook {
    /// [`Middleware::before_model`].
    BeforeModel = 1,
    /// [`Middleware::after_model`].
    AfterModel = 1 << 1,
    /// [`Middleware::before_tool`].
    BeforeTool = 1 << 2,
    /// [`Middleware::after_tool`].
    AfterTool = 1 << 3,
    /// [`Middleware::check_nested_tool`].
    CheckNestedTool = 1 << 4,
    /// [`Middleware::observe_nested_result`].
    ObserveNestedResult = 1 << 5,
    /// [`Middleware::redact`].
    Redact = 1 << 6,
}

/// Which provided (do-nothing) hook was last built on this thread: the
/// middleware's address, its type's name and the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultHook {
    /// The middleware's address (its data pointer).
    pub address: usize,
    /// [`std::any::type_name`] of the middleware.
    pub owner: &'static str,
    /// The hook.
    pub hook: Hook,
}

thread_local! {
    static LAST_DEFAULT: Cell<Option<DefaultHook>> = const { Cell::new(None) };
}

/// Notes that `middleware`'s provided `hook` was built (it does nothing).
/// Written synchronously, when the hook's future is built, never when it
/// is polled: a hook of one middleware that awaits another's default, or
/// a default built by another call meanwhile, notes another identity.
fn note_default<M: ?Sized>(middleware: &M, hook: Hook) {
    let note = DefaultHook {
        address: std::ptr::from_ref(middleware).cast::<()>() as usize,
        owner: std::any::type_name::<M>(),
        hook,
    };
    LAST_DEFAULT.with(|last| last.set(Some(note)));
}

/// A provided hook's answer, `value` at once, noted as the default.
fn provided<'a, M: ?Sized, T: Send + 'a>(
    middleware: &M,
    hook: Hook,
    value: T,
) -> HookFuture<'a, T> {
    note_default(middleware, hook);
    Box::pin(std::future::ready(value))
}

/// Takes the note of the last provided hook built on this thread. A host
/// (the harness) builds a middleware's hook and then asks whether the note
/// names that very middleware (same address, same type) and hook: if so,
/// the hook is the provided one, which does nothing, and need not be built
/// again. A hook's implementation is fixed by its type, so the answer holds
/// for every later call.
pub fn take_default_hook() -> Option<DefaultHook> {
    LAST_DEFAULT.with(Cell::take)
}

/// Whether `note` names `middleware`'s provided `hook`.
pub fn is_default_hook(note: Option<DefaultHook>, middleware: &dyn Middleware, hook: Hook) -> bool {
    note.is_some_and(|note| {
        note.hook == hook
            && note.address == std::ptr::from_ref(middleware).cast::<()>() as usize
            && note.owner == middleware.hook_owner()
    })
}

/// The spec of the tool `name` in the run's registry (the harness attaches
/// the registry to every run's context). `None` outside the harness or for
/// an unknown tool: policies that need a spec refuse then.
pub fn tool_spec<'a>(ctx: &'a RunContext, name: &str) -> Option<&'a ToolSpec> {
    ctx.extensions
        .get::<ToolRegistry>()
        .and_then(|registry| registry.get(name))
        .map(|entry| entry.spec())
}
