//! Issue 14: a governed agent team in few lines. Each friction point the
//! newcomer met has a test here, through the facade: `Agent` and its run
//! handle (`agent.rs`), `as_tool` (`as_tool.rs`), checked wiring
//! (`wiring.rs`), approval end to end under an agent and the orchestrator
//! (`approval.rs`), defaults that agree (`defaults.rs`), tools that return
//! any `Serialize` and receive their context (`tools.rs`), typed output
//! (`typed.rs`).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod agent;
mod approval;
mod as_tool;
mod defaults;
mod newcomer;
mod recovery;
mod tools;
mod typed;
mod wiring;

use std::sync::Arc;

use tinyagents::prelude::*;

/// A scripted model that records what it was asked, shared with the test.
pub(crate) fn recording(script: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(script).recording())
}

/// The texts of a session's transcript.
pub(crate) fn texts(turns: Vec<tinyagents::orchestrator::ChatTurn>) -> Vec<String> {
    turns.into_iter().map(|turn| turn.text).collect()
}

/// Every event of a handle, then its result.
pub(crate) async fn drain<E>(mut handle: RunHandle<'_, E>) -> (Vec<AgentEvent>, Result<AgentRun, E>)
where
    E: From<TinyAgentsError> + Unpin,
{
    let mut events = Vec::new();
    while let Some(event) = handle.next_event().await {
        events.push(event);
    }
    let result = handle.wait().await;
    (events, result)
}

/// The newcomer's billing program is the `team` example: at most 100
/// lines, and, like every example, built with nothing but the facade and
/// tokio (the facade's only dev-dependency), through its prelude.
#[test]
fn the_team_example_fits_in_100_lines_and_examples_need_only_the_facade() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/tinyagents");
    let team = std::fs::read_to_string(root.join("examples/team.rs")).unwrap();
    assert!(
        team.lines().count() <= 100,
        "team.rs has {} lines",
        team.lines().count()
    );
    assert!(team.contains("use tinyagents::prelude::*;"));

    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let dev = manifest.split("[dev-dependencies]").nth(1).unwrap();
    let dev = dev.split("\n[").next().unwrap();
    let deps: Vec<&str> = dev
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(deps.len(), 1, "{deps:?}");
    assert!(deps[0].starts_with("tokio"), "{deps:?}");
    for example in std::fs::read_dir(root.join("examples")).unwrap() {
        let text = std::fs::read_to_string(example.unwrap().path()).unwrap();
        assert!(text.contains("use tinyagents::prelude::*;"));
    }
}
