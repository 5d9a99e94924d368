//! Agents files: a TOML file declaring agents, their models, tools from
//! MCP servers, sub-agents, policies, limits, prices, the stores, capture
//! and the OTLP endpoint. `load` reads and checks all that can be checked
//! without starting anything (the prices file too); what needs the MCP
//! servers' tool lists (tool names) is checked when the agents are built,
//! against the same spans.

pub(crate) mod check;
mod error;
mod prices;
mod schema;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tinyagents::core::PriceTable;

pub(crate) use error::{FileError, Source};
pub(crate) use schema::{
    AgentSection, AgentsFile, LimitsSection, McpSection, Protocol, ScriptStep, ScriptUsage,
    TrustSetting,
};

/// A read and checked agents file.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Its text, for errors found later.
    pub(crate) source: Source,
    /// What it says.
    pub(crate) file: AgentsFile,
    /// The directory relative paths in it start from.
    pub(crate) dir: PathBuf,
    /// The agent `run` runs.
    pub(crate) main: String,
    /// Its prices (`[prices]`, `prices_file`), given to every agent.
    pub(crate) prices: Option<Arc<PriceTable>>,
    /// The file as a run records it: its absolute path and the hash of
    /// its bytes.
    pub(crate) identity: tinyagents::runs::AgentsFile,
}

/// Reads and checks the agents file at `path`.
pub(crate) fn load(path: &Path) -> Result<Loaded, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let identity = tinyagents::runs::AgentsFile::new(absolute.to_string_lossy(), text.as_bytes());
    let source = Source::new(path, text);
    let file = parse(&source)?;
    let main = check::check(&source, &file)?;
    let dir = absolute
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned);
    let prices = prices::price_table(&source, &file, &dir)?.map(Arc::new);
    Ok(Loaded {
        source,
        file,
        dir,
        main,
        prices,
        identity,
    })
}

impl Loaded {
    /// Whether some agent caps money (`max_cost`).
    pub(crate) fn caps_cost(&self) -> bool {
        self.file
            .agents
            .values()
            .any(|agent| agent.get_ref().limits.max_cost.is_some())
    }
}

/// Parses the TOML (an [`AgentsFile`], a prices file); an error names the
/// key path serde was at, the line and what was expected.
fn parse<T: DeserializeOwned>(source: &Source) -> Result<T, FileError> {
    let deserializer = toml::de::Deserializer::parse(source.text())
        .map_err(|e| source.error(e.span(), "", e.message().to_owned()))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = key_path(e.path());
        let inner = e.into_inner();
        source.error(inner.span(), key, inner.message().to_owned())
    })
}

/// The dotted key of `path` (`agents.a.script[0].tool`), without the
/// segments `toml::Spanned` adds.
fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut key = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Map { key: name } if name.starts_with("$__serde_spanned") => {}
            Segment::Map { key: name } | Segment::Enum { variant: name } => {
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(name);
            }
            Segment::Seq { index } => key.push_str(&format!("[{index}]")),
            Segment::Unknown => {}
        }
    }
    key
}
