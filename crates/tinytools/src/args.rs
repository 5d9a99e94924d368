//! Argument preparation: injected arguments, the invalid-arguments policy
//! and JSON Schema validation.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{
    MAX_ARGUMENT_DEPTH, TinyAgentsError, ToolCall, nesting, nests_deeper_than, text_nesting,
};

use crate::registry::RegisteredTool;

/// What happens when well-formed arguments break the tool's schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidArgsPolicy {
    /// The run fails with `TinyAgentsError::InvalidArguments`.
    Fail,
    /// The model gets an error result naming the JSON path and what was
    /// expected, and may repair the call.
    #[default]
    ReturnToModel,
    /// First undo the mistakes small local models make (an object sent as a
    /// JSON string or inside a markdown fence, one wrapper key around the
    /// real arguments), then return what still fails to the model.
    NormalizeThenReturn,
}

/// Why arguments were not accepted.
///
/// The texts are value-free: they name the tool, where the arguments went
/// wrong and what the tool's schema expects there, but never quote what the
/// model (or a calling tool) sent, which may hold secrets or personal data.
/// The schema is public (the model is shown it); the arguments are not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    /// The model's text was not JSON.
    #[error(
        "arguments for tool '{tool}' are not valid JSON ({received_bytes} bytes received; {detail})"
    )]
    NotJson {
        /// The tool.
        tool: String,
        /// How many bytes of argument text the model sent.
        received_bytes: usize,
        /// The parser's complaint: what it expected and where (line and
        /// column), never the text itself.
        detail: String,
    },
    /// The arguments broke the schema.
    #[error(
        "invalid arguments for tool '{tool}' at '{}': schema keyword '{keyword}' expects {expected}",
        display_path(.path)
    )]
    Invalid {
        /// The tool.
        tool: String,
        /// JSON pointer of the first problem (empty for the whole value).
        path: String,
        /// The schema keyword the arguments broke (`type`, `required`,
        /// `minimum`, ...).
        keyword: String,
        /// What the schema expects at that keyword, from the schema alone
        /// (for example `"integer"`, or `property "b"` for `required`).
        expected: String,
    },
    /// The arguments nest deeper than [`MAX_ARGUMENT_DEPTH`]: every
    /// persisted form of the call (transcript, checkpoint, suspended run,
    /// session) must read back under serde_json's recursion limit. The
    /// model gets this as the call's result; even
    /// [`InvalidArgsPolicy::Fail`] does not end the run over it.
    #[error("arguments for tool '{tool}' nest {depth} levels; at most {max} are accepted")]
    TooDeep {
        /// The tool.
        tool: String,
        /// How many levels the arguments nest.
        depth: usize,
        /// The most that are accepted ([`MAX_ARGUMENT_DEPTH`]).
        max: usize,
    },
    /// The tool needs an argument the host did not supply.
    #[error("tool '{tool}' needs the host to inject '{key}', and the host supplied no value")]
    MissingInjected {
        /// The tool.
        tool: String,
        /// The argument.
        key: String,
    },
}

impl ArgumentError {
    /// Whether `policy` ends a model-issued call's run over this error:
    /// only [`InvalidArgsPolicy::Fail`] does, and never over arguments
    /// that are too deep, which always go back to the model.
    pub fn ends_run_under(&self, policy: InvalidArgsPolicy) -> bool {
        policy == InvalidArgsPolicy::Fail && !matches!(self, Self::TooDeep { .. })
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

impl From<ArgumentError> for TinyAgentsError {
    fn from(error: ArgumentError) -> Self {
        let message = error.to_string();
        match error {
            ArgumentError::Invalid { tool, path, .. } => TinyAgentsError::InvalidArguments {
                tool,
                path,
                message,
            },
            ArgumentError::NotJson { tool, .. } | ArgumentError::TooDeep { tool, .. } => {
                TinyAgentsError::InvalidArguments {
                    tool,
                    path: String::new(),
                    message,
                }
            }
            ArgumentError::MissingInjected { tool, .. } => {
                TinyAgentsError::tool_failed(tool, message)
            }
        }
    }
}

/// Prepares a call's arguments for its tool: parses, injects the host's
/// values (overwriting the model's), normalises under
/// [`InvalidArgsPolicy::NormalizeThenReturn`], and validates against the
/// schema compiled at registration. The call keeps its arguments; see
/// [`prepare_owned_arguments`] to move them instead of copying.
pub fn prepare_arguments(
    entry: &RegisteredTool,
    call: &ToolCall,
    injected: &Map<String, Value>,
    policy: InvalidArgsPolicy,
) -> Result<Value, ArgumentError> {
    let arguments = match &call.raw_arguments {
        None => call.arguments.clone(),
        Some(_) => Value::Null,
    };
    prepare_owned_arguments(
        entry,
        arguments,
        call.raw_arguments.as_deref(),
        injected,
        policy,
    )
}

/// [`prepare_arguments`] over arguments the caller gives up (no copy):
/// `arguments` are the call's JSON arguments, `raw` the model's text when it
/// was not JSON (then `arguments` are ignored).
pub fn prepare_owned_arguments(
    entry: &RegisteredTool,
    arguments: Value,
    raw: Option<&str>,
    injected: &Map<String, Value>,
    policy: InvalidArgsPolicy,
) -> Result<Value, ArgumentError> {
    let tool = &entry.spec().name;
    let mut args = match raw {
        None if arguments.is_null() => Value::Object(Map::new()),
        None => within_depth(tool, arguments)?,
        Some(raw) => from_text(tool, raw, policy)?,
    };
    inject(entry, &mut args, injected)?;
    let Err(first) = entry.validate(&args) else {
        return Ok(args);
    };
    if policy != InvalidArgsPolicy::NormalizeThenReturn {
        return Err(first);
    }
    match normalize(entry, &args) {
        Some(fixed) => {
            // Unwrapping text may have made deeper arguments than were sent.
            let mut fixed = within_depth(tool, fixed)?;
            inject(entry, &mut fixed, injected)?;
            entry.validate(&fixed).map(|()| fixed).map_err(|_| first)
        }
        None => Err(first),
    }
}

/// The arguments of a call kept as text: text that was not JSON, or that
/// nested too deep to keep as a value. Text nesting deeper than
/// [`MAX_ARGUMENT_DEPTH`] is refused as too deep (whether or not it
/// parses), not as malformed; other text is parsed out of a markdown fence
/// under [`InvalidArgsPolicy::NormalizeThenReturn`], or refused as not JSON.
fn from_text(tool: &str, raw: &str, policy: InvalidArgsPolicy) -> Result<Value, ArgumentError> {
    let depth = text_nesting(raw);
    if depth > MAX_ARGUMENT_DEPTH {
        return Err(ArgumentError::TooDeep {
            tool: tool.to_owned(),
            depth,
            max: MAX_ARGUMENT_DEPTH,
        });
    }
    match (policy, parse_fenced(raw)) {
        (InvalidArgsPolicy::NormalizeThenReturn, Some(parsed)) => Ok(parsed),
        _ => {
            // serde_json's syntax errors name what was expected and where
            // (line, column), never the text they read.
            let detail = serde_json::from_str::<Value>(raw)
                .err()
                .map_or_else(|| "not an object".to_owned(), |e| e.to_string());
            Err(ArgumentError::NotJson {
                tool: tool.to_owned(),
                received_bytes: raw.len(),
                detail,
            })
        }
    }
}

/// `arguments`, or [`ArgumentError::TooDeep`] when they nest deeper than
/// [`MAX_ARGUMENT_DEPTH`] (a check that stops at the bound).
fn within_depth(tool: &str, arguments: Value) -> Result<Value, ArgumentError> {
    if nests_deeper_than(&arguments, MAX_ARGUMENT_DEPTH) {
        return Err(ArgumentError::TooDeep {
            tool: tool.to_owned(),
            depth: nesting(&arguments),
            max: MAX_ARGUMENT_DEPTH,
        });
    }
    Ok(arguments)
}

fn inject(
    entry: &RegisteredTool,
    args: &mut Value,
    injected: &Map<String, Value>,
) -> Result<(), ArgumentError> {
    let spec = entry.spec();
    if spec.injected.is_empty() {
        return Ok(());
    }
    let Value::Object(object) = args else {
        return Ok(()); // not an object: validation names the problem
    };
    for key in &spec.injected {
        let value = injected
            .get(key)
            .ok_or_else(|| ArgumentError::MissingInjected {
                tool: spec.name.clone(),
                key: key.clone(),
            })?;
        object.insert(key.clone(), value.clone());
    }
    Ok(())
}

/// Undoes the common mistakes of small models. `None` when nothing applies.
fn normalize(entry: &RegisteredTool, args: &Value) -> Option<Value> {
    match args {
        Value::String(text) => parse_fenced(text),
        Value::Object(object) => {
            let declared = entry.spec().parameters.get("properties");
            let mut candidates = object
                .iter()
                .filter(|(key, _)| !entry.spec().injected.contains(key));
            let (key, inner) = candidates.next()?;
            if candidates.next().is_some() || declared.is_some_and(|p| p.get(key).is_some()) {
                return None;
            }
            match inner {
                Value::Object(_) => Some(inner.clone()),
                Value::String(text) => parse_fenced(text),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Parses an object written as text, possibly inside a markdown fence.
fn parse_fenced(text: &str) -> Option<Value> {
    let mut body = text.trim();
    if let Some(rest) = body.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        body = rest.strip_suffix("```").unwrap_or(rest).trim();
    }
    match serde_json::from_str::<Value>(body) {
        Ok(value @ Value::Object(_)) => Some(value),
        _ => None,
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
