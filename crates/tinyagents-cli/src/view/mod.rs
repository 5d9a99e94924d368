//! What a run shows while it runs: on a terminal, the live tree; with
//! `--json` (or without a terminal), one JSON event per line; with
//! `--output tree` and no terminal, the tree printed once at the end.

mod live;
mod render;
mod tree;

#[cfg(test)]
mod tests;

use std::io::Write as _;
use std::time::Instant;

use serde_json::json;
use tinyagents::prelude::AgentEvent;

pub(crate) use render::lines;
pub(crate) use tree::Tree;

/// How a run is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The live tree (a terminal).
    Live,
    /// The tree, printed once the run ends (no terminal).
    Plain,
    /// One JSON event per line.
    Json,
}

/// Watches one command's runs: takes in events and shows them.
pub(crate) struct Watch {
    mode: Mode,
    tree: Tree,
    live: Option<live::Live>,
}

impl Watch {
    /// A watch in `mode`.
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            mode,
            tree: Tree::new(),
            live: None,
        }
    }

    /// How it shows.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Takes in one event.
    pub(crate) fn event(&mut self, event: &AgentEvent) {
        self.tree.apply(event, Instant::now());
        match self.mode {
            Mode::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    out(&line);
                }
            }
            Mode::Live => self
                .live
                .get_or_insert_with(live::Live::new)
                .draw(&self.tree),
            Mode::Plain => {}
        }
    }

    /// Redraws (spinners, elapsed time) on a terminal (a live view
    /// exists only in [`Mode::Live`], once the first event drew it).
    pub(crate) fn tick(&mut self) {
        if let Some(live) = self.live.as_mut() {
            live.draw(&self.tree);
        }
    }

    /// Tells the person something (a JSON `note` line with `--json`).
    pub(crate) fn note(&mut self, text: &str) {
        match self.mode {
            Mode::Json => out(&json!({"type": "note", "message": text}).to_string()),
            Mode::Live => self.live().println(text),
            Mode::Plain => eprintln!("{text}"),
        }
    }

    /// Ends the segment: the tree's last picture (printed now, without a
    /// terminal), then a fresh tree for the next segment.
    pub(crate) fn end_segment(&mut self) {
        match self.mode {
            Mode::Live => {
                if let Some(mut live) = self.live.take() {
                    live.finish(&self.tree);
                }
            }
            Mode::Plain => {
                for line in lines(&self.tree, Instant::now(), None) {
                    out(&line);
                }
            }
            Mode::Json => {}
        }
        for warning in std::mem::take(&mut self.tree.warnings) {
            self.note(&format!("warning: {warning}"));
        }
        self.tree = Tree::new();
    }

    fn live(&mut self) -> &mut live::Live {
        self.live.get_or_insert_with(live::Live::new)
    }
}

/// Prints one line on standard output (ignoring a closed pipe).
pub(crate) fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
