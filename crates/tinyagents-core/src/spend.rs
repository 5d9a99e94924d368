//! Tokens and money of a tree of runs: reserved before a model call, settled
//! after it, rolled up to the root.
//!
//! A run's [`Spend`] is one node of its tree: a root for a run a host
//! started, a child for a run delegated from another (an agent tool,
//! directly or from a nested call) or served to a tinyagents client. A
//! node's caps ([`SpendCaps`], from its [`RunLimits`]) bound what it and
//! every node under it spend together, so a root's caps bound the whole
//! tree and a child's are its smaller share.
//!
//! Before a model call the caller reserves the call's worst case on its
//! node ([`Spend::reserve`]): the reservation is checked against, and held
//! on, every node from there to the root, so calls in parallel turns and
//! in concurrent delegated runs never together pass a cap. After the call
//! the reservation is settled with what the provider reported
//! ([`Reservation::settle`]); dropping it unsettled (the call failed)
//! gives it back. All of it happens under one lock per tree: a reservation
//! is refused exactly when what is spent, plus what others hold, plus its
//! own ask would pass a cap.
//!
//! It is not the tool-call budget ([`LimitTracker`](crate::LimitTracker)),
//! nor pricing ([`PriceTable`](crate::PriceTable)): callers price a call
//! and hand the amounts in.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::TinyAgentsError;
use crate::ids::{AgentId, RunId};
use crate::limits::{LimitKind, RunLimits, Usage};
use crate::price::{Cost, PriceTable};
use crate::sync::{Mutex, lock};

/// What a node, and everything under it, may spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendCaps {
    /// Tokens, input plus output.
    pub max_tokens: Option<u64>,
    /// Money.
    pub max_cost: Option<Cost>,
}

impl SpendCaps {
    /// The caps `limits` set.
    pub fn of(limits: &RunLimits) -> Self {
        Self {
            max_tokens: limits.max_tokens,
            max_cost: limits.max_cost,
        }
    }

    fn is_capped(self) -> bool {
        self.max_tokens.is_some() || self.max_cost.is_some()
    }

    /// Whether it caps nothing.
    pub fn is_unbounded(&self) -> bool {
        !self.is_capped()
    }

    /// The tighter of each cap of `self` and `share`: a share lowers a
    /// cap, never raises it.
    #[must_use]
    pub fn within(self, share: Self) -> Self {
        fn tighter<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            max_tokens: tighter(self.max_tokens, share.max_tokens),
            max_cost: tighter(self.max_cost, share.max_cost),
        }
    }
}

/// What was spent: by one run's own model calls, or by a run and every run
/// under it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// Tokens.
    pub usage: Usage,
    /// Money, for the calls whose model has a price.
    pub cost: Cost,
    /// Model calls.
    pub model_calls: u32,
    /// Model calls whose model the price table does not name (their cost
    /// is not in `cost`).
    pub unpriced_calls: u32,
}

impl std::ops::AddAssign<&Spent> for Spent {
    fn add_assign(&mut self, other: &Spent) {
        self.usage += other.usage;
        self.cost += other.cost;
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.unpriced_calls = self.unpriced_calls.saturating_add(other.unpriced_calls);
    }
}

impl Spent {
    /// One model call's spend: `usage`, at `cost` (`None`: unpriced).
    pub fn call(usage: Usage, cost: Option<Cost>) -> Self {
        Self {
            usage,
            cost: cost.unwrap_or_default(),
            model_calls: 1,
            unpriced_calls: u32::from(cost.is_none()),
        }
    }
}

/// One run's line in a tree's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpend {
    /// The run.
    pub run_id: RunId,
    /// Its agent, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    /// The run it was delegated from; `None` for the report's first line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<RunId>,
    /// Its own model calls.
    pub own: Spent,
    /// It and every run under it.
    pub total: Spent,
}

#[derive(Debug)]
struct Node {
    parent: Option<usize>,
    run_id: RunId,
    agent: Option<AgentId>,
    caps: SpendCaps,
    own: Spent,
    total: Spent,
    held_tokens: u64,
    held_cost: Cost,
}

#[derive(Debug)]
struct Tree {
    nodes: Mutex<Vec<Node>>,
    /// The root run's prices, for runs under it whose harness has none.
    prices: Option<Arc<PriceTable>>,
}

/// One run's node of its tree's spend. Cloning it is cheap and shares the
/// node.
#[derive(Debug, Clone)]
pub struct Spend {
    tree: Arc<Tree>,
    node: usize,
    /// Whether this node or one above it caps anything (caps never change,
    /// so it is known when the node is made).
    capped: bool,
    /// Whether this node or one above it caps money.
    caps_cost: bool,
}

impl Spend {
    /// The root of a new tree, for `run_id`, that has already spent
    /// `spent` (zero for a new run; what a resumed or recovered run's
    /// checkpoint holds). `prices` are the tree's, for runs under it whose
    /// harness sets none.
    pub fn root(
        run_id: RunId,
        agent: Option<AgentId>,
        caps: SpendCaps,
        spent: Spent,
        prices: Option<Arc<PriceTable>>,
    ) -> Self {
        let node = Node {
            parent: None,
            run_id,
            agent,
            caps,
            own: spent,
            total: spent,
            held_tokens: 0,
            held_cost: Cost::ZERO,
        };
        Self {
            tree: Arc::new(Tree {
                nodes: Mutex::new(vec![node]),
                prices,
            }),
            node: 0,
            capped: caps.is_capped(),
            caps_cost: caps.max_cost.is_some(),
        }
    }

    /// A node under this one, for a run delegated from it, with its own
    /// caps (its share; the caps above still bind).
    #[must_use]
    pub fn child(&self, run_id: RunId, agent: Option<AgentId>, caps: SpendCaps) -> Self {
        let mut nodes = lock(&self.tree.nodes);
        nodes.push(Node {
            parent: Some(self.node),
            run_id,
            agent,
            caps,
            own: Spent::default(),
            total: Spent::default(),
            held_tokens: 0,
            held_cost: Cost::ZERO,
        });
        Self {
            tree: Arc::clone(&self.tree),
            node: nodes.len() - 1,
            capped: self.capped || caps.is_capped(),
            caps_cost: self.caps_cost || caps.max_cost.is_some(),
        }
    }

    /// A node under this one for a run resumed in the tree it spent in
    /// before (a served call resumed under the budget its caller sent): it
    /// starts from `spent`, which the nodes above already count, so
    /// nothing is counted twice.
    #[must_use]
    pub fn child_resumed(
        &self,
        run_id: RunId,
        agent: Option<AgentId>,
        caps: SpendCaps,
        spent: Spent,
    ) -> Self {
        let child = self.child(run_id, agent, caps);
        let mut nodes = lock(&self.tree.nodes);
        let node = &mut nodes[child.node];
        node.own = spent;
        node.total = spent;
        drop(nodes);
        child
    }

    /// The tree's prices, set by its root run.
    pub fn prices(&self) -> Option<&Arc<PriceTable>> {
        self.tree.prices.as_ref()
    }

    /// Whether this node or one above it caps anything: when none does,
    /// a reservation can only succeed, and callers may skip estimating.
    pub fn is_capped(&self) -> bool {
        self.capped
    }

    /// Whether this node or one above it caps money.
    pub fn caps_cost(&self) -> bool {
        self.caps_cost
    }

    /// What this node may still spend: for tokens and for money, the least
    /// over this node and every node above it that caps it of the cap less
    /// what is spent and held there (zero once a node is past its cap);
    /// `None` where no node caps. What a run hands on as the budget of
    /// work it delegates elsewhere (an agent served over MCP).
    pub fn left(&self) -> SpendCaps {
        fn least<T: Ord + Copy>(left: Option<T>, room: T) -> Option<T> {
            Some(left.map_or(room, |left| left.min(room)))
        }
        let nodes = lock(&self.tree.nodes);
        let mut left = SpendCaps::default();
        for i in chain(&nodes, self.node) {
            let node = &nodes[i];
            if let Some(limit) = node.caps.max_tokens {
                let used = node.total.usage.total().saturating_add(node.held_tokens);
                left.max_tokens = least(left.max_tokens, limit.saturating_sub(used));
            }
            if let Some(limit) = node.caps.max_cost {
                let used = node.total.cost.saturating_add(node.held_cost);
                left.max_cost = least(left.max_cost, limit.saturating_sub(used));
            }
        }
        left
    }

    /// Holds `tokens` and `cost` on this node and every node above it, or
    /// refuses with the first cap they would pass
    /// ([`TinyAgentsError::LimitExceeded`], `used` being what was spent and
    /// held before this ask; the limit less `used` is what was left).
    pub fn reserve(&self, tokens: u64, cost: Cost) -> Result<Reservation, TinyAgentsError> {
        let mut nodes = lock(&self.tree.nodes);
        if let Some(refused) = refusal(&nodes, self.node, tokens, cost) {
            return Err(refused);
        }
        for_chain(&mut nodes, self.node, |node| {
            node.held_tokens = node.held_tokens.saturating_add(tokens);
            node.held_cost = node.held_cost.saturating_add(cost);
        });
        Ok(Reservation {
            spend: self.clone(),
            tokens,
            cost,
            open: true,
        })
    }

    /// The first cap on this node's path that what is spent and held has
    /// passed (a call that spent more than it reserved), as the limit it
    /// reached; `None` while every cap has room, even none.
    pub fn passed_cap(&self) -> Option<TinyAgentsError> {
        if !self.capped {
            return None;
        }
        refusal(&lock(&self.tree.nodes), self.node, 0, Cost::ZERO)
    }

    /// Adds `spent` to this node's own spend and to every total from here
    /// to the root, reserved or not (what a served agent reports it spent,
    /// which nothing here could reserve). It may leave a node past its cap:
    /// every later reservation under it is then refused.
    pub fn record(&self, spent: &Spent) {
        let mut nodes = lock(&self.tree.nodes);
        nodes[self.node].own += spent;
        for_chain(&mut nodes, self.node, |node| node.total += spent);
    }

    /// What this node's run spent itself.
    pub fn own(&self) -> Spent {
        lock(&self.tree.nodes)[self.node].own
    }

    /// What this node's run and every run under it spent.
    pub fn total(&self) -> Spent {
        lock(&self.tree.nodes)[self.node].total
    }

    /// What the whole tree spent (the root's total).
    pub fn tree_total(&self) -> Spent {
        lock(&self.tree.nodes)[0].total
    }

    /// This node and every node under it, in the order they were made, this
    /// one first.
    pub fn report(&self) -> Vec<RunSpend> {
        let nodes = lock(&self.tree.nodes);
        let mut inside = vec![false; nodes.len()];
        let mut lines = Vec::new();
        for (i, node) in nodes.iter().enumerate().skip(self.node) {
            let ours = i == self.node || node.parent.is_some_and(|p| inside[p]);
            if !ours {
                continue;
            }
            inside[i] = true;
            lines.push(RunSpend {
                run_id: node.run_id.clone(),
                agent: node.agent.clone(),
                parent: node
                    .parent
                    .filter(|_| i != self.node)
                    .map(|p| nodes[p].run_id.clone()),
                own: node.own,
                total: node.total,
            });
        }
        lines
    }

    fn settle(&self, tokens: u64, cost: Cost, spent: Option<&Spent>) {
        let mut nodes = lock(&self.tree.nodes);
        if let Some(spent) = spent {
            nodes[self.node].own += spent;
        }
        for_chain(&mut nodes, self.node, |node| {
            node.held_tokens = node.held_tokens.saturating_sub(tokens);
            node.held_cost = node.held_cost.saturating_sub(cost);
            if let Some(spent) = spent {
                node.total += spent;
            }
        });
    }
}

/// The first cap on the path from `node` to the root that `tokens` and
/// `cost` more would pass, with what was spent and held there.
fn refusal(nodes: &[Node], node: usize, tokens: u64, cost: Cost) -> Option<TinyAgentsError> {
    for i in chain(nodes, node) {
        let node = &nodes[i];
        if let Some(limit) = node.caps.max_tokens {
            let used = node.total.usage.total().saturating_add(node.held_tokens);
            if used.saturating_add(tokens) > limit {
                return Some(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::Tokens,
                    limit,
                    used,
                });
            }
        }
        if let Some(limit) = node.caps.max_cost {
            let used = node.total.cost.saturating_add(node.held_cost);
            if used.saturating_add(cost) > limit {
                return Some(TinyAgentsError::LimitExceeded {
                    kind: LimitKind::Cost,
                    limit: limit.nanos(),
                    used: used.nanos(),
                });
            }
        }
    }
    None
}

/// Applies `change` to `node` and every node above it.
fn for_chain(nodes: &mut [Node], node: usize, mut change: impl FnMut(&mut Node)) {
    let mut at = Some(node);
    while let Some(i) = at {
        let node = &mut nodes[i];
        change(node);
        at = node.parent;
    }
}

/// The indexes from `node` up to the root.
fn chain(nodes: &[Node], node: usize) -> impl Iterator<Item = usize> + '_ {
    std::iter::successors(Some(node), move |&i| nodes[i].parent)
}

/// A model call's worst case, held on its node and every node above it
/// until it is settled or dropped.
#[derive(Debug)]
#[must_use = "a reservation is given back when dropped; settle it with what the call spent"]
pub struct Reservation {
    spend: Spend,
    tokens: u64,
    cost: Cost,
    open: bool,
}

impl Reservation {
    /// Gives back what was held and spends what the call spent (which may
    /// be more than was held, when the prompt was under-estimated).
    pub fn settle(mut self, spent: &Spent) {
        self.open = false;
        self.spend.settle(self.tokens, self.cost, Some(spent));
    }

    /// The tokens held.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The money held.
    pub fn cost(&self) -> Cost {
        self.cost
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.open {
            self.spend.settle(self.tokens, self.cost, None);
        }
    }
}

#[cfg(all(test, not(tinyagents_loom)))]
mod tests;
