//! Governance a caller cannot loosen: which ordinary tools a build offers
//! (deny, approval and air-gap rules), the approval hold of an active
//! agent, and the per-request function-loop caps of every built agent.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use tinyagents_core::{Message, RunContext, State, TinyAgentsError, ToolCall};
use tinyagents_middleware::{CallPolicy, Middleware, ToolVerdict};
use tinytools::{SideEffects, Tool};

use crate::definition::{AgentDefinition, ToolPolicy};

/// Model calls one request of a built agent may make (the function loop's
/// iterations); the orchestrator's default `RunLimits::max_model_calls`.
pub const MAX_ITERATIONS_PER_REQUEST: u32 = 40;

/// Consecutive iterations with a failed tool call that one request of a
/// built agent tolerates; the next one ends the request.
pub const MAX_CONSECUTIVE_ERRORS_PER_REQUEST: u32 = 3;

/// Why a tool the definition names is not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OmitReason {
    /// The host has no tool of that name.
    Unknown,
    /// The definition denies it.
    Denied,
    /// It needs approval, and a delegated run cannot ask for one.
    ApprovalRequired,
    /// It sends data off the machine, and the run is air-gapped.
    NetworkEgress,
}

/// A tool left out of a build, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedTool {
    /// The tool's name.
    pub name: String,
    /// Why.
    pub reason: OmitReason,
}

/// The ordinary tools of one build.
#[derive(Default)]
pub(crate) struct ToolSelection {
    pub(crate) included: Vec<Arc<dyn Tool>>,
    /// The tools the definition holds for a person (`RequireApproval`);
    /// those whose spec asks for a person the harness holds itself.
    pub(crate) needs_approval: BTreeSet<String>,
    /// Tools whose spec asks for a person that the definition auto-approves.
    pub(crate) auto_approved: BTreeSet<String>,
    pub(crate) omitted: Vec<OmittedTool>,
}

impl ToolSelection {
    /// Adds `name` (resolved to `tool`, if the host has it) under the
    /// definition's policy: `active` for the requested agent's build.
    pub(crate) fn consider(
        &mut self,
        definition: &AgentDefinition,
        name: &str,
        tool: Option<&Arc<dyn Tool>>,
        active: bool,
        air_gapped: bool,
    ) {
        let omit = |reason| OmittedTool {
            name: name.to_owned(),
            reason,
        };
        let Some(tool) = tool else {
            self.omitted.push(omit(OmitReason::Unknown));
            return;
        };
        let policy = definition.policy_of(name);
        let spec = tool.spec();
        if policy == ToolPolicy::Deny {
            self.omitted.push(omit(OmitReason::Denied));
            return;
        }
        if air_gapped && spec.side_effects.contains(SideEffects::NETWORK_EGRESS) {
            self.omitted.push(omit(OmitReason::NetworkEgress));
            return;
        }
        // The harness holds a tool whose spec flags it for a person,
        // failing closed; only an approval lets it run.
        let flagged = spec.waits_for_person();
        let held = policy == ToolPolicy::RequireApproval;
        if held || (flagged && policy != ToolPolicy::AutoApprove) {
            if !active {
                self.omitted.push(omit(OmitReason::ApprovalRequired));
                return;
            }
            if held {
                self.needs_approval.insert(name.to_owned());
            }
        } else if flagged {
            self.auto_approved.insert(name.to_owned());
        }
        self.included.push(Arc::clone(tool));
    }
}

/// Holds the tools an active agent's definition requires approval for: a
/// model-issued call defers its run until its id and arguments are
/// approved; a nested call, which cannot wait, is refused.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalHold {
    tools: BTreeSet<String>,
}

impl ApprovalHold {
    pub(crate) fn new(tools: BTreeSet<String>) -> Self {
        Self { tools }
    }
}

impl CallPolicy for ApprovalHold {
    fn policy_name(&self) -> &str {
        "agent_tool_policy"
    }

    fn decide(&self, ctx: &RunContext, call: &ToolCall) -> ToolVerdict {
        let waits = call.id.is_nested() || !ctx.is_call_approved(call);
        if self.tools.contains(&call.name) && waits {
            ToolVerdict::defer(format!("tool '{}' requires a person's approval", call.name))
        } else {
            ToolVerdict::Allow
        }
    }
}

/// Approves the model-issued calls of tools whose spec asks for a person
/// and whose definition says `AutoApprove`: the definition is the decision.
/// A nested call of such a tool is still refused by the harness (a flagged
/// tool never runs nested without a person, and none can be asked).
#[derive(Debug, Clone)]
pub(crate) struct AutoApproval {
    tools: BTreeSet<String>,
}

impl AutoApproval {
    pub(crate) fn new(tools: BTreeSet<String>) -> Self {
        Self { tools }
    }
}

#[async_trait]
impl Middleware for AutoApproval {
    fn name(&self) -> &str {
        "agent_auto_approval"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        if self.tools.contains(&call.name) && !call.id.is_nested() {
            ctx.approve_call(call);
        }
        Ok(ToolVerdict::Allow)
    }
}

/// Ends a request after too many consecutive failing iterations. An
/// iteration (one model turn and the tool calls it issued) fails when at
/// least one of its calls failed (a refused, raised, timed-out or
/// self-reported failure: any result with `is_error`). With `max` 3, three
/// failing iterations in a row are tolerated and the fourth ends the
/// request, before the next model call, with `Denied { by:
/// "function_loop_caps" }`. A successful iteration resets the count; the
/// count never reaches back past the request's user message.
#[derive(Debug, Clone, Copy)]
pub struct FunctionLoopCaps {
    max_consecutive_errors: u32,
}

impl FunctionLoopCaps {
    /// Tolerates `max_consecutive_errors` failing iterations in a row.
    pub fn new(max_consecutive_errors: u32) -> Self {
        Self {
            max_consecutive_errors,
        }
    }
}

impl Default for FunctionLoopCaps {
    fn default() -> Self {
        Self::new(MAX_CONSECUTIVE_ERRORS_PER_REQUEST)
    }
}

/// Failing iterations at the end of `messages`, counted back to the first
/// iteration without a failure or to the request's user message.
pub fn trailing_failed_iterations(messages: &[Message]) -> u32 {
    let mut count = 0;
    let mut failed = false;
    for message in messages.iter().rev() {
        match message {
            Message::Tool { is_error, .. } => failed |= *is_error,
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                if !failed {
                    break;
                }
                count += 1;
                failed = false;
            }
            _ => break,
        }
    }
    count
}

#[async_trait]
impl Middleware for FunctionLoopCaps {
    fn name(&self) -> &str {
        "function_loop_caps"
    }

    async fn before_model(
        &self,
        _ctx: &mut RunContext,
        state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        let failed = trailing_failed_iterations(&state.messages);
        if failed > self.max_consecutive_errors {
            return Err(TinyAgentsError::Denied {
                by: self.name().to_owned(),
                reason: format!(
                    "{failed} consecutive iterations had a failed tool call; at most {} are allowed per request",
                    self.max_consecutive_errors
                ),
            });
        }
        Ok(())
    }
}
