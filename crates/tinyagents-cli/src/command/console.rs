//! `console`: the web console over the store (`tinyagents::console`),
//! served by this process until Ctrl-C. A run whose waiting calls are all
//! decided in the console, or that a person asks to recover, is run by
//! `tinyagents resume` or `recover` in a process of its own, over the same
//! store (its output in a log beside the store), unless workers take them.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use serde_json::json;
use tinyagents::console::{Console, ConsoleHost, ConsoleOptions, ConsoleStores, HostError};
use tinyagents::core::RunId;

use super::BadInput;
use crate::cli::{Cli, Command};
use crate::exit;
use crate::signal::Interrupt;
use crate::store::{DEFAULT_STORE_DIR, Place, Stores, person};
use crate::view::out;

/// The environment variable that sets the console's token (otherwise one
/// is made and printed).
pub(crate) const TOKEN_ENV: &str = "TINYAGENTS_CONSOLE_TOKEN";

/// `tinyagents console [--listen ADDR:PORT] [--by NAME] [--leave-to-workers]`.
pub(crate) async fn console(cli: &Cli, place: Place) -> anyhow::Result<u8> {
    let Command::Console {
        listen,
        by,
        leave_to_workers,
    } = &cli.command
    else {
        return Ok(exit::USAGE);
    };
    let addr: std::net::SocketAddr = listen.parse().map_err(|_| {
        BadInput::error(format!(
            "--listen {listen}: not an address and port (like 127.0.0.1:8740)"
        ))
    })?;
    let stores = Stores::open(place.clone(), false).await?;
    let logs = match &place {
        Place::Dir(paths) => paths.dir.join("console"),
        Place::Database(_) => PathBuf::from(DEFAULT_STORE_DIR).join("console"),
    };
    let options = ConsoleOptions {
        token: std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()),
        operator: person(by.as_deref()),
        hosts: Vec::new(),
        store_shown: place.shown(),
    };
    let console_stores = ConsoleStores {
        runs: Arc::clone(&stores.runs),
        ledger: Arc::clone(&stores.ledger) as _,
        sessions: Arc::clone(&stores.sessions),
    };
    let console = if *leave_to_workers {
        Console::new(console_stores, options)?
    } else {
        let host = Spawner {
            exe: std::env::current_exe().context("finding this program to run resumes")?,
            place: place.clone(),
            logs,
        };
        Console::with_host(console_stores, options, Arc::new(host))?
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let bound = listener.local_addr()?;
    let url = console.url(bound);
    if cli.json {
        out(
            &json!({"type": "console", "url": url, "listen": bound.to_string(),
                    "token": console.token(), "store": place.shown()})
            .to_string(),
        );
    } else {
        out(&format!("console: {url}"));
        eprintln!(
            "serving the runs of {} on {bound}; open the address above (it carries the token); Ctrl-C stops it",
            place.shown()
        );
        if !bound.ip().is_loopback() {
            eprintln!(
                "warning: {bound} is reachable from other machines, over plain HTTP: the token is all that stands in the way"
            );
        }
    }
    let interrupt = Interrupt::install();
    let stop = {
        let interrupt = interrupt.clone();
        async move { interrupt.wait().await }
    };
    console.serve(listener, stop).await?;
    stores.close().await?;
    Ok(exit::OK)
}

/// Runs `tinyagents resume` or `recover` for the console, each in a
/// process of its own over the same store.
struct Spawner {
    exe: PathBuf,
    place: Place,
    logs: PathBuf,
}

impl Spawner {
    fn start(&self, command: &str, run: &RunId) -> Result<String, HostError> {
        std::fs::create_dir_all(&self.logs)
            .map_err(|e| HostError::new(format!("could not make {}: {e}", self.logs.display())))?;
        let stamp = tinyagents::ledger::Timestamp::now().as_millis();
        let safe: String = run
            .as_str()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let log_path = self.logs.join(format!("{safe}-{command}-{stamp}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(|e| HostError::new(format!("could not write {}: {e}", log_path.display())))?;
        let err_log = log
            .try_clone()
            .map_err(|e| HostError::new(format!("could not write {}: {e}", log_path.display())))?;
        let mut child = tokio::process::Command::new(&self.exe);
        match &self.place {
            Place::Dir(paths) => {
                child.arg("--store").arg(&paths.dir);
            }
            // The connection string goes by the environment, not the
            // command line others can read.
            Place::Database(url) => {
                child.env("TINYAGENTS_DATABASE_URL", url);
            }
        }
        child
            .args([command, run.as_str(), "--output", "json", "--no-input"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        let mut process = child
            .spawn()
            .map_err(|e| HostError::new(format!("could not start `tinyagents {command}`: {e}")))?;
        let pid = process.id().unwrap_or(0);
        let (what, shown) = (command.to_owned(), log_path.display().to_string());
        let target = run.clone();
        tokio::spawn(async move {
            match process.wait().await {
                Ok(status) if status.success() => {}
                Ok(status) => eprintln!(
                    "warning: `tinyagents {what} {target}` ended with {status}; its output is in {shown}"
                ),
                Err(error) => eprintln!("warning: `tinyagents {what} {target}`: {error}"),
            }
        });
        Ok(format!(
            "{} in process {pid} (`tinyagents {command}`; its output: {})",
            if command == "resume" {
                "resuming"
            } else {
                "recovering"
            },
            log_path.display()
        ))
    }
}

#[async_trait]
impl ConsoleHost for Spawner {
    async fn resume(&self, run: &RunId) -> Result<String, HostError> {
        self.start("resume", run)
    }

    async fn recover(&self, run: &RunId) -> Result<String, HostError> {
        self.start("recover", run)
    }
}
