//! Workspaces: the directories an agent's tools may touch. Each built agent
//! resolves its own definition's directories; [`WorkspaceWrap`] hands them
//! to every call of its tools (`ToolRunContext::workspaces`), and a tool
//! enforces them ([`WorkspaceReadTool`] is one that does).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tinyagents_core::{TinyAgentsError, ToolCall, ToolResult};
use tinyagents_middleware::{Next, ToolCallContext, ToolMiddleware};
use tinytools::{Tool, ToolCallOptions, ToolRunContext, ToolSpec};

use crate::definition::AgentDefinition;
use crate::error::BuildError;

/// Resolves the directories of a definition.
pub trait WorkspaceResolver: Send + Sync {
    /// The directories `definition`'s tools may touch.
    fn resolve(&self, definition: &AgentDefinition) -> Result<Vec<PathBuf>, BuildError>;
}

/// The default resolver: the definition's own directories, made absolute
/// and canonical. A directory that does not exist is a build error.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefinitionWorkspaces;

impl WorkspaceResolver for DefinitionWorkspaces {
    fn resolve(&self, definition: &AgentDefinition) -> Result<Vec<PathBuf>, BuildError> {
        definition
            .workspaces
            .iter()
            .map(|dir| {
                std::fs::canonicalize(dir).map_err(|error| BuildError::Workspace {
                    agent: definition.id.clone(),
                    message: format!("{}: {error}", dir.display()),
                    source: Some(error.into()),
                })
            })
            .collect()
    }
}

/// Installs an agent's workspaces in the context of each of its tool calls
/// (model-issued and nested). The orchestrator puts it outermost, so host
/// wraps see the workspaces too.
#[derive(Debug, Clone)]
pub struct WorkspaceWrap {
    workspaces: Arc<[PathBuf]>,
}

impl WorkspaceWrap {
    /// A wrap that installs `workspaces`.
    pub fn new(workspaces: Arc<[PathBuf]>) -> Self {
        Self { workspaces }
    }
}

#[async_trait]
impl ToolMiddleware for WorkspaceWrap {
    fn name(&self) -> &str {
        "workspaces"
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        let tool_context = ctx
            .tool_context
            .clone()
            .with_workspaces(Arc::clone(&self.workspaces));
        let inner = ToolCallContext {
            tool_context: &tool_context,
            ..*ctx
        };
        next.run(&inner, call).await
    }
}

/// The canonical form of `path` when it lies inside one of `workspaces`
/// (a relative path is taken from the first workspace); `Err` says why not.
/// Symbolic links and `..` are resolved before the check, so neither
/// escapes a workspace.
pub fn resolve_in_workspaces(path: &Path, workspaces: &[PathBuf]) -> Result<PathBuf, String> {
    let Some(first) = workspaces.first() else {
        return Err("this agent has no workspace, so it may not touch files".to_owned());
    };
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        first.join(path)
    };
    let canonical = std::fs::canonicalize(&joined)
        .map_err(|error| format!("cannot open '{}': {error}", path.display()))?;
    let inside = workspaces.iter().any(|dir| {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        canonical.starts_with(dir)
    });
    if inside {
        Ok(canonical)
    } else {
        Err(format!(
            "'{}' is outside this agent's workspaces",
            path.display()
        ))
    }
}

/// The most bytes [`WorkspaceReadTool`] returns.
const MAX_READ_BYTES: u64 = 64 * 1024;

/// `read_file(path)`: reads a text file inside the calling agent's
/// workspaces and refuses any other path (as an error result the model
/// reads). Read-only.
#[derive(Debug, Clone)]
pub struct WorkspaceReadTool {
    spec: ToolSpec,
}

impl Default for WorkspaceReadTool {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkspaceReadTool {
    /// The tool, named `read_file`.
    pub fn new() -> Self {
        Self {
            spec: ToolSpec::new(
                "read_file",
                "Reads a text file in the agent's workspace. Relative paths start at the first workspace.",
                json!({
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "The file to read."}},
                    "required": ["path"],
                    "additionalProperties": false
                }),
            )
            .read_only(),
        }
    }
}

#[async_trait]
impl Tool for WorkspaceReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let path = PathBuf::from(args.get("path").and_then(Value::as_str).unwrap_or(""));
        let workspaces: Vec<PathBuf> = context.map(|c| c.workspaces().to_vec()).unwrap_or_default();
        let read = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let file = resolve_in_workspaces(&path, &workspaces)?;
            let mut text = String::new();
            let handle = std::fs::File::open(&file)
                .map_err(|error| format!("cannot open '{}': {error}", path.display()))?;
            std::io::Read::read_to_string(
                &mut std::io::Read::take(handle, MAX_READ_BYTES),
                &mut text,
            )
            .map_err(|error| format!("cannot read '{}': {error}", path.display()))?;
            Ok(text)
        })
        .await?;
        Ok(match read {
            Ok(text) => ToolResult::text(text),
            Err(refusal) => ToolResult::error(refusal),
        })
    }
}
