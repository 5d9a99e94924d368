//! `check`: an agents file read, its stores opened, its MCP servers
//! started and its agents built, then stopped; says what the main agent
//! has, the prices, and what the build warns of.

use std::path::Path;
use std::sync::Arc;

use crate::build::{Toolbox, lock_path};
use crate::cli::Cli;
use crate::exit;
use crate::file;
use crate::store::{Place, Stores};
use crate::view::out;

/// `tinyagents check FILE [--write-lock]`.
pub(crate) async fn check(path: &Path, write_lock: bool, cli: &Cli) -> anyhow::Result<u8> {
    let loaded = file::load(path)?;
    let place = Place::choose(cli.db.as_deref(), cli.store.as_deref(), Some(&loaded));
    let stores = Stores::open(place, true).await?;
    let toolbox = if write_lock {
        // What the servers list now, whatever the old lock said.
        let toolbox = Toolbox::connect_locked(&loaded, &stores.logs, None).await?;
        let lock = lock_path(&loaded);
        let servers = toolbox.write_lock(&lock)?;
        out(&format!(
            "pinned the tools of {servers} MCP server(s) in {}",
            lock.display()
        ));
        toolbox
    } else {
        Toolbox::connect(&loaded, &stores.logs).await?
    };
    let built = toolbox.agent_and_warnings(
        &loaded,
        Arc::clone(&stores.ledger),
        Arc::clone(&stores.sessions),
    );
    let (main, warnings) = match built {
        Ok(built) => built,
        Err(error) => {
            toolbox.close().await;
            return Err(error);
        }
    };
    let agent = main.active().agent();
    out(&format!("{}: ok", path.display()));
    out(&format!("main agent: {}", loaded.main));
    out(&format!("tools: {}", agent.tools(false).join(", ")));
    for omitted in agent.omitted_tools(false) {
        out(&format!("not offered: {omitted:?}"));
    }
    if let Some(prices) = &loaded.prices {
        out(&format!(
            "prices: {} model(s), in the smallest unit of {}",
            prices.models.len(),
            if prices.currency.is_empty() {
                "an unnamed currency"
            } else {
                prices.currency.as_str()
            }
        ));
    }
    out(&format!("store: {}", stores.place.shown()));
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    toolbox.close().await;
    stores.close().await?;
    Ok(exit::OK)
}
