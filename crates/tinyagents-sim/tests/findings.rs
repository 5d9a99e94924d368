//! The bugs the simulator found (issue 13), each kept as the shrunk
//! history that showed it (`findings/*.json`, written by `tinyagents-sim
//! --save`): every one must now hold every invariant. docs/simulation.md
//! lists them with what was wrong and what changed. The histories are kept
//! whole rather than as seeds, so a change to how histories are drawn
//! cannot lose them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use tinyagents_sim::{History, account, run_history};

#[test]
fn every_history_a_bug_was_found_in_now_holds_every_invariant() {
    tinyagents_sim::cli::quiet_planted_panics();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("findings");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the findings are kept: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let history: History = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not a history: {e}", file.display()));
        let (seen, violations) = run_history(&history);
        assert!(
            violations.is_empty(),
            "{} fails again:\n{}",
            file.display(),
            account(&history, &seen, &violations)
        );
        assert!(!seen.segments.is_empty(), "{} ran nothing", file.display());
    }
}
