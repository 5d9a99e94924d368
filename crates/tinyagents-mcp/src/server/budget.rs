//! A served call's tokens and money on the wire: the budget a tinyagents
//! client sends with the call ([`BUDGET_META`]) and what the call's run
//! spent, sent back with its result ([`SPENT_META`]).
//!
//! A call that comes with a budget runs under a root of its own capped by
//! it: the relay run is that root's child, with the server's limits as its
//! own caps, so both bind and the tighter wins (a budget lowers the
//! server's limits, never raises them). A served agent's run is the relay
//! run's child, as any delegated run is its caller's: its model calls
//! reserve against the budget, and one it cannot afford is not made. The
//! relay's own turns are not model calls: its model is not metered
//! (`ChatModel::metered`), so they hold, cost and count nothing, and what a
//! relay run spent is what the runs under it spent.

use std::sync::Arc;

use rmcp::model::{CallToolResult, MetaObject, RequestMetaObject};
use serde::Deserialize;
use tinyagents_core::{PriceTable, RunId, Spend, SpendCaps, Spent};

use crate::{BUDGET_META, RUN_ID_META, SPENT_META};

/// The budget the request's `_meta` carries, if it carries one that caps
/// anything. One that cannot be read is ignored with a warning: the call
/// runs under the server's limits alone.
pub(crate) fn wire_budget(meta: &RequestMetaObject, tool: &str) -> Option<SpendCaps> {
    let value = meta.get(BUDGET_META)?;
    match SpendCaps::deserialize(value) {
        Ok(caps) if caps == SpendCaps::default() => None,
        Ok(caps) => Some(caps),
        Err(error) => {
            tracing::warn!(
                tool,
                "ignoring the call's `{BUDGET_META}` _meta, which is not a budget ({error}): \
                 the call runs under the server's limits alone"
            );
            None
        }
    }
}

/// The root a call with `budget` runs under: its relay run `run_id` is its
/// child. `prices` are the tree's, for served agents whose harness has none.
pub(crate) fn budget_root(
    budget: SpendCaps,
    run_id: &RunId,
    prices: Option<Arc<PriceTable>>,
) -> Spend {
    let root = RunId::from(format!("{run_id}.budget"));
    Spend::root(root, None, budget, Spent::default(), prices)
}

/// Names the server's run of the call in the result's `_meta`, with what
/// it spent when that is known.
pub(crate) fn with_run(
    mut result: CallToolResult,
    run_id: &RunId,
    spent: Option<Spent>,
) -> CallToolResult {
    let mut meta = serde_json::Map::new();
    meta.insert(
        RUN_ID_META.to_owned(),
        serde_json::Value::from(run_id.as_str()),
    );
    if let Some(spent) = spent {
        match serde_json::to_value(spent) {
            Ok(value) => {
                meta.insert(SPENT_META.to_owned(), value);
            }
            Err(error) => tracing::warn!(
                run = %run_id,
                "what the call's run spent could not be written: {error}"
            ),
        }
    }
    result.meta = Some(MetaObject(meta));
    result
}
