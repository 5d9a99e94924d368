//! The registry: tools by name, each with its schema compiled once.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tinyagents_core::ToolDefinition;

use crate::args::ArgumentError;
use crate::spec::ToolSpec;
use crate::tool::Tool;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// A tool of that name is already registered.
    #[error("a tool named '{name}' is already registered")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// Providers accept names of 1 to 64 ASCII letters, digits, `_` and `-`.
    #[error("tool name '{name}' is not 1 to 64 ASCII letters, digits, '_' or '-'")]
    InvalidName {
        /// The name.
        name: String,
    },
    /// The parameters are not a usable JSON Schema.
    #[error("tool '{name}' has an invalid parameter schema: {message}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// The compiler's complaint.
        message: String,
    },
}

/// A registered tool with its compiled validator and model-facing definition.
pub struct RegisteredTool {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
    definition: ToolDefinition,
    model_visible: bool,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.definition.name)
            .field("model_visible", &self.model_visible)
            .finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// The tool.
    pub fn tool(&self) -> &Arc<dyn Tool> {
        &self.tool
    }

    /// Its spec.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// What the model is told (injected arguments removed).
    pub fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    /// Whether the model may call it.
    pub fn is_model_visible(&self) -> bool {
        self.model_visible
    }

    /// Validates prepared arguments against the compiled schema.
    pub fn validate(&self, args: &Value) -> Result<(), ArgumentError> {
        let Some(error) = self.validator.iter_errors(args).next() else {
            return Ok(());
        };
        Err(ArgumentError::Invalid {
            tool: self.definition.name.clone(),
            path: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        })
    }
}

/// Tools by name. Schemas are compiled once, at registration.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    entries: Vec<RegisteredTool>,
    by_name: HashMap<String, usize>,
    model_definitions: Vec<ToolDefinition>,
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The schema the model sees: the spec's, without injected arguments and
/// without the `$schema` marker.
fn model_schema(spec: &ToolSpec) -> Value {
    let mut schema = spec.parameters.clone();
    if let Value::Object(object) = &mut schema {
        object.remove("$schema");
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            for key in &spec.injected {
                properties.remove(key);
            }
        }
        if let Some(Value::Array(required)) = object.get_mut("required") {
            required.retain(|r| {
                !r.as_str()
                    .is_some_and(|r| spec.injected.iter().any(|k| k == r))
            });
        }
    }
    schema
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool the model may call.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.insert(tool, true)
    }

    /// Registers a tool the host keeps for itself: callable by the host
    /// (and never by the model or by nested calls).
    pub fn register_host_tool(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.insert(tool, false)
    }

    fn insert(&mut self, tool: Arc<dyn Tool>, model_visible: bool) -> Result<(), RegistryError> {
        let spec = tool.spec();
        let name = spec.name.clone();
        if !valid_name(&name) {
            return Err(RegistryError::InvalidName { name });
        }
        if self.by_name.contains_key(&name) {
            return Err(RegistryError::Duplicate { name });
        }
        let validator = jsonschema::validator_for(&spec.parameters).map_err(|e| {
            RegistryError::InvalidSchema {
                name: name.clone(),
                message: e.to_string(),
            }
        })?;
        let definition = ToolDefinition {
            name: name.clone(),
            description: spec.description.clone(),
            parameters: model_schema(spec),
        };
        if model_visible {
            self.model_definitions.push(definition.clone());
        }
        self.by_name.insert(name, self.entries.len());
        self.entries.push(RegisteredTool {
            tool,
            validator,
            definition,
            model_visible,
        });
        Ok(())
    }

    /// Any registered tool, host tools included.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// The registry's view of the tools the model may call.
    pub fn model_dispatch(&self) -> ModelDispatch<'_> {
        ModelDispatch { registry: self }
    }

    /// Every registered tool, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.entries.iter()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The tools the model may call, as opposed to tools a host keeps for itself.
#[derive(Debug, Clone, Copy)]
pub struct ModelDispatch<'a> {
    registry: &'a ToolRegistry,
}

impl<'a> ModelDispatch<'a> {
    /// The tool of that name, if the model may call it.
    pub fn get(&self, name: &str) -> Option<&'a RegisteredTool> {
        self.registry.get(name).filter(|t| t.model_visible)
    }

    /// The definitions the model is told about, in registration order.
    pub fn definitions(&self) -> &'a [ToolDefinition] {
        &self.registry.model_definitions
    }
}
