//! `CallPath`: what the call path reads of the harness, its configuration
//! for every call: the tools and the allow-list, the middlewares' hooks, the
//! wrap layers, the gate, argument preparation, and the effect ledger.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};
use std::time::Duration;

use tinyagents_core::{AgentId, ToolCall, ToolDefinition};
use tinyagents_ledger::{EffectLedger, LedgerFailure};
use tinyagents_middleware::{SecurityGate, ToolMiddleware};
use tinytools::{InvalidArgsPolicy, RegisteredTool, ToolRegistry};

use super::hooks::Hooks;

/// The call path's configuration, built once with the harness.
pub(crate) struct CallPath {
    pub(crate) tools: Arc<ToolRegistry>,
    pub(crate) allowed: Option<HashSet<String>>,
    /// What the model is offered: the model dispatch under the allow-list.
    pub(crate) model_tools: Vec<ToolDefinition>,
    pub(crate) middlewares: Arc<Hooks>,
    pub(crate) wraps: Vec<Arc<dyn ToolMiddleware>>,
    pub(crate) wraps_concurrent_safe: bool,
    pub(crate) gate: Option<Arc<dyn SecurityGate>>,
    pub(crate) injected: Map<String, Value>,
    pub(crate) invalid_args: InvalidArgsPolicy,
    pub(crate) detailed_errors: bool,
    pub(crate) ledger: Option<Arc<dyn EffectLedger>>,
    pub(crate) ledger_failure: LedgerFailure,
    /// The agent whose tools these are.
    pub(crate) agent_id: Option<AgentId>,
    /// The harness's default tool timeout, for a tool asked outside a run
    /// (a reconciliation).
    pub(crate) tool_timeout: Option<Duration>,
}

impl CallPath {
    /// The tool the model (or a nested call) may call by `name`: in the
    /// registry's model dispatch and in the run's allow-list.
    pub(crate) fn lookup(&self, name: &str) -> Option<&RegisteredTool> {
        if self
            .allowed
            .as_ref()
            .is_some_and(|allowed| !allowed.contains(name))
        {
            return None;
        }
        self.tools.model_dispatch().get(name)
    }

    /// The tool of a model-issued call whose arguments it takes as the
    /// model sent them: JSON (no text to parse) already within depth (the
    /// turn confined it), an object that fits the schema, and nothing to
    /// inject. Admission then leaves the arguments where they are (its
    /// arguments stage would give back the same value); `None` for any
    /// other call, which admission prepares.
    pub(crate) fn ready_as_sent(&self, call: &ToolCall) -> Option<&RegisteredTool> {
        if call.raw_arguments.is_some() || !call.arguments.is_object() {
            return None;
        }
        let entry = self.lookup(&call.name)?;
        let ready = entry.spec().injected.is_empty() && entry.validate(&call.arguments).is_ok();
        ready.then_some(entry)
    }

    /// Whether a call of `entry` may overlap other concurrency-safe calls.
    pub(crate) fn runs_shared(&self, entry: &RegisteredTool) -> bool {
        self.wraps_concurrent_safe && entry.tool().is_concurrency_safe()
    }
}
