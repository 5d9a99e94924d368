//! The registry: tools by name, each with its schema compiled once.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind};
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

    /// Validates prepared arguments against the compiled schema. The error
    /// names the first problem's JSON pointer, the schema keyword it broke
    /// and what the schema expects there; it never quotes the arguments.
    pub fn validate(&self, args: &Value) -> Result<(), ArgumentError> {
        // The common case allocates nothing; the error iterator is built
        // only to describe a failure.
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let Some(error) = self.validator.iter_errors(args).next() else {
            return Ok(());
        };
        Err(ArgumentError::Invalid {
            tool: self.definition.name.clone(),
            path: error.instance_path().as_str().to_owned(),
            keyword: error.kind().keyword().to_owned(),
            expected: expectation(
                &self.spec().parameters,
                error.schema_path().as_str(),
                error.kind(),
            ),
        })
    }
}

/// Bytes of a schema value quoted in an argument error.
const EXPECTATION_BYTES: usize = 200;

/// What the schema expects at the keyword an error points to, read from the
/// schema (public) and never from the instance (the arguments). The
/// validator's own message is not used: it quotes the offending value.
fn expectation(schema: &Value, schema_path: &str, kind: &ValidationErrorKind) -> String {
    let at_keyword = schema.pointer(schema_path);
    match kind {
        // The missing property's name comes from the schema's `required`.
        ValidationErrorKind::Required { property } => return format!("property {property}"),
        ValidationErrorKind::AdditionalProperties { .. }
        | ValidationErrorKind::UnevaluatedProperties { .. }
            if matches!(at_keyword, Some(Value::Bool(false))) =>
        {
            return declared_only(schema, schema_path);
        }
        ValidationErrorKind::FalseSchema => return "no value at all (false schema)".to_owned(),
        _ => {}
    }
    if let Some(value) = at_keyword {
        return quote_schema(value);
    }
    // The keyword sits behind a `$ref` the pointer cannot follow: what the
    // validator read from the schema.
    match kind {
        ValidationErrorKind::Type { kind } => match kind {
            TypeKind::Single(one) => format!("\"{one}\""),
            TypeKind::Multiple(set) => quote_schema(&Value::Array(
                set.iter().map(|t| Value::String(t.to_string())).collect(),
            )),
        },
        ValidationErrorKind::Constant { expected_value } => quote_schema(expected_value),
        ValidationErrorKind::Enum { options } => quote_schema(options),
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => quote_schema(limit),
        ValidationErrorKind::MinLength { limit }
        | ValidationErrorKind::MaxLength { limit }
        | ValidationErrorKind::MinItems { limit }
        | ValidationErrorKind::MaxItems { limit }
        | ValidationErrorKind::MinProperties { limit }
        | ValidationErrorKind::MaxProperties { limit } => limit.to_string(),
        ValidationErrorKind::Pattern { pattern } => quote_schema(&Value::String(pattern.clone())),
        ValidationErrorKind::Format { format } => quote_schema(&Value::String(format.clone())),
        _ => "a value its schema accepts".to_owned(),
    }
}

/// `additionalProperties: false`: the properties the schema declares beside
/// it (the unexpected names are the arguments' own, and not quoted).
fn declared_only(schema: &Value, schema_path: &str) -> String {
    let parent = schema_path
        .rsplit_once('/')
        .map_or("", |(parent, _)| parent);
    let declared: Vec<String> = schema
        .pointer(parent)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .keys()
                .map(|k| Value::String(k.clone()).to_string())
                .collect()
        })
        .unwrap_or_default();
    if declared.is_empty() {
        "no properties".to_owned()
    } else {
        quote_cut(format!("no properties other than {}", declared.join(", ")))
    }
}

/// A schema value as compact JSON, cut at [`EXPECTATION_BYTES`].
fn quote_schema(value: &Value) -> String {
    quote_cut(value.to_string())
}

fn quote_cut(text: String) -> String {
    if text.len() <= EXPECTATION_BYTES {
        return text;
    }
    let mut cut = crate::args::cut(&text, EXPECTATION_BYTES);
    cut.push_str("...");
    cut
}

/// Tools by name. Schemas are compiled once, at registration.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    entries: Vec<RegisteredTool>,
    /// Each name's entry; looked up on every call, so hashed with
    /// foldhash (seeded per process) rather than SipHash.
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
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
