//! What `show` prints of a run's spend: its journal (the events of every
//! segment that journaled, delegated runs' inside) folded into the call
//! tree the live view draws, of which its runs and model turns are
//! printed with their tokens and cost, and the run's tree total.

use tinyagents::core::Spent;
use tinyagents::runs::RunRecord;

use super::refusal;
use crate::store::Stores;
use crate::view::{Tree, spend_lines};

/// A run's runs and model turns, as its journal has them.
pub(crate) struct RunSpending {
    tree: Tree,
}

impl RunSpending {
    /// Reads `record`'s journal; money in the currency of the agents file
    /// the run was started from while that file is as it was, else, when
    /// some call was priced, without a currency's code.
    pub(crate) async fn read(stores: &Stores, record: &RunRecord) -> anyhow::Result<Self> {
        const PAGE: u32 = 10_000;
        let mut tree = Tree::new();
        tree.currency = record
            .file
            .as_ref()
            .and_then(|started| {
                crate::file::load(std::path::Path::new(&started.path))
                    .ok()
                    .filter(|loaded| loaded.identity.sha256 == started.sha256)
            })
            .and_then(|loaded| super::run::currency(&loaded).map(str::to_owned));
        let now = std::time::Instant::now();
        let mut after = 0;
        loop {
            let page = stores
                .runs
                .journal(&record.run_id, after, PAGE)
                .await
                .map_err(refusal)?;
            for entry in &page {
                if let Ok(event) = &entry.event {
                    tree.apply(event, now);
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => after = last.seq,
                _ => break,
            }
        }
        if tree.currency.is_none() && tree.saw_cost() {
            tree.currency = Some(String::new());
        }
        Ok(Self { tree })
    }

    /// What the run and every run under it spent, as its last segment's
    /// end said.
    pub(crate) fn total(&self) -> Option<Spent> {
        self.tree
            .nodes()
            .iter()
            .find(|node| node.parent.is_none())
            .and_then(|top| top.tree_spent)
    }

    /// The currency money is shown in, when it is.
    pub(crate) fn currency(&self) -> Option<&str> {
        self.tree.currency.as_deref()
    }

    /// The `spend` section: a heading naming the currency, then each run
    /// and model turn; nothing when the journal shows no spend.
    pub(crate) fn lines(&self) -> Vec<String> {
        let spend = spend_lines(&self.tree);
        let spent_any =
            self.tree.currency.is_some() || self.tree.nodes().iter().any(|n| n.usage.total() > 0);
        if spend.is_empty() || !spent_any {
            return Vec::new();
        }
        let heading = match self.currency() {
            Some(currency) if !currency.is_empty() => {
                format!("spend (money in the smallest unit of {currency}):")
            }
            _ => "spend:".to_owned(),
        };
        std::iter::once(heading)
            .chain(spend.into_iter().map(|line| format!("  {line}")))
            .collect()
    }
}
