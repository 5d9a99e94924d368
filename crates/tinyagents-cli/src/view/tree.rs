//! The call tree of a run, built from its events: the run, its model turns,
//! the calls each turn issued, nested calls under the call that made them,
//! and a delegated agent's run under the call that started it, with status,
//! time, tokens and money (a run's own and its tree's). Pure: the live
//! view, the final print and `show` (from the run's journal) render it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tinyagents::core::{Cost, Spent};
use tinyagents::ledger::LedgerRow;
use tinyagents::prelude::{AgentEvent, RunStatus, Usage};

pub(crate) use super::status::Status;
use super::status::{limit_said, run_status, seeded_status};

/// Where a node is in the tree.
pub(crate) type NodeId = usize;

/// What a node stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run: the top one, or a delegated agent's.
    Run {
        /// Its id.
        run_id: String,
        /// Its agent.
        agent: String,
    },
    /// A model call.
    Turn {
        /// 1-based.
        turn: u32,
    },
    /// A tool call.
    Call {
        /// The harness's id (`p1`, `p1/1`).
        call_id: String,
        /// Its tool.
        tool: String,
    },
}

/// One line of the tree.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// What it is.
    pub(crate) kind: Kind,
    /// Its parent.
    pub(crate) parent: Option<NodeId>,
    /// Its children, in the order they started.
    pub(crate) children: Vec<NodeId>,
    /// How it stands.
    pub(crate) status: Status,
    /// When it started (as seen here).
    pub(crate) started: Instant,
    /// How long it took, once ended.
    pub(crate) elapsed: Option<Duration>,
    /// Tokens (a turn's, or a run's own model calls').
    pub(crate) usage: Usage,
    /// Money (a turn's, or the sum of a run's own priced turns').
    pub(crate) cost: Cost,
    /// Model calls ended (a turn's one, a run's own).
    pub(crate) model_calls: u32,
    /// Of those, the calls whose model has no price.
    pub(crate) unpriced_calls: u32,
    /// A run's spend with every run it delegated to, once it ended.
    pub(crate) tree_spent: Option<Spent>,
    /// What a limit that stopped a run said.
    pub(crate) limit: Option<String>,
    /// The last progress report: fraction and message.
    pub(crate) progress: Option<(Option<f32>, String)>,
    /// Streamed text of a running turn (its tail).
    pub(crate) text: String,
}

/// How much streamed text a running turn keeps.
const TEXT_TAIL: usize = 120;

/// The tree.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
    index: HashMap<(Vec<String>, String), NodeId>,
    turns: HashMap<Vec<String>, NodeId>,
    /// Warnings, in order.
    pub(crate) warnings: Vec<String>,
    /// The price table's currency code, when the run's agents have prices
    /// (empty when the table names none): money is shown only then.
    pub(crate) currency: Option<String>,
}

impl Tree {
    /// An empty tree.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The nodes (index = [`NodeId`]).
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// What node `id` spent itself, as one [`Spent`].
    pub(crate) fn own_spent(&self, id: NodeId) -> Spent {
        let node = &self.nodes[id];
        Spent {
            usage: node.usage,
            cost: node.cost,
            model_calls: node.model_calls,
            unpriced_calls: node.unpriced_calls,
        }
    }

    /// Whether some model call of the tree was priced.
    pub(crate) fn saw_cost(&self) -> bool {
        self.nodes.iter().any(|n| {
            n.model_calls > n.unpriced_calls
                || n.tree_spent
                    .is_some_and(|s| s.model_calls > s.unpriced_calls)
        })
    }

    /// Takes in one event of the top run.
    pub(crate) fn apply(&mut self, event: &AgentEvent, now: Instant) {
        self.apply_in(&[], event, now);
    }

    fn apply_in(&mut self, scope: &[String], event: &AgentEvent, now: Instant) {
        match event {
            AgentEvent::Delegated {
                parent_call_id,
                event,
                ..
            } => {
                let mut inner = scope.to_vec();
                inner.push(parent_call_id.to_string());
                self.apply_in(&inner, event, now);
            }
            AgentEvent::RunStarted { run_id, agent_id } => {
                // A later segment of a run the tree shows (a resume, a
                // recovery): the same node goes on.
                if let Some(id) = self.run_of(scope)
                    && matches!(&self.nodes[id].kind, Kind::Run { run_id: shown, .. } if *shown == run_id.as_str())
                {
                    self.restart(id, now);
                    return;
                }
                let parent = scope.split_last().and_then(|(call, outer)| {
                    self.index
                        .get(&(outer.to_vec(), format!("call:{call}")))
                        .copied()
                });
                let kind = Kind::Run {
                    run_id: run_id.to_string(),
                    agent: agent_id.as_ref().map_or("agent", |a| a.as_str()).to_owned(),
                };
                self.add(scope, "run".to_owned(), kind, parent, now);
            }
            AgentEvent::ModelStarted { turn } => {
                let parent = self.run_of(scope);
                let id = self.add(
                    scope,
                    format!("turn:{turn}"),
                    Kind::Turn { turn: *turn },
                    parent,
                    now,
                );
                self.turns.insert(scope.to_vec(), id);
            }
            AgentEvent::ModelDelta { turn, delta } => {
                if let tinyagents::core::ModelDelta::Text { text } = delta
                    && let Some(id) = self.find(scope, &format!("turn:{turn}"))
                {
                    let tail = &mut self.nodes[id].text;
                    tail.push_str(text);
                    if tail.chars().count() > TEXT_TAIL {
                        let cut = tail.chars().count() - TEXT_TAIL;
                        *tail = tail.chars().skip(cut).collect();
                    }
                }
            }
            AgentEvent::ModelCompleted {
                turn,
                usage,
                cost,
                duration_ms,
                ..
            } => {
                let unpriced = u32::from(cost.is_none());
                if let Some(id) = self.find(scope, &format!("turn:{turn}")) {
                    let node = &mut self.nodes[id];
                    node.status = Status::Done;
                    node.usage = *usage;
                    node.cost = cost.unwrap_or_default();
                    node.model_calls = 1;
                    node.unpriced_calls = unpriced;
                    node.elapsed = Some(Duration::from_millis(*duration_ms));
                    node.text.clear();
                }
                if let Some(run) = self.run_of(scope) {
                    let node = &mut self.nodes[run];
                    node.usage += *usage;
                    node.cost += cost.unwrap_or_default();
                    node.model_calls += 1;
                    node.unpriced_calls += unpriced;
                }
            }
            AgentEvent::ToolStarted {
                call_id,
                parent_call_id,
                name,
                ..
            } => {
                let parent = match parent_call_id {
                    Some(parent) => self.find(scope, &format!("call:{parent}")),
                    None => self
                        .turns
                        .get(scope)
                        .copied()
                        .or_else(|| self.run_of(scope)),
                };
                let key = format!("call:{call_id}");
                // A call an earlier segment showed (it waited, or was in
                // doubt) starts again in its place.
                if let Some(id) = self.find(scope, &key) {
                    self.restart(id, now);
                    return;
                }
                let kind = Kind::Call {
                    call_id: call_id.to_string(),
                    tool: name.clone(),
                };
                self.add(scope, key, kind, parent, now);
            }
            AgentEvent::ToolProgress {
                call_id,
                fraction,
                message,
            } => {
                if let Some(id) = self.find(scope, &format!("call:{call_id}")) {
                    self.nodes[id].progress = Some((*fraction, message.clone()));
                }
            }
            AgentEvent::ToolCompleted {
                call_id,
                duration_ms,
                is_error,
                ..
            } => {
                let status = if *is_error {
                    Status::Failed("the tool reported an error".to_owned())
                } else {
                    Status::Done
                };
                self.end_call(scope, &call_id.to_string(), status, *duration_ms);
            }
            AgentEvent::ToolFailed {
                call_id,
                duration_ms,
                error,
                ..
            } => {
                self.end_call(
                    scope,
                    &call_id.to_string(),
                    Status::Failed(error.clone()),
                    *duration_ms,
                );
            }
            AgentEvent::ApprovalRequested {
                call_id,
                tool,
                reason,
                ..
            } => {
                let key = format!("call:{call_id}");
                let id = match self.find(scope, &key) {
                    Some(id) => id,
                    None => {
                        let parent = self
                            .turns
                            .get(scope)
                            .copied()
                            .or_else(|| self.run_of(scope));
                        let kind = Kind::Call {
                            call_id: call_id.to_string(),
                            tool: tool.clone(),
                        };
                        self.add(scope, key, kind, parent, now)
                    }
                };
                self.nodes[id].status = Status::Waiting(reason.clone());
            }
            AgentEvent::Warning { message } => self.warnings.push(message.clone()),
            AgentEvent::LimitReached { kind, limit, used } => {
                if let Some(run) = self.run_of(scope) {
                    let said = limit_said(*kind, *limit, *used, self.currency.as_deref());
                    self.nodes[run].limit = Some(said);
                }
            }
            AgentEvent::RunFailed { error } => {
                if let Some(run) = self.run_of(scope) {
                    self.end(run, Status::Failed(error.clone()), now);
                }
            }
            AgentEvent::RunCompleted {
                status,
                usage,
                spent,
            } => {
                if let Some(run) = self.run_of(scope) {
                    let node = &mut self.nodes[run];
                    node.usage = *usage;
                    node.tree_spent = Some(*spent);
                    let status = match (status, node.limit.take()) {
                        (RunStatus::LimitReached(_), Some(said)) => {
                            Status::Stopped(format!("limit reached: {said}"))
                        }
                        _ => run_status(*status),
                    };
                    self.end(run, status, now);
                }
            }
            _ => {}
        }
    }

    fn add(
        &mut self,
        scope: &[String],
        key: String,
        kind: Kind,
        parent: Option<NodeId>,
        now: Instant,
    ) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node {
            kind,
            parent,
            children: Vec::new(),
            status: Status::Running,
            started: now,
            elapsed: None,
            usage: Usage::default(),
            cost: Cost::ZERO,
            model_calls: 0,
            unpriced_calls: 0,
            tree_spent: None,
            limit: None,
            progress: None,
            text: String::new(),
        });
        if let Some(parent) = parent {
            self.nodes[parent].children.push(id);
        }
        self.index.insert((scope.to_vec(), key), id);
        id
    }

    fn restart(&mut self, id: NodeId, now: Instant) {
        let node = &mut self.nodes[id];
        node.status = Status::Running;
        node.started = now;
        node.elapsed = None;
        node.progress = None;
    }

    /// Shows the earlier segments of run `run_id` (of `agent`): its calls
    /// and its delegated runs' calls as the ledger has them (`rows`, depth
    /// first, as `show` orders them), so a resumed or recovered run is
    /// drawn whole. Calls nest under their parents; a delegated run's
    /// calls under the call that delegated it.
    pub(crate) fn seed(&mut self, run_id: &str, agent: &str, rows: &[LedgerRow], now: Instant) {
        let top = Kind::Run {
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
        };
        let run = self.add(&[], "run".to_owned(), top, None, now);
        self.nodes[run].status = Status::Stopped("earlier segments".to_owned());
        for row in rows {
            let Some(scope) = scope_of(run_id, row.run_id.as_str()) else {
                continue;
            };
            let parent = match &row.parent_call_id {
                Some(parent) => self.find(&scope, &format!("call:{parent}")),
                None => self.run_in(&scope, row.run_id.as_str(), now),
            };
            let kind = Kind::Call {
                call_id: row.call_id.to_string(),
                tool: row.tool_name.clone(),
            };
            let id = self.add(&scope, format!("call:{}", row.call_id), kind, parent, now);
            let node = &mut self.nodes[id];
            node.status = seeded_status(row);
            node.elapsed = row.settled_at.map(|at| {
                Duration::from_millis(at.as_millis().saturating_sub(row.started_at.as_millis()))
            });
        }
    }

    /// The run node of `scope`, made under the call that delegated it when
    /// the tree does not have it yet.
    fn run_in(&mut self, scope: &[String], run_id: &str, now: Instant) -> Option<NodeId> {
        if let Some(id) = self.run_of(scope) {
            return Some(id);
        }
        let (call, outer) = scope.split_last()?;
        let parent = self.find(outer, &format!("call:{call}"));
        let kind = Kind::Run {
            run_id: run_id.to_owned(),
            agent: "agent".to_owned(),
        };
        let id = self.add(scope, "run".to_owned(), kind, parent, now);
        self.nodes[id].status = Status::Done;
        Some(id)
    }

    fn find(&self, scope: &[String], key: &str) -> Option<NodeId> {
        self.index.get(&(scope.to_vec(), key.to_owned())).copied()
    }

    fn run_of(&self, scope: &[String]) -> Option<NodeId> {
        self.find(scope, "run")
    }

    fn end_call(&mut self, scope: &[String], call_id: &str, status: Status, duration_ms: u64) {
        if let Some(id) = self.find(scope, &format!("call:{call_id}")) {
            let node = &mut self.nodes[id];
            node.status = status;
            node.elapsed = Some(Duration::from_millis(duration_ms));
        }
    }

    fn end(&mut self, id: NodeId, status: Status, now: Instant) {
        let node = &mut self.nodes[id];
        node.status = status;
        node.elapsed = Some(now.saturating_duration_since(node.started));
    }

    /// The nodes in display order with their depth.
    pub(crate) fn walk(&self) -> Vec<(NodeId, usize)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<(NodeId, usize)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.parent.is_none())
            .map(|(id, _)| (id, 0))
            .rev()
            .collect();
        while let Some((id, depth)) = stack.pop() {
            out.push((id, depth));
            for child in self.nodes[id].children.iter().rev() {
                stack.push((*child, depth + 1));
            }
        }
        out
    }
}

/// The scope of run `run` under the top run `top`: the calls that
/// delegated to it, outermost first (`top::p2::p1` is `[p2, p1]`); `None`
/// for a run outside the top run.
fn scope_of(top: &str, run: &str) -> Option<Vec<String>> {
    let rest = run.strip_prefix(top)?;
    if rest.is_empty() {
        return Some(Vec::new());
    }
    let rest = rest.strip_prefix(tinyagents::orchestrator::CHILD_RUN_SEPARATOR)?;
    Some(
        rest.split(tinyagents::orchestrator::CHILD_RUN_SEPARATOR)
            .map(str::to_owned)
            .collect(),
    )
}
