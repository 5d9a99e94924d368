//! What an agents file says, as serde reads it. Every table refuses keys
//! it does not know, so a misspelt key is an error naming it.

use std::collections::BTreeMap;

use serde::Deserialize;
use tinyagents::core::Cost;
use toml::Spanned;

use super::prices::{Amount, PricesSection};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentsFile {
    /// The agent `run` runs: the only one, or the one named here.
    #[serde(default)]
    pub(crate) main: Option<Spanned<String>>,
    /// Where the ledger, the session store and the run records live: a
    /// directory, or a PostgreSQL database.
    #[serde(default)]
    pub(crate) store: StoreSection,
    /// Prompts, completions, arguments and results in events and traces.
    #[serde(default)]
    pub(crate) capture: CaptureSection,
    /// OTLP export of the run's spans.
    #[serde(default)]
    pub(crate) telemetry: Option<TelemetrySection>,
    /// MCP servers whose tools the agents may use, by name.
    #[serde(default)]
    pub(crate) mcp: BTreeMap<String, McpSection>,
    /// The models' prices (the currency's smallest unit per million
    /// tokens), over those of `prices_file`.
    #[serde(default)]
    pub(crate) prices: Option<Spanned<PricesSection>>,
    /// A JSON or TOML file of prices, in the shape of `[prices]` (relative
    /// to the agents file).
    #[serde(default)]
    pub(crate) prices_file: Option<Spanned<String>>,
    /// The agents, by id.
    #[serde(default)]
    pub(crate) agents: BTreeMap<String, Spanned<AgentSection>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreSection {
    /// The directory of the three files (relative to the agents file);
    /// `.tinyagents` in the current directory when absent.
    #[serde(default)]
    pub(crate) dir: Option<Spanned<String>>,
    /// The ledger's SQLite file (relative to `dir`).
    #[serde(default)]
    pub(crate) ledger: Option<Spanned<String>>,
    /// The session store's SQLite file (relative to `dir`).
    #[serde(default)]
    pub(crate) sessions: Option<Spanned<String>>,
    /// A PostgreSQL database for the ledger, the sessions and the run
    /// records instead of the directory (`postgres://…`); the command
    /// line's `--db` (or `TINYAGENTS_DATABASE_URL`) overrides it.
    #[serde(default)]
    pub(crate) url: Option<Spanned<String>>,
}

/// `[capture]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaptureSection {
    /// Prompts and completions.
    #[serde(default)]
    pub(crate) model_io: bool,
    /// Tool arguments and results.
    #[serde(default)]
    pub(crate) tool_io: bool,
}

/// `[telemetry]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetrySection {
    /// The OTLP endpoint, like `http://127.0.0.1:4318/v1/traces`.
    pub(crate) otlp_endpoint: Spanned<String>,
    /// `http` (HTTP/protobuf, the default) or `grpc`.
    #[serde(default)]
    pub(crate) protocol: Protocol,
    /// The `service.name` of the exported spans (`tinyagents`).
    #[serde(default)]
    pub(crate) service_name: Option<String>,
}

/// The OTLP protocol.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Protocol {
    /// HTTP/protobuf.
    #[default]
    Http,
    /// gRPC.
    Grpc,
}

/// `[mcp.NAME]`: one MCP server, over stdio (`command`) or HTTP (`url`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpSection {
    /// The program to start (stdio).
    #[serde(default)]
    pub(crate) command: Option<Spanned<String>>,
    /// Its arguments.
    #[serde(default)]
    pub(crate) args: Vec<String>,
    /// Its environment, on top of this process's.
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    /// Its working directory (relative to the agents file; the agents
    /// file's directory when absent).
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    /// A Streamable HTTP endpoint, instead of `command`.
    #[serde(default)]
    pub(crate) url: Option<Spanned<String>>,
    /// The prefix of its tools' names (`{prefix}_{tool}`); the server's
    /// name when absent, none when empty.
    #[serde(default)]
    pub(crate) prefix: Option<String>,
    /// Treat every tool as unannotated (exclusive, destructive, open-world).
    #[serde(default)]
    pub(crate) ignore_annotations: bool,
    /// Whether the server's annotations are facts (`trusted`) or claims
    /// that loosen nothing (`untrusted`, the default).
    #[serde(default)]
    pub(crate) trust: Option<TrustSetting>,
    /// Seconds to start, initialize and list its tools (30).
    #[serde(default)]
    pub(crate) connect_timeout_secs: Option<u64>,
    /// Seconds a call may take before it is cancelled (300).
    #[serde(default)]
    pub(crate) request_timeout_secs: Option<u64>,
}

/// `[mcp.NAME] trust`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TrustSetting {
    /// Annotations are facts.
    Trusted,
    /// Annotations are claims (the default).
    Untrusted,
}

/// `[agents.ID]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSection {
    /// What it does: the description of its tool when another agent calls
    /// it.
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// A `TINYAGENTS_MODEL` spec (`openai:gpt-4o`, `anthropic:…`,
    /// `ollama:…`, `openai-compatible:URL#MODEL`), `env` for the variable's
    /// model, or `scripted` for `script`.
    pub(crate) model: Spanned<String>,
    /// The scripted model's answers, by turn of each request.
    #[serde(default)]
    pub(crate) script: Option<Spanned<Vec<ScriptStep>>>,
    /// The standing instruction.
    #[serde(default)]
    pub(crate) instructions: Option<String>,
    /// Tools by name (MCP tools, as `{prefix}_{tool}`).
    #[serde(default)]
    pub(crate) tools: Vec<Spanned<String>>,
    /// Every tool of these MCP servers.
    #[serde(default)]
    pub(crate) servers: Vec<Spanned<String>>,
    /// Other agents of this file, called as tools (by their id).
    #[serde(default)]
    pub(crate) agents: Vec<Spanned<String>>,
    /// What its calls may do.
    #[serde(default)]
    pub(crate) policy: PolicySection,
    /// Its run limits.
    #[serde(default)]
    pub(crate) limits: LimitsSection,
}

/// One answer of a scripted model: `text`, one `tool` call, or several
/// `calls` in one turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptStep {
    /// A final answer.
    #[serde(default)]
    pub(crate) text: Option<String>,
    /// One tool call: its tool.
    #[serde(default)]
    pub(crate) tool: Option<String>,
    /// One tool call: its arguments (a table; `{}` when absent).
    #[serde(default)]
    pub(crate) arguments: Option<serde_json::Value>,
    /// Several tool calls in one turn.
    #[serde(default)]
    pub(crate) calls: Vec<ScriptCall>,
    /// The tokens this answer reports.
    #[serde(default)]
    pub(crate) usage: Option<ScriptUsage>,
}

/// One call of a scripted turn.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptCall {
    /// Its tool.
    pub(crate) tool: String,
    /// Its arguments.
    #[serde(default)]
    pub(crate) arguments: Option<serde_json::Value>,
}

/// Tokens a scripted answer reports.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptUsage {
    /// Prompt tokens.
    pub(crate) input: u64,
    /// Completion tokens.
    pub(crate) output: u64,
    /// Of the prompt tokens, those read from the provider's cache.
    #[serde(default)]
    pub(crate) cached: u64,
    /// Of the completion tokens, those spent reasoning.
    #[serde(default)]
    pub(crate) reasoning: u64,
}

/// `[agents.ID.policy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicySection {
    /// Only these tools run (an allow-list); every tool when absent.
    #[serde(default)]
    pub(crate) allow: Option<Vec<Spanned<String>>>,
    /// These tools are never offered.
    #[serde(default)]
    pub(crate) deny: Vec<Spanned<String>>,
    /// Calls of tools with these side effects are refused: `network_egress`,
    /// `file_write`, `destructive`, `payment`, `code_execution`,
    /// `messaging`, `credentials`, `infrastructure`.
    #[serde(default)]
    pub(crate) deny_side_effects: Vec<Spanned<String>>,
    /// Every call of these tools waits for a person.
    #[serde(default)]
    pub(crate) require_approval: Vec<Spanned<String>>,
    /// These tools run without asking, even when their spec asks.
    #[serde(default)]
    pub(crate) auto_approve: Vec<Spanned<String>>,
    /// Only read-only tools run.
    #[serde(default)]
    pub(crate) plan_mode: bool,
}

/// `[agents.ID.limits]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsSection {
    /// Model calls per run (40).
    #[serde(default)]
    pub(crate) max_model_calls: Option<u32>,
    /// Tool calls per run.
    #[serde(default)]
    pub(crate) max_tool_calls: Option<u32>,
    /// Tokens of a run and the runs it delegates to.
    #[serde(default)]
    pub(crate) max_tokens: Option<u64>,
    /// Money of a run and the runs it delegates to, in the smallest unit
    /// of the prices' currency.
    #[serde(default)]
    pub(crate) max_cost: Option<Spanned<Amount<Cost>>>,
    /// Calls running at once.
    #[serde(default)]
    pub(crate) max_parallel_calls: Option<u32>,
    /// Seconds a run may take.
    #[serde(default)]
    pub(crate) wall_clock_secs: Option<u64>,
    /// Seconds one tool call may take.
    #[serde(default)]
    pub(crate) tool_timeout_secs: Option<u64>,
    /// How deep tools may nest calls.
    #[serde(default)]
    pub(crate) max_nested_depth: Option<u32>,
    /// How deep agents may call agents.
    #[serde(default)]
    pub(crate) max_depth: Option<u32>,
}
