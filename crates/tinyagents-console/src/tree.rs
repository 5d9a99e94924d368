//! A run's whole call tree, folded from its journal (the events its
//! segments emitted: segments, model turns, calls with their timings,
//! refusals, payloads as captured, delegated runs) and its ledger rows
//! (what each call did, in doubt or not, its replay class, what was found
//! of it). A call only the ledger knows (its journal was lost to a crash)
//! is still drawn, under its parent. Pure: the page and the benchmark
//! build it alike.

use std::collections::HashMap;

use serde_json::Value;
use tinyagents_core::{AgentEvent, CallId, Cost, RunId, RunStatus, Spent, ToolReplay, Usage};
use tinyagents_ledger::{CallStatus, LedgerRow};
use tinyagents_orchestrator::child_run_id;
use tinyagents_runs::JournalEntry;

/// What a node stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    /// A run: the top one, or a delegated agent's.
    Run {
        /// Its id.
        run_id: RunId,
        /// Its agent, when known.
        agent: Option<String>,
    },
    /// One segment of a run: its start, a resume, a recovery (each
    /// `RunStarted`), or the calls only the ledger knows.
    Segment {
        /// 1-based; 0 for the ledger's.
        number: u32,
    },
    /// A model call.
    Turn {
        /// 1-based, within its segment.
        turn: u32,
    },
    /// A tool call.
    Call {
        /// The harness's id (`p1`, `p1/1`).
        call_id: CallId,
        /// Its tool.
        tool: String,
        /// Made by another call (a nested call), not by the model.
        nested: bool,
    },
}

/// How a node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Still going (as far as anything says).
    Running,
    /// Ended well.
    Done,
    /// Ended with the tool's own error result (its text, when captured).
    ToolError,
    /// Failed or refused: the error, naming the rule that refused.
    Failed(String),
    /// Waits for a person: why (what asked for the approval).
    Waiting(String),
    /// Cancelled, or ended by a limit.
    Stopped(String),
    /// Its effect is unknown: a crash came between its start and its
    /// result.
    InDoubt,
    /// Its segment ended without it ending (a crash, a cancel).
    Interrupted,
}

impl NodeState {
    /// A short name, for the page's classes and its tests.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::ToolError => "tool-error",
            Self::Failed(_) => "failed",
            Self::Waiting(_) => "waiting",
            Self::Stopped(_) => "stopped",
            Self::InDoubt => "in-doubt",
            Self::Interrupted => "interrupted",
        }
    }
}

/// What the ledger says of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerFacts {
    /// Its row's status.
    pub status: CallStatus,
    /// Its replay class.
    pub replay: ToolReplay,
    /// How many times it started.
    pub attempts: u32,
    /// Whether its effect is unknown.
    pub in_doubt: bool,
    /// What was found of it, by whom, with the note.
    pub found: Option<String>,
    /// When it started and settled (ms since the epoch).
    pub started_ms: u64,
    /// When it settled.
    pub settled_ms: Option<u64>,
}

/// One node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it is.
    pub kind: NodeKind,
    /// How it stands.
    pub state: NodeState,
    /// Its children, in the order they started.
    pub children: Vec<usize>,
    /// When it started (ms since the epoch), as seen.
    pub started_ms: Option<u64>,
    /// How long it took.
    pub duration_ms: Option<u64>,
    /// Tokens (a turn's, or a run's own model calls').
    pub usage: Option<Usage>,
    /// Money, in the smallest unit of the harness's price table's
    /// currency: a turn's cost, or the sum of a run's own priced turns';
    /// `None` when nothing was priced.
    pub cost: Option<Cost>,
    /// A run's tokens and money with every run it delegated to, as its
    /// last segment's end said.
    pub spent: Option<Spent>,
    /// Arguments, as the run captured them (redacted); `None` when not
    /// captured.
    pub arguments: Option<Value>,
    /// The result's text or the model's text, as captured.
    pub output: Option<String>,
    /// The last progress report.
    pub progress: Option<String>,
    /// Warnings and limits.
    pub notes: Vec<String>,
    /// The ledger's facts, for a call with a row.
    pub ledger: Option<LedgerFacts>,
}

impl Node {
    fn new(kind: NodeKind, started_ms: Option<u64>) -> Self {
        Self {
            kind,
            state: NodeState::Running,
            children: Vec::new(),
            started_ms,
            duration_ms: None,
            usage: None,
            cost: None,
            spent: None,
            arguments: None,
            output: None,
            progress: None,
            notes: Vec::new(),
            ledger: None,
        }
    }
}

/// What a run's journal says of its calls, for reading its ledger rows:
/// the delegated runs it saw, and the calls whose end it saw.
#[derive(Debug, Default)]
pub(crate) struct JournalCalls {
    /// Run ids of the delegated runs the journal holds events of.
    pub(crate) delegated: std::collections::HashSet<String>,
    /// (run id, call id) of every call whose end the journal holds.
    pub(crate) ended: std::collections::HashSet<(String, String)>,
}

impl JournalCalls {
    /// What `journal` (of run `run`) says.
    pub(crate) fn of(run: &RunId, journal: &[JournalEntry]) -> Self {
        let mut out = Self::default();
        for event in journal.iter().filter_map(|e| e.event.as_ref().ok()) {
            out.walk(run, event);
        }
        out
    }

    fn walk(&mut self, run: &RunId, event: &AgentEvent) {
        match event {
            AgentEvent::ToolCompleted { call_id, .. } | AgentEvent::ToolFailed { call_id, .. } => {
                self.ended
                    .insert((run.as_str().to_owned(), call_id.as_str().to_owned()));
            }
            AgentEvent::Delegated {
                parent_call_id,
                event,
                ..
            } => {
                let child = child_run_id(run, parent_call_id);
                self.delegated.insert(child.as_str().to_owned());
                self.walk(&child, event);
            }
            _ => {}
        }
    }

    /// Whether the ledger may hold rows of a run delegated by `call` of
    /// `run`: the journal saw that run, or did not see the call end (its
    /// events may have been lost to a crash).
    pub(crate) fn may_have_delegated(&self, run: &RunId, call: &CallId) -> bool {
        let child = child_run_id(run, call);
        self.delegated.contains(child.as_str())
            || !self
                .ended
                .contains(&(run.as_str().to_owned(), call.as_str().to_owned()))
    }
}

/// Where a run's events land.
#[derive(Debug)]
struct Scope {
    run_id: RunId,
    segment: Option<usize>,
    segments: u32,
    turn: Option<usize>,
    calls: HashMap<String, usize>,
    runs: HashMap<String, usize>,
}

/// A run's call tree. Node 0 is the run.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTree {
    /// Every node; node 0 is the top run.
    pub nodes: Vec<Node>,
    /// Journal entries that could not be read, with why.
    pub unreadable: Vec<String>,
}

struct Builder {
    nodes: Vec<Node>,
    scopes: HashMap<usize, Scope>,
    unreadable: Vec<String>,
}

impl CallTree {
    /// The tree of run `run` (of `agent`) from its journal and the ledger
    /// rows of it and its delegated runs (`rows`, any order). `active`:
    /// whether the run may still be going (a node still running in an
    /// ended run is shown interrupted).
    pub fn build(
        run: &RunId,
        agent: &str,
        journal: &[JournalEntry],
        rows: &[LedgerRow],
        active: bool,
    ) -> Self {
        let mut b = Builder {
            nodes: Vec::new(),
            scopes: HashMap::new(),
            unreadable: Vec::new(),
        };
        let top = b.run_node(None, run.clone(), Some(agent.to_owned()), None);
        for entry in journal {
            match &entry.event {
                Ok(event) => b.apply(top, event, entry.at.as_millis()),
                Err(why) => b.unreadable.push(why.clone()),
            }
        }
        let mut by_run: HashMap<&str, Vec<&LedgerRow>> = HashMap::new();
        for row in rows {
            by_run.entry(row.run_id.as_str()).or_default().push(row);
        }
        for list in by_run.values_mut() {
            list.sort_by_key(|r| (r.started_at, r.call_id.as_str().to_owned()));
        }
        b.attach(top, &by_run, active);
        if !active {
            for node in &mut b.nodes {
                if node.state == NodeState::Running {
                    node.state = NodeState::Interrupted;
                }
            }
        }
        Self {
            nodes: b.nodes,
            unreadable: b.unreadable,
        }
    }

    /// How many tool calls it holds.
    pub fn calls(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Call { .. }))
            .count()
    }
}

impl Builder {
    fn push(&mut self, parent: Option<usize>, node: Node) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        if let Some(parent) = parent {
            self.nodes[parent].children.push(id);
        }
        id
    }

    fn run_node(
        &mut self,
        parent: Option<usize>,
        run_id: RunId,
        agent: Option<String>,
        at: Option<u64>,
    ) -> usize {
        let kind = NodeKind::Run {
            run_id: run_id.clone(),
            agent,
        };
        let id = self.push(parent, Node::new(kind, at));
        self.scopes.insert(
            id,
            Scope {
                run_id,
                segment: None,
                segments: 0,
                turn: None,
                calls: HashMap::new(),
                runs: HashMap::new(),
            },
        );
        id
    }

    fn scope(&mut self, run: usize) -> &mut Scope {
        // Invariant: every run node has a scope, made with it in run_node.
        self.scopes.entry(run).or_insert_with(|| Scope {
            run_id: RunId::new(""),
            segment: None,
            segments: 0,
            turn: None,
            calls: HashMap::new(),
            runs: HashMap::new(),
        })
    }

    /// The node calls and turns of `run` go under now: its segment, made
    /// when none began yet.
    fn segment(&mut self, run: usize, at: Option<u64>) -> usize {
        if let Some(segment) = self.scope(run).segment {
            return segment;
        }
        self.new_segment(run, at)
    }

    fn new_segment(&mut self, run: usize, at: Option<u64>) -> usize {
        let scope = self.scope(run);
        scope.segments += 1;
        let number = scope.segments;
        let id = self.push(Some(run), Node::new(NodeKind::Segment { number }, at));
        let scope = self.scope(run);
        scope.segment = Some(id);
        scope.turn = None;
        id
    }

    fn call(
        &mut self,
        run: usize,
        call: &CallId,
        tool: &str,
        parent: Option<&CallId>,
        at: Option<u64>,
    ) -> usize {
        if let Some(id) = self.scope(run).calls.get(call.as_str()) {
            return *id;
        }
        let under = match parent.and_then(|p| self.scope(run).calls.get(p.as_str()).copied()) {
            Some(parent) => parent,
            None => {
                let turn = self.scope(run).turn;
                match turn {
                    Some(turn) => turn,
                    None => self.segment(run, at),
                }
            }
        };
        let kind = NodeKind::Call {
            call_id: call.clone(),
            tool: tool.to_owned(),
            nested: parent.is_some(),
        };
        let id = self.push(Some(under), Node::new(kind, at));
        self.scope(run).calls.insert(call.as_str().to_owned(), id);
        id
    }

    fn apply(&mut self, run: usize, event: &AgentEvent, at: u64) {
        match event {
            AgentEvent::RunStarted { agent_id, .. } => {
                if let (Some(agent), NodeKind::Run { agent: known, .. }) =
                    (agent_id, &mut self.nodes[run].kind)
                    && known.is_none()
                {
                    *known = Some(agent.to_string());
                }
                if self.nodes[run].started_ms.is_none() {
                    self.nodes[run].started_ms = Some(at);
                }
                self.nodes[run].state = NodeState::Running;
                self.new_segment(run, Some(at));
            }
            AgentEvent::ModelStarted { turn } => {
                let segment = self.segment(run, Some(at));
                let id = self.push(
                    Some(segment),
                    Node::new(NodeKind::Turn { turn: *turn }, Some(at)),
                );
                self.scope(run).turn = Some(id);
            }
            AgentEvent::ModelDelta { .. } => {}
            AgentEvent::ModelCompleted {
                usage,
                cost,
                duration_ms,
                content,
                ..
            } => {
                if let Some(turn) = self.scope(run).turn {
                    let node = &mut self.nodes[turn];
                    node.state = NodeState::Done;
                    node.usage = Some(*usage);
                    node.cost = *cost;
                    node.duration_ms = Some(*duration_ms);
                    node.output.clone_from(content);
                }
                if let Some(cost) = cost {
                    let own = self.nodes[run].cost.get_or_insert(Cost::ZERO);
                    *own += *cost;
                }
            }
            AgentEvent::ToolStarted {
                call_id,
                parent_call_id,
                name,
                arguments,
            } => {
                let id = self.call(run, call_id, name, parent_call_id.as_ref(), Some(at));
                let node = &mut self.nodes[id];
                node.state = NodeState::Running;
                node.started_ms = Some(at);
                if arguments.is_some() {
                    node.arguments.clone_from(arguments);
                }
            }
            AgentEvent::ToolProgress {
                call_id,
                fraction,
                message,
            } => {
                if let Some(id) = self.scope(run).calls.get(call_id.as_str()).copied() {
                    self.nodes[id].progress = Some(match fraction {
                        Some(f) => format!("{:.0}% {message}", f * 100.0),
                        None => message.clone(),
                    });
                }
            }
            AgentEvent::ToolCompleted {
                call_id,
                parent_call_id,
                name,
                duration_ms,
                is_error,
                result,
                ..
            } => {
                let id = self.call(run, call_id, name, parent_call_id.as_ref(), Some(at));
                let node = &mut self.nodes[id];
                node.state = if *is_error {
                    NodeState::ToolError
                } else {
                    NodeState::Done
                };
                node.duration_ms = Some(*duration_ms);
                node.output.clone_from(result);
            }
            AgentEvent::ToolFailed {
                call_id,
                parent_call_id,
                name,
                duration_ms,
                error,
            } => {
                let id = self.call(run, call_id, name, parent_call_id.as_ref(), Some(at));
                let node = &mut self.nodes[id];
                node.state = NodeState::Failed(error.clone());
                node.duration_ms = Some(*duration_ms);
            }
            AgentEvent::ApprovalRequested {
                call_id,
                tool,
                reason,
                arguments,
            } => {
                let id = self.call(run, call_id, tool, call_id.parent().as_ref(), Some(at));
                let node = &mut self.nodes[id];
                node.state = NodeState::Waiting(reason.clone());
                if arguments.is_some() {
                    node.arguments.clone_from(arguments);
                }
            }
            AgentEvent::LimitReached { kind, limit, used } => {
                self.nodes[run]
                    .notes
                    .push(format!("limit reached: {kind:?} {used} of {limit}"));
            }
            AgentEvent::Warning { message } => self.nodes[run].notes.push(message.clone()),
            AgentEvent::RunFailed { error } => {
                self.end_segment(run, NodeState::Failed(error.clone()), at);
            }
            AgentEvent::RunCompleted {
                status,
                usage,
                spent,
            } => {
                let state = match status {
                    RunStatus::Completed | RunStatus::Terminated => NodeState::Done,
                    RunStatus::AwaitingApproval => {
                        NodeState::Waiting("waits for a person's decision".to_owned())
                    }
                    RunStatus::Cancelled => NodeState::Stopped("cancelled".to_owned()),
                    RunStatus::LimitReached(kind) => {
                        NodeState::Stopped(format!("limit reached: {kind}"))
                    }
                };
                let node = &mut self.nodes[run];
                node.spent = Some(*spent);
                *node.usage.get_or_insert_with(Usage::default) += *usage;
                self.end_segment(run, state, at);
            }
            AgentEvent::Delegated {
                parent_call_id,
                agent_id,
                event,
                ..
            } => {
                let child = match self.scope(run).runs.get(parent_call_id.as_str()).copied() {
                    Some(child) => child,
                    None => {
                        let call =
                            self.call(run, parent_call_id, agent_id.as_str(), None, Some(at));
                        let run_id = child_run_id(&self.scope(run).run_id.clone(), parent_call_id);
                        let child =
                            self.run_node(Some(call), run_id, Some(agent_id.to_string()), Some(at));
                        self.scope(run)
                            .runs
                            .insert(parent_call_id.as_str().to_owned(), child);
                        child
                    }
                };
                self.apply(child, event, at);
            }
            _ => {}
        }
    }

    fn end_segment(&mut self, run: usize, state: NodeState, at: u64) {
        let segment = self.segment(run, Some(at));
        let started = self.nodes[segment].started_ms;
        let node = &mut self.nodes[segment];
        node.state = state.clone();
        node.duration_ms = started.map(|s| at.saturating_sub(s));
        self.nodes[run].state = state;
        self.scope(run).turn = None;
    }

    /// Puts the ledger's rows on the calls of `run` (and, under their
    /// calls, of its delegated runs), drawing the calls the journal lacks.
    fn attach(&mut self, run: usize, by_run: &HashMap<&str, Vec<&LedgerRow>>, active: bool) {
        let run_id = self.scope(run).run_id.clone();
        let rows = by_run.get(run_id.as_str()).map_or(&[][..], Vec::as_slice);
        let mut ledger_segment = None;
        let mut attached = Vec::new();
        for row in rows {
            let known = self.scope(run).calls.get(row.call_id.as_str()).copied();
            let id = match known {
                Some(id) => id,
                None => {
                    let parent = row
                        .parent_call_id
                        .as_ref()
                        .and_then(|p| self.scope(run).calls.get(p.as_str()).copied());
                    let under = match parent {
                        Some(parent) => parent,
                        None => *ledger_segment.get_or_insert_with(|| {
                            let kind = NodeKind::Segment { number: 0 };
                            self.push(Some(run), Node::new(kind, Some(row.started_at.as_millis())))
                        }),
                    };
                    let kind = NodeKind::Call {
                        call_id: row.call_id.clone(),
                        tool: row.tool_name.clone(),
                        nested: row.parent_call_id.is_some(),
                    };
                    let id = self.push(
                        Some(under),
                        Node::new(kind, Some(row.started_at.as_millis())),
                    );
                    self.scope(run)
                        .calls
                        .insert(row.call_id.as_str().to_owned(), id);
                    id
                }
            };
            // A started row of a run that runs is a call in flight.
            let in_doubt = row.is_unresolved() && !(active && row.status == CallStatus::Started);
            let node = &mut self.nodes[id];
            node.ledger = Some(LedgerFacts {
                status: row.status,
                replay: row.replay,
                attempts: row.attempts,
                in_doubt,
                found: row.resolution.as_ref().map(|r| {
                    let mut text = format!("{} (found by {}", r.effect, r.by);
                    text.push_str(&format!(" at {} UTC)", r.at.utc()));
                    if let Some(note) = &r.note {
                        text.push_str(&format!(": {note}"));
                    }
                    text
                }),
                started_ms: row.started_at.as_millis(),
                settled_ms: row.settled_at.map(|t| t.as_millis()),
            });
            if in_doubt {
                node.state = NodeState::InDoubt;
            } else if matches!(node.state, NodeState::Running | NodeState::Interrupted) {
                node.state = match row.status {
                    CallStatus::Completed if row.result.as_ref().is_some_and(|r| r.is_error) => {
                        NodeState::ToolError
                    }
                    CallStatus::Completed => NodeState::Done,
                    CallStatus::Failed => {
                        NodeState::Failed("failed (recorded in the ledger)".to_owned())
                    }
                    CallStatus::Deferred => NodeState::Waiting("deferred".to_owned()),
                    CallStatus::Started | CallStatus::Interrupted => node.state.clone(),
                };
            }
            if node.duration_ms.is_none() {
                node.duration_ms = row
                    .settled_at
                    .map(|s| s.as_millis().saturating_sub(row.started_at.as_millis()));
            }
            let child_id = child_run_id(&run_id, &row.call_id);
            if by_run.contains_key(child_id.as_str()) {
                let child = match self.scope(run).runs.get(row.call_id.as_str()).copied() {
                    Some(child) => child,
                    None => {
                        let child = self.run_node(
                            Some(id),
                            child_id,
                            None,
                            Some(row.started_at.as_millis()),
                        );
                        self.scope(run)
                            .runs
                            .insert(row.call_id.as_str().to_owned(), child);
                        child
                    }
                };
                attached.push(child);
                self.attach(child, by_run, active);
            }
        }
        // Delegated runs the journal drew under calls the ledger lacks.
        let mut children: Vec<usize> = self.scope(run).runs.values().copied().collect();
        children.sort_unstable();
        for child in children {
            if !attached.contains(&child) {
                self.attach(child, by_run, active);
            }
        }
    }
}
