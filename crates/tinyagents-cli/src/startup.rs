//! Why an MCP server of an agents file did not start, said so a person can
//! fix it: the server, its command and where it ran, the tail of its
//! stderr and the log it is in, and, when the cause can be seen from here
//! (a program that is not on the `PATH`, a script file that does not
//! exist), what to do, naming `cargo xtask peers` for the pinned servers
//! of the repository's examples.

use std::path::{Path, PathBuf};

use crate::file::McpSection;

/// How many lines of the server's stderr the error quotes.
const TAIL: usize = 6;

/// The error of server `name` (`section`, relative paths from `dir`) that
/// failed to start with `error`, its stderr in `log`.
pub(crate) fn failure(
    name: &str,
    section: &McpSection,
    dir: &Path,
    log: &Path,
    error: &anyhow::Error,
) -> anyhow::Error {
    let cause = tinyagents::core::error_chain(error.as_ref());
    let cause = cause
        .strip_prefix(&format!("MCP server '{name}': "))
        .unwrap_or(&cause);
    let mut text = format!("MCP server '{name}' ([mcp.{name}]) did not start: {cause}");
    let Some(command) = &section.command else {
        if let Some(url) = &section.url {
            text.push_str(&format!("\n  url: {}", url.get_ref()));
        }
        return anyhow::anyhow!(text);
    };
    let cwd = section
        .cwd
        .as_ref()
        .map_or_else(|| dir.to_owned(), |cwd| dir.join(cwd));
    let mut line = command.get_ref().clone();
    for arg in &section.args {
        line.push(' ');
        line.push_str(arg);
    }
    text.push_str(&format!("\n  command: {line} (in {})", cwd.display()));
    let tail = tail(log);
    if tail.is_empty() {
        text.push_str(&format!("\n  its stderr ({}) is empty", log.display()));
    } else {
        text.push_str(&format!("\n  its stderr, last lines of {}:", log.display()));
        for line in tail {
            text.push_str(&format!("\n    {line}"));
        }
    }
    for hint in hints(command.get_ref(), &section.args, &cwd) {
        text.push_str(&format!("\n  {hint}"));
    }
    anyhow::anyhow!(text)
}

/// The last non-empty lines of `log` (none when it cannot be read), after
/// its first line that says an error when that came earlier (a stack
/// trace's head: `Error: Cannot find module …`).
fn tail(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(TAIL);
    let first_error = lines[..start]
        .iter()
        .copied()
        .find(|l| l.contains("Error") || l.contains("error:"));
    let cut = |l: &str| l.chars().take(200).collect::<String>();
    let mut out = Vec::new();
    if let Some(line) = first_error {
        out.push(cut(line));
        out.push("…".to_owned());
    }
    out.extend(lines[start..].iter().map(|l| cut(l)));
    out
}

/// What can be seen from here of why `command args` (run in `cwd`) did not
/// start.
fn hints(command: &str, args: &[String], cwd: &Path) -> Vec<String> {
    let mut hints = Vec::new();
    if !command.contains('/') && find_on_path(command).is_none() {
        let what = if command == "node" || command == "npx" {
            "install Node.js (20 or newer) and npm"
        } else {
            "install it, or give its full path"
        };
        hints.push(format!("`{command}` is not on the PATH: {what}"));
    }
    for arg in args.iter().filter(|a| looks_like_a_script(a)) {
        let path = cwd.join(arg);
        if path.exists() {
            continue;
        }
        let shown = normalized(&path);
        if arg.contains(".tools/") {
            hints.push(format!(
                "{} does not exist: the pinned MCP servers of the repository's examples are \
                 not installed; run `cargo xtask peers` (it needs Node.js and npm) from the \
                 repository's root",
                shown.display()
            ));
        } else {
            hints.push(format!("{} does not exist", shown.display()));
        }
    }
    hints
}

/// Whether `arg` names a script file (a path ending in a script's
/// extension).
fn looks_like_a_script(arg: &str) -> bool {
    !arg.starts_with('-')
        && [".js", ".mjs", ".cjs", ".ts", ".py"]
            .iter()
            .any(|ext| arg.ends_with(ext))
}

/// `program` on the `PATH`.
fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// `path` without `..` and `.` components (for a readable message).
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{hints, looks_like_a_script, normalized};
    use std::path::Path;

    #[test]
    fn a_missing_pinned_server_names_the_command_that_installs_it() {
        let dir = tempfile::tempdir().unwrap();
        let said = hints(
            "sh",
            &["../.tools/mcp/node_modules/x/dist/index.js".into()],
            &dir.path().join("examples"),
        );
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("cargo xtask peers"), "{said:?}");
        assert!(said[0].starts_with(&format!("{}", dir.path().join(".tools/mcp").display())));
        let missing = hints("no-such-program-here", &[], dir.path());
        assert!(missing[0].contains("is not on the PATH"), "{missing:?}");
        assert!(looks_like_a_script("a/b.mjs") && !looks_like_a_script("--port"));
        assert_eq!(normalized(Path::new("/a/b/../c/./d")), Path::new("/a/c/d"));
    }
}
