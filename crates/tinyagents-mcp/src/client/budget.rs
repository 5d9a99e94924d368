//! The calling run's tokens and money across the wire: what its tree has
//! left goes with a call ([`BUDGET_META`]), and what the served call's run
//! spent comes back ([`SPENT_META`]) and is recorded on the calling run's
//! tree, as a delegated run's spend is.
//!
//! What comes back is the server's word, and the call is over by then: a
//! value that cannot be read is ignored with a warning, never failing the
//! call whose answer is already paid for.

use rmcp::model::{MetaObject, RequestMetaObject};
use serde::Deserialize;
use serde_json::Value;
use tinyagents_core::{AgentId, RunId, Spend, SpendCaps, Spent};
use tinyagents_harness::ToolExecutionContext;
use tinyagents_orchestrator::child_run_id;
use tinytools::ToolRunContext;

use crate::{BUDGET_META, RUN_ID_META, SPENT_META};

/// The calling run's node of its tree, when the call is made in a run.
pub(crate) fn caller_spend(context: Option<&ToolRunContext>) -> Option<Spend> {
    ToolExecutionContext::from_run_context(context?)
        .spend()
        .cloned()
}

/// The request's `_meta` carrying what `spend`'s tree has left, when
/// anything caps it.
pub(crate) fn budget_meta(spend: &Spend) -> Option<RequestMetaObject> {
    if !spend.is_capped() {
        return None;
    }
    match serde_json::to_value(spend.left()) {
        Ok(left) => {
            let mut meta = serde_json::Map::new();
            meta.insert(BUDGET_META.to_owned(), left);
            Some(RequestMetaObject(MetaObject(meta)))
        }
        Err(error) => {
            tracing::warn!("the run's budget could not be written for the server: {error}");
            None
        }
    }
}

/// Where a served call's spend is recorded: the calling run's node and
/// call, and the tool (the served agent) it is recorded for.
pub(crate) struct Caller<'a> {
    pub(crate) spend: &'a Spend,
    pub(crate) context: &'a ToolRunContext,
    pub(crate) server: &'a str,
    /// The tool's registered name: the line's agent in the caller's report.
    pub(crate) tool: &'a str,
}

impl Caller<'_> {
    /// Records what the result's `_meta` says the call's run spent on a
    /// child of the calling run's node: under the server's run id
    /// ([`RUN_ID_META`]), or one made from the calling run and call. It may
    /// leave the tree past a cap: its next model call is then refused.
    /// Nothing is recorded for a call that spent nothing.
    pub(crate) fn record(&self, meta: &MetaObject) {
        let Some(value) = meta.get(SPENT_META) else {
            return;
        };
        let spent = match Spent::deserialize(value) {
            Ok(spent) => spent,
            Err(error) => {
                tracing::warn!(
                    server = self.server,
                    tool = self.tool,
                    "ignoring the result's `{SPENT_META}` _meta, which is not what a run spent \
                     ({error}); the answer is kept, its spend is not counted"
                );
                return;
            }
        };
        if spent == Spent::default() {
            return;
        }
        let run_id = self.run_id(meta.get(RUN_ID_META));
        self.spend
            .child(run_id, Some(AgentId::new(self.tool)), SpendCaps::default())
            .record(&spent);
    }

    /// The server's run of the call, or the calling run's child for the
    /// call when the server names none (or names it as no string).
    fn run_id(&self, named: Option<&Value>) -> RunId {
        match named {
            Some(Value::String(run)) if !run.is_empty() => RunId::new(run),
            None => child_run_id(self.context.run_id(), self.context.call_id()),
            Some(other) => {
                tracing::warn!(
                    server = self.server,
                    tool = self.tool,
                    "the result's `{RUN_ID_META}` _meta is not a run id ({other}); its spend is \
                     recorded under the calling run's child for the call"
                );
                child_run_id(self.context.run_id(), self.context.call_id())
            }
        }
    }
}
