//! Which chat model an agent runs on.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tinyagents_core::ChatModel;

use crate::definition::AgentDefinition;
use crate::error::BuildError;

/// Makes the chat model of a definition: the model its `model` key names,
/// or the app default when it names none. The definition's
/// `model_options` go with whichever model this returns.
pub trait ModelFactory: Send + Sync {
    /// The model for `definition`.
    fn model_for(&self, definition: &AgentDefinition) -> Result<Arc<dyn ChatModel>, BuildError>;
}

/// Models by key, with an app default. A key the registry does not know is
/// a build error, never a silent fallback to the default.
#[derive(Clone)]
pub struct ModelRegistry {
    default: Arc<dyn ChatModel>,
    by_key: HashMap<String, Arc<dyn ChatModel>>,
}

impl fmt::Debug for ModelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&str> = self.by_key.keys().map(String::as_str).collect();
        keys.sort_unstable();
        f.debug_struct("ModelRegistry")
            .field("default", &self.default.name())
            .field("keys", &keys)
            .finish()
    }
}

impl ModelRegistry {
    /// A registry whose app default is `default`.
    pub fn new(default: Arc<dyn ChatModel>) -> Self {
        Self {
            default,
            by_key: HashMap::new(),
        }
    }

    /// Registers `model` under `key`.
    #[must_use]
    pub fn with(mut self, key: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        self.by_key.insert(key.into(), model);
        self
    }
}

impl ModelFactory for ModelRegistry {
    fn model_for(&self, definition: &AgentDefinition) -> Result<Arc<dyn ChatModel>, BuildError> {
        match &definition.model {
            None => Ok(Arc::clone(&self.default)),
            Some(key) => self
                .by_key
                .get(key)
                .cloned()
                .ok_or_else(|| BuildError::UnknownModel {
                    agent: definition.id.clone(),
                    key: key.clone(),
                }),
        }
    }
}

/// Any function of the definition is a factory.
impl<F> ModelFactory for F
where
    F: Fn(&AgentDefinition) -> Result<Arc<dyn ChatModel>, BuildError> + Send + Sync,
{
    fn model_for(&self, definition: &AgentDefinition) -> Result<Arc<dyn ChatModel>, BuildError> {
        self(definition)
    }
}
