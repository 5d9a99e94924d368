//! What a run shows while it runs: on a terminal, the live tree; with
//! `--json` (or without a terminal), one JSON event per line; with
//! `--output tree` and no terminal, the tree printed once at the end.

mod live;
mod render;
pub(crate) mod spend;
mod status;
mod tree;

#[cfg(test)]
mod tests;

use std::io::Write as _;
use std::time::Instant;

use serde_json::json;
use tinyagents::ledger::LedgerRow;
use tinyagents::prelude::AgentEvent;

pub(crate) use render::{lines, spend_lines};
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

    /// Shows money in `currency` (the agents' price table's code, empty
    /// when it names none); `None`: the agents have no prices.
    pub(crate) fn priced(mut self, currency: Option<&str>) -> Self {
        self.tree.currency = currency.map(str::to_owned);
        self
    }

    /// The price table's currency code, when money is shown.
    pub(crate) fn currency(&self) -> Option<&str> {
        self.tree.currency.as_deref()
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

    /// Shows run `run_id`'s earlier segments (its ledger `rows`, with
    /// their depth, as `show` orders them) before this one's events, so a
    /// resumed or recovered run is drawn whole.
    pub(crate) fn seed(&mut self, run_id: &str, agent: &str, rows: &[(usize, LedgerRow)]) {
        if rows.is_empty() {
            return;
        }
        let rows: Vec<LedgerRow> = rows.iter().map(|(_, row)| row.clone()).collect();
        self.tree.seed(run_id, agent, &rows, Instant::now());
    }

    /// Pauses a live view to ask at the terminal: the tree stays on the
    /// screen, still, above the question; the next segment (a resume in
    /// this process) draws the same tree on, so its last picture is the
    /// whole run.
    pub(crate) fn pause(&mut self) {
        if let Some(mut live) = self.live.take() {
            live.finish(&self.tree);
        }
        self.notes();
    }

    /// Ends the run's view: the tree's last picture (printed now, without a
    /// terminal), then the warnings its events carried.
    pub(crate) fn end(&mut self) {
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
        self.notes();
    }

    fn notes(&mut self) {
        for warning in std::mem::take(&mut self.tree.warnings) {
            self.note(&format!("warning: {warning}"));
        }
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
