//! The real third-party programs the tests run against, installed by the
//! project itself when missing. Pinned, with npm, when missing or of
//! another version:
//!
//! - `@copilotkit/aimock` in `.tools/aimock`: the OpenAI- and
//!   Anthropic-compatible server of the provider interop tests
//!   (`tests/providers/`);
//! - in `.tools/mcp`: the reference MCP servers
//!   `@modelcontextprotocol/server-everything` and `server-filesystem`,
//!   and the official TypeScript SDK `@modelcontextprotocol/sdk` the MCP
//!   interop tests' client (`tests/mcp/js/client.mjs`) is written on;
//! - `playwright-core` in `.tools/browser`: the browser driver (no
//!   browsers of its own) with which the web console's tests
//!   (`crates/tinyagents-cli/tests/cli/console.spec.mjs`) drive Chromium.
//!
//! From Debian's packages, with apt-get, when missing (the distribution's
//! version, not pinned):
//!
//! - tmux, which the command line's live-view tests drive;
//! - Chromium (`chromium`, at `/usr/bin/chromium`), the browser the web
//!   console's tests drive;
//! - PostgreSQL's server (`postgresql`), whose `initdb` and `pg_ctl` the
//!   `tinyagents-postgres` tests start throwaway clusters with (installed
//!   without the package's default cluster, which nothing uses).
//! - valgrind, whose callgrind and memcheck count the instructions and
//!   allocations the instruction gate (`bench --instructions --check`)
//!   compares with its baseline.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
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

/// The browser driver of the web console's tests (Chromium itself is
/// Debian's, [`ensure_chromium`]).
pub(crate) const PLAYWRIGHT_CORE_VERSION: &str = "1.65.2";

/// The packages installed into `.tools/browser`.
const BROWSER_PEERS: [(&str, &str); 1] = [("playwright-core", PLAYWRIGHT_CORE_VERSION)];

/// Where the web console's tests find Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

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

/// Installs the pinned `playwright-core` ([`BROWSER_PEERS`]) into
/// `.tools/browser` with npm unless it is there already.
pub(crate) fn ensure_browser_driver() -> Result<(), String> {
    let dir = root().join(".tools/browser");
    if all_installed(&dir, &BROWSER_PEERS) {
        return Ok(());
    }
    println!(
        "playwright-core {PLAYWRIGHT_CORE_VERSION} is missing or of another version: installing it into {}",
        dir.display()
    );
    npm_install(&dir, &BROWSER_PEERS, "the web console's tests")
}

/// Runs `apt-get` with `args`, noninteractive: no debconf question, and
/// where a package would ask about a configuration file, the file on disk
/// is kept.
fn apt_get(args: &[&str], package: &str) -> Result<ExitStatus, String> {
    Command::new("apt-get")
        .args([
            "-o",
            "Dpkg::Options::=--force-confdef",
            "-o",
            "Dpkg::Options::=--force-confold",
        ])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("apt-get could not start ({e}): install {package} by hand"))
}

/// Installs Debian's `package` with apt-get; when that fails, updates the
/// package lists (a fresh machine may have none) and tries once more.
/// `need` says who needs it (for the error).
fn apt_install(package: &str, need: &str) -> Result<(), String> {
    let install = ["install", "-y", "-qq", "--no-install-recommends", package];
    println!("$ apt-get install -y -qq --no-install-recommends {package}");
    if apt_get(&install, package)?.success() {
        return Ok(());
    }
    println!("$ apt-get update -qq (then the install again)");
    let updated = apt_get(&["update", "-qq"], package)?;
    let again = apt_get(&install, package)?;
    if updated.success() && again.success() {
        Ok(())
    } else {
        Err(format!(
            "`apt-get install {package}` failed: {need} (run as root, or install it)"
        ))
    }
}

/// tmux, which the command line's live-view tests drive (`send-keys`,
/// `capture-pane`): Debian's package, installed with apt-get when missing.
pub(crate) fn ensure_tmux() -> Result<(), String> {
    ensure_program("tmux", "-V", "the live-view tests need tmux")
}

/// valgrind, with which the instruction gate counts (callgrind, memcheck):
/// Debian's package when `valgrind --version` does not run. Nothing to do
/// when `VALGRIND` names another binary (`bench --instructions` runs that
/// one, and says so when it does not run).
pub(crate) fn ensure_valgrind() -> Result<(), String> {
    if env::var_os("VALGRIND").is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    ensure_program(
        "valgrind",
        "--version",
        "the instruction gate counts instructions and allocations with valgrind",
    )
}

/// Chromium at `/usr/bin/chromium`, which the web console's tests drive
/// (headless, through `playwright-core`): Debian's `chromium` package when
/// it is missing.
pub(crate) fn ensure_chromium() -> Result<(), String> {
    let present = || {
        Command::new(CHROMIUM)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if present() {
        return Ok(());
    }
    println!("{CHROMIUM} is missing: installing Debian's chromium package with apt-get");
    let started = Instant::now();
    apt_install("chromium", "the web console's tests drive Chromium")?;
    if !present() {
        return Err(format!(
            "apt-get installed chromium, but `{CHROMIUM} --version` does not run"
        ));
    }
    println!("installed chromium in {}", secs(started.elapsed()));
    Ok(())
}

/// `program` (Debian's package of the same name when `program ARG` does
/// not run).
fn ensure_program(program: &str, arg: &str, need: &str) -> Result<(), String> {
    let present = || {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if present() {
        return Ok(());
    }
    println!("{program} is missing: installing Debian's package with apt-get");
    let started = Instant::now();
    apt_install(program, need)?;
    if !present() {
        return Err(format!(
            "apt-get installed {program}, but `{program} {arg}` does not run"
        ));
    }
    println!("installed {program} in {}", secs(started.elapsed()));
    Ok(())
}

/// What `initdb --version` in `dir` says, if it runs.
fn initdb_version(dir: &Path) -> Option<String> {
    let out = Command::new(dir.join("initdb"))
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The directory of PostgreSQL's server binaries the `tinyagents-postgres`
/// tests would use when `TINYAGENTS_PG_BIN` is not set, searched as they
/// search (`src/testing.rs`): the newest `/usr/lib/postgresql/*/bin`, else
/// the `PATH`; it must hold an `initdb` that runs.
fn postgres_bin() -> Option<(PathBuf, String)> {
    let version_of = |dir: PathBuf| initdb_version(&dir).map(|v| (dir, v));
    let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, dir)) = debian.pop() {
        return version_of(dir);
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .and_then(version_of)
}

/// Where Debian's `postgresql-common` reads settings for the clusters its
/// packages create (included by `/etc/postgresql-common/createcluster.conf`).
const CREATECLUSTER_DIR: &str = "/etc/postgresql-common/createcluster.d";

/// PostgreSQL's server, whose `initdb` and `pg_ctl` the `tinyagents-postgres`
/// tests start throwaway clusters with: Debian's `postgresql` package,
/// installed with apt-get when no server binaries are found (nothing to do
/// when `TINYAGENTS_PG_URL` names a server for the tests, and only a check
/// when `TINYAGENTS_PG_BIN` names the binaries' directory). The package
/// would create and start a default cluster (`main`, port 5432) that
/// nothing here uses; a `create_main_cluster = false` setting, in place
/// only during the install, stops it, so no server is left running.
pub(crate) fn ensure_postgres() -> Result<(), String> {
    if env::var_os("TINYAGENTS_PG_URL").is_some_and(|u| !u.is_empty()) {
        println!("PostgreSQL: the tests use the server of TINYAGENTS_PG_URL; nothing to install");
        return Ok(());
    }
    if let Some(dir) = env::var_os("TINYAGENTS_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return match initdb_version(&dir) {
            Some(version) => {
                println!(
                    "PostgreSQL: {version} in {} (TINYAGENTS_PG_BIN; nothing to install)",
                    dir.display()
                );
                Ok(())
            }
            None => Err(format!(
                "TINYAGENTS_PG_BIN is {}, which holds no initdb that runs: point it at the \
                 directory of PostgreSQL's server binaries, or unset it",
                dir.display()
            )),
        };
    }
    if let Some((dir, version)) = postgres_bin() {
        println!(
            "PostgreSQL: {version} in {} (nothing to install)",
            dir.display()
        );
        return Ok(());
    }
    println!(
        "PostgreSQL's server (initdb, pg_ctl) is missing: installing Debian's `postgresql` \
         package with apt-get, without its default cluster (the tests start their own)"
    );
    let started = Instant::now();
    let setting = Path::new(CREATECLUSTER_DIR).join("tinyagents-xtask.conf");
    let placed = !setting.exists();
    if placed {
        fs::create_dir_all(CREATECLUSTER_DIR)
            .and_then(|()| {
                fs::write(
                    &setting,
                    "# Written by `cargo xtask peers` for the time of its install.\n\
                     create_main_cluster = false\n",
                )
            })
            .map_err(|e| {
                format!(
                    "cannot write {} ({e}): installing PostgreSQL needs root (or install \
                     Debian's `postgresql` package, or set TINYAGENTS_PG_URL)",
                    setting.display()
                )
            })?;
        println!("wrote {} (create_main_cluster = false)", setting.display());
    }
    let installed = apt_install(
        "postgresql",
        "the tinyagents-postgres tests need PostgreSQL's server (or TINYAGENTS_PG_URL)",
    );
    if placed {
        // Only for this install: a later one of the user's gets the default.
        let _ = fs::remove_file(&setting);
    }
    installed?;
    let Some((dir, version)) = postgres_bin() else {
        return Err(
            "apt-get installed postgresql, but no /usr/lib/postgresql/*/bin/initdb runs".to_owned(),
        );
    };
    println!(
        "installed {version} ({}) in {}",
        dir.display(),
        secs(started.elapsed())
    );
    Ok(())
}

/// `cargo xtask peers`: everything the tests and the examples run
/// against, installed now.
pub(crate) fn ensure_all() -> Result<(), String> {
    ensure_aimock()?;
    ensure_mcp_peers()?;
    ensure_browser_driver()?;
    ensure_tmux()?;
    ensure_chromium()?;
    ensure_postgres()?;
    ensure_valgrind()
}
