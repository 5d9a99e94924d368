//! `AgentCatalog`: the host's definitions, the save-time name check, and
//! the definitions one user may see.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tinyagents_core::AgentId;

use crate::definition::{AgentDefinition, Viewer};

/// Why a definition was not saved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Two non-main agents that some user could both see would have the
    /// same function name.
    #[error(
        "agent '{agent}' cannot be saved: its function name '{function_name}' is already used by agent '{other}', and their audiences overlap"
    )]
    NameCollision {
        /// The agent being saved.
        agent: AgentId,
        /// The agent that already has the name.
        other: AgentId,
        /// The normalised name both would have.
        function_name: String,
    },
    /// The definition's id is empty.
    #[error("an agent definition needs a non-empty id")]
    EmptyId,
}

/// The host's agent definitions, in memory. Saving checks function-name
/// collisions; [`AgentCatalog::visible_to`] gives the definitions an
/// [`AgentBuildRequest`](crate::AgentBuildRequest) resolves ids among.
///
/// Saving does not touch any orchestrator's cache: after changing a
/// definition, evict it (or invalidate) on the orchestrators that built it.
#[derive(Debug, Default)]
pub struct AgentCatalog {
    definitions: RwLock<BTreeMap<AgentId, Arc<AgentDefinition>>>,
}

impl AgentCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Saves (adds or replaces) a definition. Refused when it is not the
    /// main agent and another non-main agent whose audience overlaps has
    /// the same function name.
    pub fn save(&self, definition: AgentDefinition) -> Result<Arc<AgentDefinition>, CatalogError> {
        if definition.id.as_str().is_empty() {
            return Err(CatalogError::EmptyId);
        }
        let mut definitions = self.definitions.write();
        if let Some(other) = find_collision(&definition, definitions.values().map(AsRef::as_ref)) {
            return Err(CatalogError::NameCollision {
                agent: definition.id.clone(),
                other: other.id.clone(),
                function_name: definition.function_name(),
            });
        }
        let saved = Arc::new(definition);
        definitions.insert(saved.id.clone(), Arc::clone(&saved));
        Ok(saved)
    }

    /// Removes a definition; returns it when it existed.
    pub fn remove(&self, id: &AgentId) -> Option<Arc<AgentDefinition>> {
        self.definitions.write().remove(id)
    }

    /// The definition `id`.
    pub fn get(&self, id: &AgentId) -> Option<Arc<AgentDefinition>> {
        self.definitions.read().get(id).cloned()
    }

    /// Every definition, by id.
    pub fn all(&self) -> Vec<Arc<AgentDefinition>> {
        self.definitions.read().values().cloned().collect()
    }

    /// The definitions `viewer` may see.
    pub fn visible_to(&self, viewer: &Viewer) -> Vec<Arc<AgentDefinition>> {
        self.definitions
            .read()
            .values()
            .filter(|d| d.is_visible_to(viewer))
            .cloned()
            .collect()
    }
}

/// The first of `others` whose function name collides with `definition`'s:
/// both non-main, different ids, the same normalised name, overlapping
/// audiences.
pub fn find_collision<'a>(
    definition: &AgentDefinition,
    others: impl IntoIterator<Item = &'a AgentDefinition>,
) -> Option<&'a AgentDefinition> {
    if definition.is_main {
        return None;
    }
    let name = definition.function_name();
    others.into_iter().find(|other| {
        other.id != definition.id
            && !other.is_main
            && other.function_name() == name
            && other.audiences_overlap(definition)
    })
}
