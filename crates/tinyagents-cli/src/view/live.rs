//! The live tree on a terminal: one indicatif line per rendered line,
//! redrawn on every event and every tick (spinners, elapsed time), cut to
//! the terminal's height.

use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::render;
use super::tree::Tree;

/// The terminal view.
pub(crate) struct Live {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
    frame: usize,
    style: ProgressStyle,
}

impl Live {
    /// A view drawing on standard output.
    pub(crate) fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(20));
        // `{wide_msg}` cuts each line to the terminal's width, so a long
        // line never wraps and the redraw stays in place.
        let style = ProgressStyle::with_template("{wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        Self {
            multi,
            bars: Vec::new(),
            frame: 0,
            style,
        }
    }

    /// Redraws the tree.
    pub(crate) fn draw(&mut self, tree: &Tree) {
        self.frame = self.frame.wrapping_add(1);
        let lines = render::lines(tree, Instant::now(), Some(self.frame));
        self.show(fit(lines, terminal_height()));
    }

    /// Draws the tree a last time, still, and leaves it on the screen.
    pub(crate) fn finish(&mut self, tree: &Tree) {
        let lines = render::lines(tree, Instant::now(), None);
        self.show(fit(lines, terminal_height()));
        for bar in &self.bars {
            bar.finish();
        }
        self.bars.clear();
    }

    /// Prints `text` above the tree.
    pub(crate) fn println(&self, text: &str) {
        let _ = self.multi.println(text);
    }

    fn show(&mut self, lines: Vec<String>) {
        while self.bars.len() < lines.len() {
            let bar = self.multi.add(ProgressBar::new_spinner());
            bar.set_style(self.style.clone());
            self.bars.push(bar);
        }
        for (bar, line) in self.bars.iter().zip(lines) {
            bar.set_message(line);
        }
    }
}

/// The terminal's height in lines (24 when unknown).
fn terminal_height() -> usize {
    std::env::var("LINES")
        .ok()
        .and_then(|l| l.parse().ok())
        .or_else(|| {
            console::Term::stdout()
                .size_checked()
                .map(|(rows, _)| usize::from(rows))
        })
        .unwrap_or(24)
}

/// At most `height - 1` lines: the first (the run), a line saying how many
/// were left out, and the last ones (where the work is).
fn fit(lines: Vec<String>, height: usize) -> Vec<String> {
    let room = height.saturating_sub(1).max(3);
    if lines.len() <= room {
        return lines;
    }
    let keep = room - 2;
    let hidden = lines.len() - 1 - keep;
    // Invariant: `lines` has more than `room` (at least 3) lines here.
    let mut out = Vec::with_capacity(room);
    out.push(lines[0].clone());
    out.push(format!("  … {hidden} more lines"));
    out.extend(lines[lines.len() - keep..].iter().cloned());
    out
}
