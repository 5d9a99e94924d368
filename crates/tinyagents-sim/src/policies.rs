//! The history's policies, installed on every agent's builder: the
//! built-in middlewares as a host would configure them, a security gate
//! that allows, denies, asks, fails or panics per tool, and a middleware
//! whose admission hooks fail or panic. The oracle of what must be refused
//! lives beside them ([`statically_refused`]), computed from the history
//! alone, never from what the harness did.

use std::sync::Arc;

use tinyagents::prelude::*;
use tinyagents::{
    core::RunContext, core::State, harness::AgentHarnessBuilder,
    middleware::HumanApprovalMiddleware, middleware::PlanModeMiddleware,
    middleware::RedactionMiddleware, middleware::Redactor, middleware::ToolCallRequest,
    middleware::ToolPolicyMiddleware, tools::InvalidArgsPolicy,
};

use crate::plan::{Callback, GateMode, History};
use crate::tools::side_effects;

/// Installs the history's policies on `builder`.
pub(crate) fn configure(
    history: &History,
    mut builder: AgentHarnessBuilder,
) -> AgentHarnessBuilder {
    let p = &history.policies;
    if let Some(secret) = &history.secret {
        builder = builder.middleware(Arc::new(RedactionMiddleware::with_redactor(
            Redactor::new().with_secret(secret.clone()),
        )));
    }
    if let Some(mask) = p.deny_mask {
        let mut policy = ToolPolicyMiddleware::new()
            .deny_side_effects(side_effects(mask))
            .sandbox_available(p.sandbox);
        for name in &p.policy_approval {
            policy = policy.require_approval(name.clone());
        }
        builder = builder.middleware(Arc::new(policy));
    }
    if p.plan_mode {
        builder = builder.middleware(Arc::new(PlanModeMiddleware::new(true)));
    }
    if let Some(flagged) = &p.human {
        let mut approval = HumanApprovalMiddleware::new();
        for name in flagged {
            approval = approval.require(name.clone());
        }
        approval = match p.callback {
            Callback::None => approval,
            Callback::Approve => approval.with_approval_fn(Arc::new(|_| true)),
            Callback::Decline => approval.with_approval_fn(Arc::new(|_| false)),
            Callback::Panic => approval.with_approval_fn(Arc::new(|call| {
                panic!("sim: planted approval callback panic for {}", call.name)
            })),
        };
        builder = builder.middleware(Arc::new(approval));
    }
    if !p.faulty_hook.is_empty() {
        builder = builder.middleware(Arc::new(FaultyHook(p.faulty_hook.clone())));
    }
    if let Some(answers) = &p.gate {
        builder = builder.security_gate(Arc::new(SimGate(answers.clone())));
    }
    if let Some(allowed) = &p.allow {
        // The list as each agent's host would write it: the allowed tools
        // this agent has (a delegated agent's posture may omit some), and
        // the agents it may call.
        let has: Vec<String> = builder
            .registered()
            .iter()
            .map(|t| t.spec().name.clone())
            .collect();
        let helpers = (0..history.helpers.len()).map(History::helper_name);
        let tools = allowed
            .iter()
            .cloned()
            .chain(helpers)
            .filter(|a| has.contains(a));
        builder = builder.allow_tools(tools.collect::<Vec<_>>());
    }
    if p.invalid_args_fail {
        builder = builder.invalid_args(InvalidArgsPolicy::Fail);
    }
    builder.payload_capture(PayloadCapture {
        model_io: history.capture,
        tool_io: history.capture,
    })
}

/// Whether a call of `tool` must never reach its `execute`, whatever
/// happens, from the history's policies and the tool's spec alone: an
/// allow-list without it, the deny mask or a missing sandbox, plan mode for
/// a tool that writes, the gate or a hook that refuses, fails or panics
/// for it, and (for a nested call or a call inside a delegated agent, which
/// cannot be deferred to a person) any approval requirement.
pub(crate) fn statically_refused(
    history: &History,
    tool: &str,
    nested: bool,
    depth: u32,
) -> Option<String> {
    let p = &history.policies;
    let def = history.tool(tool)?;
    if let Some(allowed) = &p.allow
        && !allowed.iter().any(|a| a == tool)
    {
        return Some("not on the allow-list".to_owned());
    }
    if let Some(mask) = p.deny_mask {
        if mask & def.effects != 0 {
            return Some("its side effects are denied".to_owned());
        }
        if def.sandboxed && !p.sandbox {
            return Some("it needs a sandbox and there is none".to_owned());
        }
    }
    if p.plan_mode && !def.read_only {
        return Some("plan mode refuses a tool that is not read-only".to_owned());
    }
    let gate = gate_mode(history, tool);
    match gate {
        Some(GateMode::Deny | GateMode::Error | GateMode::Panic) => {
            return Some(format!("the gate answers {gate:?}"));
        }
        Some(GateMode::Ask) if nested || depth > 0 => {
            return Some("the gate asks, and a nested or delegated call cannot ask".to_owned());
        }
        _ => {}
    }
    if p.faulty_hook.iter().any(|(name, _)| name == tool) {
        return Some("a middleware's hook fails for it".to_owned());
    }
    if needs_approval(history, tool) && (nested || depth > 0) && !callback_approves(history, tool) {
        return Some("it needs approval and a nested or delegated call cannot wait".to_owned());
    }
    None
}

/// What the gate answers for `tool`: the first answer it has for it, as the
/// gate reads its list.
fn gate_mode(history: &History, tool: &str) -> Option<GateMode> {
    history
        .policies
        .gate
        .iter()
        .flatten()
        .find(|(name, _)| name == tool)
        .map(|(_, mode)| *mode)
}

/// Whether a call of `tool` needs someone's approval to run.
pub(crate) fn needs_approval(history: &History, tool: &str) -> bool {
    let p = &history.policies;
    history
        .tool(tool)
        .is_some_and(|d| d.approval_required || d.external)
        || (p.deny_mask.is_some() && p.policy_approval.iter().any(|n| n == tool))
        || p.human.iter().flatten().any(|n| n == tool)
}

/// Whether the approval callback alone may approve a call of `tool`: it
/// answers for the tools the approval middleware flags (by name, an
/// `external` tool too, or by `approval_required`), and its approval stands
/// only where no other requirement (the tool policy, the gate's question)
/// remains.
pub(crate) fn callback_approves(history: &History, tool: &str) -> bool {
    let p = &history.policies;
    let Some(def) = history.tool(tool) else {
        return false;
    };
    let flagged = p.human.iter().flatten().any(|n| n == tool) || def.approval_required;
    let asked_elsewhere = (p.deny_mask.is_some() && p.policy_approval.iter().any(|n| n == tool))
        || gate_mode(history, tool) == Some(GateMode::Ask);
    p.human.is_some() && p.callback == Callback::Approve && flagged && !asked_elsewhere
}

/// The security gate: its answer per tool.
struct SimGate(Vec<(String, GateMode)>);

#[async_trait]
impl SecurityGate for SimGate {
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        let mode = self
            .0
            .iter()
            .find(|(name, _)| *name == request.spec.name)
            .map_or(GateMode::Allow, |(_, mode)| *mode);
        match mode {
            GateMode::Allow => Ok(ToolVerdict::Allow),
            GateMode::Deny => Ok(ToolVerdict::Deny {
                reason: "the simulated gate denies it".to_owned(),
            }),
            GateMode::Ask => Ok(ToolVerdict::Defer {
                reason: "the simulated gate asks a person".to_owned(),
            }),
            GateMode::Error => Err(TinyAgentsError::State(
                "the simulated gate's store is unreachable".to_owned(),
            )),
            GateMode::Panic => panic!("sim: planted gate panic for {}", request.spec.name),
        }
    }
}

/// A middleware whose admission hooks fail or panic for some tools.
struct FaultyHook(Vec<(String, GateMode)>);

impl FaultyHook {
    fn check(&self, tool: &str) -> Result<(), TinyAgentsError> {
        match self.0.iter().find(|(name, _)| name == tool) {
            Some((_, GateMode::Panic)) => panic!("sim: planted hook panic for {tool}"),
            Some(_) => Err(TinyAgentsError::State(format!(
                "the simulated hook failed for {tool}"
            ))),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Middleware for FaultyHook {
    fn name(&self) -> &str {
        "faulty_hook"
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.check(&call.name).map(|()| ToolVerdict::Allow)
    }

    async fn check_nested_tool(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.check(&call.name)
    }
}
