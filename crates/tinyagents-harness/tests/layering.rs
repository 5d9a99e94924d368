//! The harness's rooms import only downwards (docs/ARCHITECTURE.md, "The
//! harness's rooms"): the call path never reaches into the loop, the
//! durable room or the harness's configuration, and no module imports one
//! above it, so no circle can form again. Read from the sources: every
//! `crate::<module>` path outside comments must be one the importing
//! room may use.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Each room (a top-level module of `src/`) and the rooms it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    ("run", &[]),
    ("pricing", &[]),
    ("mutation", &[]),
    ("events", &["events", "mutation"]),
    ("call", &["call", "events", "mutation"]),
    ("resumed", &["run"]),
    ("harness", &["call", "events", "pricing", "resumed"]),
    ("trace", &["call", "harness", "run"]),
    (
        "turns",
        &[
            "call", "events", "harness", "mutation", "pricing", "resumed", "run", "trace", "turns",
        ],
    ),
    (
        "durable",
        &[
            "call", "durable", "events", "harness", "mutation", "resumed", "run", "trace", "turns",
        ],
    ),
    ("handle", &["durable", "events", "harness", "run", "turns"]),
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The room a source file belongs to: its top-level module.
fn room(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .expect("a first component")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// The modules `text` names as `crate::<module>` outside comments.
fn imported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::Name` (a re-export at the root) is not a room.
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                names.insert(name);
            }
            rest = after;
        }
    }
    names
}

#[test]
fn no_room_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut upward = Vec::new();
    for file in &files {
        let room = room(&src, file);
        if room == "lib" {
            continue;
        }
        let allowed = ALLOWED
            .iter()
            .find(|(name, _)| *name == room)
            .unwrap_or_else(|| panic!("{} is in no room of ALLOWED", file.display()))
            .1;
        let text = fs::read_to_string(file).expect("a readable source");
        for name in imported(&text) {
            if name != room && !allowed.contains(&name.as_str()) {
                upward.push(format!("{} imports crate::{name}", file.display()));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let text = "use crate::turns::Run;\n// use crate::durable::x;\nlet a = crate::AgentHarness;";
    let names = imported(text);
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["turns"]);
}
