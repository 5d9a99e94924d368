//! The real third-party servers the tests run against, installed by the
//! project itself, pinned, with npm, when missing or of another version:
//!
//! - `@copilotkit/aimock` in `.tools/aimock`: the OpenAI- and
//!   Anthropic-compatible server of the provider interop tests
//!   (`tests/providers/`);
//! - in `.tools/mcp`: the reference MCP servers
//!   `@modelcontextprotocol/server-everything` and `server-filesystem`,
//!   and the official TypeScript SDK `@modelcontextprotocol/sdk` the MCP
//!   interop tests' client (`tests/mcp/js/client.mjs`) is written on.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{root, secs};

/// The aimock release the interop tests' fixtures are written for (the
/// tests check the installed one is this).
pub(crate) const AIMOCK_VERSION: &str = "1.43.0";

/// The reference MCP server with every feature (tools, progress, ...).
pub(crate) const MCP_EVERYTHING_VERSION: &str = "2026.8.31";
/// The reference MCP filesystem server (read and write tools).
pub(crate) const MCP_FILESYSTEM_VERSION: &str = "2026.8.31";
/// The official TypeScript MCP SDK (client of the MCP interop tests).
pub(crate) const MCP_SDK_VERSION: &str = "1.32.2";

/// The packages installed into `.tools/mcp`, each with its pinned version.
const MCP_PEERS: [(&str, &str); 3] = [
    (
        "@modelcontextprotocol/server-everything",
        MCP_EVERYTHING_VERSION,
    ),
    (
        "@modelcontextprotocol/server-filesystem",
        MCP_FILESYSTEM_VERSION,
    ),
    ("@modelcontextprotocol/sdk", MCP_SDK_VERSION),
];

/// The version of npm package `package` installed under `dir`, if any.
fn installed_version(dir: &Path, package: &str) -> Option<String> {
    let manifest = dir.join("node_modules").join(package).join("package.json");
    let text = fs::read_to_string(manifest).ok()?;
    let at = text.find("\"version\"")?;
    let rest = &text[at + "\"version\"".len()..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

/// Whether every `(package, version)` of `pins` is installed under `dir`.
fn all_installed(dir: &Path, pins: &[(&str, &str)]) -> bool {
    pins.iter()
        .all(|(package, version)| installed_version(dir, package).as_deref() == Some(*version))
}

/// Installs the pinned `pins` under `dir` with one `npm install`, then
/// checks the versions it installed; `need` says who needs them (for the
/// error when npm is missing).
fn npm_install(dir: &Path, pins: &[(&str, &str)], need: &str) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let specs: Vec<String> = pins
        .iter()
        .map(|(package, version)| format!("{package}@{version}"))
        .collect();
    let specs_text = specs.join(" ");
    println!(
        "$ npm install --prefix {} --no-audit --no-fund --no-package-lock {specs_text}",
        dir.display()
    );
    let started = Instant::now();
    let status = Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(dir)
        .args(["--no-audit", "--no-fund", "--no-package-lock"])
        .args(&specs)
        .status()
        .map_err(|e| {
            format!(
                "npm could not start ({e}): {need} need Node.js and npm to install {specs_text}"
            )
        })?;
    if !status.success() {
        return Err(format!("`npm install {specs_text}` failed ({status})"));
    }
    for (package, version) in pins {
        match installed_version(dir, package) {
            Some(got) if got == *version => {}
            other => {
                return Err(format!(
                    "npm installed {package} {other:?} in {}, not {version}",
                    dir.display()
                ));
            }
        }
    }
    println!("installed {specs_text} in {}", secs(started.elapsed()));
    Ok(())
}

/// Installs the pinned aimock with npm unless it is there already.
pub(crate) fn ensure_aimock() -> Result<(), String> {
    let dir = root().join(".tools/aimock");
    let pins = [("@copilotkit/aimock", AIMOCK_VERSION)];
    if all_installed(&dir, &pins) {
        return Ok(());
    }
    println!(
        "aimock {AIMOCK_VERSION} is missing: installing it into {}",
        dir.display()
    );
    npm_install(&dir, &pins, "the provider interop tests")
}

/// Installs the pinned MCP servers and SDK ([`MCP_PEERS`]) into
/// `.tools/mcp` with npm unless all of them are there already.
pub(crate) fn ensure_mcp_peers() -> Result<(), String> {
    let dir = root().join(".tools/mcp");
    if all_installed(&dir, &MCP_PEERS) {
        return Ok(());
    }
    println!(
        "the pinned MCP servers and SDK are missing or of another version: installing them into {}",
        dir.display()
    );
    npm_install(&dir, &MCP_PEERS, "the MCP interop tests")
}

/// tmux, which the command line's live-view tests drive (`send-keys`,
/// `capture-pane`): Debian's package, installed with apt-get when missing.
pub(crate) fn ensure_tmux() -> Result<(), String> {
    let present = |program: &str, arg: &str| {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if present("tmux", "-V") {
        return Ok(());
    }
    println!("tmux is missing: installing Debian's package with apt-get");
    let started = Instant::now();
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("apt-get could not start ({e}): install tmux by hand"))
    };
    let installed = apt(&["install", "-y", "-qq", "tmux"])?;
    if !installed.success() {
        // The package lists may be missing on a fresh machine.
        let updated = apt(&["update", "-qq"])?;
        let again = apt(&["install", "-y", "-qq", "tmux"])?;
        if !updated.success() || !again.success() {
            return Err(
                "`apt-get install tmux` failed: the live-view tests need tmux (run as root, \
                 or install it)"
                    .to_owned(),
            );
        }
    }
    if !present("tmux", "-V") {
        return Err("apt-get installed tmux, but `tmux -V` does not run".to_owned());
    }
    println!("installed tmux in {}", secs(started.elapsed()));
    Ok(())
}

/// `cargo xtask peers`: everything the tests and the examples run
/// against, installed now.
pub(crate) fn ensure_all() -> Result<(), String> {
    ensure_aimock()?;
    ensure_mcp_peers()?;
    ensure_tmux()
}
