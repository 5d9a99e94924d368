//! `check`: an agents file read, its MCP servers started and its agents
//! built, then stopped; says what the main agent has.

use std::path::Path;

use crate::build::build;
use crate::exit;
use crate::file;
use crate::store::StorePaths;
use crate::view::out;

/// `tinyagents check FILE`.
pub(crate) async fn check(path: &Path, store: Option<&Path>) -> anyhow::Result<u8> {
    let loaded = file::load(path)?;
    let paths = StorePaths::of_file(&loaded, store);
    paths.create()?;
    let team = build(&loaded, &paths).await?;
    let agent = team.main.active().agent();
    out(&format!("{}: ok", path.display()));
    out(&format!("main agent: {}", loaded.main));
    out(&format!("tools: {}", agent.tools(false).join(", ")));
    for omitted in agent.omitted_tools(false) {
        out(&format!("not offered: {omitted:?}"));
    }
    out(&format!("store: {}", paths.dir.display()));
    Ok(team.close_with(exit::OK).await)
}
