//! The tree as lines of text: two spaces of indent per level, a status
//! mark (a spinner frame while running), what the node is, its tokens and
//! money (`spend.rs`), its time, a progress bar on a call that reports a
//! fraction, the streamed text of a running turn, and why a call failed
//! or waits; and, for `show`, the runs and turns alone with their spend.

use std::time::{Duration, Instant};

use super::spend;
use super::tree::{Kind, Node, NodeId, Status, Tree};

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// How wide a progress bar is.
const BAR: usize = 20;

/// The tree's lines; `frame` animates running nodes (`None`: a still
/// picture, for the final print).
pub(crate) fn lines(tree: &Tree, now: Instant, frame: Option<usize>) -> Vec<String> {
    tree.walk()
        .into_iter()
        .map(|(id, depth)| line(tree, id, depth, now, frame))
        .collect()
}

/// The runs and model turns of the tree with what each spent, without
/// the calls (a delegated run under the turn whose call started it) and
/// without status or time: what `show` prints of a run's journal.
pub(crate) fn spend_lines(tree: &Tree) -> Vec<String> {
    let nodes = tree.nodes();
    let mut lines = Vec::new();
    for (id, _) in tree.walk() {
        let node = &nodes[id];
        let depth = std::iter::successors(node.parent, |&p| nodes[p].parent)
            .filter(|&p| !matches!(nodes[p].kind, Kind::Call { .. }))
            .count();
        let indent = "  ".repeat(depth);
        match &node.kind {
            Kind::Run { .. } | Kind::Turn { .. } => {
                lines.push(format!("{indent}{}{}", what(node), spent(tree, id)));
            }
            Kind::Call { .. } => {}
        }
    }
    lines
}

/// What a node is: `agent A · run R`, `turn 2`, `p1 tool`.
fn what(node: &Node) -> String {
    match &node.kind {
        Kind::Run { run_id, agent } => format!("agent {agent} · run {run_id}"),
        Kind::Turn { turn } => format!("turn {turn}"),
        Kind::Call { call_id, tool } => format!("{call_id} {tool}"),
    }
}

/// What a run or a turn spent, as ` · …` parts (nothing for a call).
fn spent(tree: &Tree, id: NodeId) -> String {
    let node = &tree.nodes()[id];
    let currency = tree.currency.as_deref();
    match &node.kind {
        Kind::Run { .. } => spend::run(&tree.own_spent(id), node.tree_spent.as_ref(), currency),
        Kind::Turn { .. } if node.model_calls > 0 => spend::turn(
            &node.usage,
            (node.unpriced_calls == 0).then_some(node.cost),
            currency,
        ),
        Kind::Turn { .. } | Kind::Call { .. } => String::new(),
    }
}

fn line(tree: &Tree, id: NodeId, depth: usize, now: Instant, frame: Option<usize>) -> String {
    let node = &tree.nodes()[id];
    let mark = match &node.status {
        Status::Running => frame.map_or("…", |f| SPINNER[f % SPINNER.len()]),
        Status::Done => "✓",
        Status::Failed(_) => "✗",
        Status::Waiting(_) => "⏸",
        Status::Stopped(_) => "■",
    };
    let elapsed = node
        .elapsed
        .unwrap_or_else(|| now.saturating_duration_since(node.started));
    let mut text = format!(
        "{}{mark} {}{}",
        "  ".repeat(depth),
        what(node),
        spent(tree, id)
    );
    if !matches!(node.status, Status::Waiting(_)) || node.elapsed.is_some() {
        text.push_str(&format!(" · {}", seconds(elapsed)));
    }
    if let (Status::Running, Some((fraction, message))) = (&node.status, &node.progress) {
        if let Some(fraction) = fraction {
            text.push_str(&format!(" {}", bar(*fraction)));
        }
        if !message.is_empty() {
            text.push_str(&format!(" {message}"));
        }
    }
    if matches!(node.status, Status::Running) && !node.text.is_empty() {
        let flat: String = node
            .text
            .chars()
            .map(|c| if c == '\n' { ' ' } else { c })
            .collect();
        text.push_str(&format!(" “{flat}”"));
    }
    match &node.status {
        Status::Failed(why) => text.push_str(&format!(" · failed: {}", one_line(why))),
        Status::Waiting(why) => text.push_str(&format!(" · waits: {}", one_line(why))),
        Status::Stopped(why) => text.push_str(&format!(" · {why}")),
        Status::Running | Status::Done => {}
    }
    text
}

fn bar(fraction: f32) -> String {
    let fraction = fraction.clamp(0.0, 1.0);
    // Invariant: the fraction is clamped to [0, 1], so the product is in [0, BAR].
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let filled = ((fraction * BAR as f32).round() as usize).min(BAR);
    format!(
        "[{}{}] {:>3.0}%",
        "#".repeat(filled),
        "-".repeat(BAR - filled),
        fraction * 100.0
    )
}

fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

fn one_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut cut: String = first.chars().take(160).collect();
    if cut.len() < first.len() || text.lines().nth(1).is_some() {
        cut.push('…');
    }
    cut
}
