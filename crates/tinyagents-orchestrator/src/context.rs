//! Context providers: memory, skills, private notes, the library, task
//! lists and extra per-request context, attached to the agent a user asked
//! for and never to the agents it delegates to.

use std::fmt;
use std::sync::Arc;

use tinyagents_middleware::Middleware;
use tinytools::Tool;

use crate::definition::AgentDefinition;

/// What a context provider supplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ContextKind {
    /// Long-term memory; attaches only when the definition enables memory.
    Memory,
    /// Skills; attach only when the definition assigns some.
    Skills,
    /// The user's private notes.
    PrivateNotes,
    /// The user's document library.
    Library,
    /// A task list.
    TaskList,
    /// Extra context a host adds for one request.
    Request,
    /// Anything else. The only kind that may attach to a delegated build,
    /// and only when the provider clears its active-only marker.
    Shared,
}

/// Adds context to an agent: text for its standing instruction, tools, and
/// a middleware for what must be computed per request.
///
/// The orchestrator decides where a provider attaches, not the provider:
/// every kind but [`ContextKind::Shared`] attaches only to the requested
/// (active) agent; a `Shared` provider attaches to delegated builds too
/// only when [`ContextProvider::active_only`] returns `false`.
pub trait ContextProvider: Send + Sync {
    /// A name for diagnostics ([`crate::BuiltAgent::context_providers`]).
    fn name(&self) -> &str;

    /// What the provider supplies.
    fn kind(&self) -> ContextKind;

    /// The active-only marker: `true` (the default) attaches the provider
    /// only to the requested agent.
    fn active_only(&self) -> bool {
        true
    }

    /// Text appended to the standing instruction.
    fn instructions(&self) -> Option<String> {
        None
    }

    /// Tools the provider adds (under the same posture rules as the
    /// definition's own tools).
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// A middleware for per-request context (installed after the host's).
    fn middleware(&self) -> Option<Arc<dyn Middleware>> {
        None
    }
}

impl fmt::Debug for dyn ContextProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContextProvider({}, {:?})", self.name(), self.kind())
    }
}

/// Makes the context providers of a definition. The orchestrator filters
/// what it returns by role (see [`ContextProvider`]), so a factory need not
/// know whether a build is delegated.
pub trait ContextProviderFactory: Send + Sync {
    /// The providers for `definition`.
    fn providers(&self, definition: &AgentDefinition) -> Vec<Arc<dyn ContextProvider>>;
}

/// A factory that provides nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoContextProviders;

impl ContextProviderFactory for NoContextProviders {
    fn providers(&self, _definition: &AgentDefinition) -> Vec<Arc<dyn ContextProvider>> {
        Vec::new()
    }
}

/// Whether `provider` attaches to a build of `definition`; `active` when
/// the build is the requested agent's.
pub(crate) fn attaches(
    provider: &dyn ContextProvider,
    definition: &AgentDefinition,
    active: bool,
) -> bool {
    match provider.kind() {
        ContextKind::Memory => active && definition.memory_enabled,
        ContextKind::Skills => active && !definition.skills.is_empty(),
        ContextKind::Shared => active || !provider.active_only(),
        _ => active,
    }
}
