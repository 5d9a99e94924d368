//! The real third-party servers the tests run against, installed by the
//! project itself: `@copilotkit/aimock` (npm), the OpenAI- and
//! Anthropic-compatible server of the provider interop tests
//! (`tests/providers/`), pinned and installed into `.tools/aimock` when it
//! is missing or of another version.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::{root, secs};

/// The aimock release the interop tests' fixtures are written for (the
/// tests check the installed one is this).
pub(crate) const AIMOCK_VERSION: &str = "1.43.0";

fn aimock_dir() -> PathBuf {
    root().join(".tools/aimock")
}

/// The installed aimock's version, if any.
fn installed_aimock() -> Option<String> {
    let manifest = aimock_dir().join("node_modules/@copilotkit/aimock/package.json");
    let text = fs::read_to_string(manifest).ok()?;
    let at = text.find("\"version\"")?;
    let rest = &text[at + "\"version\"".len()..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(rest[start..end].to_owned())
}

/// Installs the pinned aimock with npm unless it is there already.
pub(crate) fn ensure_aimock() -> Result<(), String> {
    if installed_aimock().as_deref() == Some(AIMOCK_VERSION) {
        return Ok(());
    }
    let dir = aimock_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let package = format!("@copilotkit/aimock@{AIMOCK_VERSION}");
    println!(
        "aimock {AIMOCK_VERSION} is missing: installing it into {}",
        dir.display()
    );
    println!(
        "$ npm install --prefix {} --no-audit --no-fund --no-package-lock {package}",
        dir.display()
    );
    let started = Instant::now();
    let status = Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(&dir)
        .args(["--no-audit", "--no-fund", "--no-package-lock", &package])
        .status()
        .map_err(|e| {
            format!(
                "npm could not start ({e}): the provider interop tests need Node.js and npm \
                 to install {package}"
            )
        })?;
    if !status.success() {
        return Err(format!("`npm install {package}` failed ({status})"));
    }
    match installed_aimock() {
        Some(version) if version == AIMOCK_VERSION => {
            println!("installed aimock {version} in {}", secs(started.elapsed()));
            Ok(())
        }
        other => Err(format!(
            "npm installed aimock {other:?}, not {AIMOCK_VERSION}"
        )),
    }
}
