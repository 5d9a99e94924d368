//! The simulated host tools: each call's arguments say what it does (how
//! long it takes, how it ends, which calls it nests), and every execution
//! is written to the host's own effect log, which outlives crashes, as a
//! payment service's records would.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::RunId, core::ToolReplay, harness::ToolExecutionContext, tools::Reconciled,
    tools::SideEffects,
};

use crate::plan::{Act, ArgsPlan, CallPlan, End, History, ToolDef};

/// One execution of a host tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// The run that executed it.
    pub run: RunId,
    /// The harness's id of the call.
    pub call: CallId,
    /// The tool.
    pub tool: String,
    /// The call's tag.
    pub tag: String,
    /// The run's delegation depth.
    pub depth: u32,
}

/// What the host's tools did, across every process of the history.
#[derive(Default)]
pub(crate) struct EffectLog {
    effects: std::sync::Mutex<Vec<Effect>>,
}

impl EffectLog {
    /// The log, locked. A panic while it is held (there is none: no code
    /// that holds it can panic) would only lose the simulator's records.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Effect>> {
        self.effects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every execution, in order.
    pub(crate) fn all(&self) -> Vec<Effect> {
        self.lock().clone()
    }

    fn push(&self, effect: Effect) {
        self.lock().push(effect);
    }

    fn has(&self, run: &RunId, call: &CallId) -> bool {
        self.lock().iter().any(|e| e.run == *run && e.call == *call)
    }
}

/// The arguments a call plan sends (`Err`: text that is not JSON); a
/// helper's query names a conversation when `conversation` is set.
pub(crate) fn arguments(
    plan: &ArgsPlan,
    secret: Option<&str>,
    conversation: bool,
) -> Result<Value, String> {
    match plan {
        ArgsPlan::Act(act) => {
            let mut value = serde_json::to_value(act).unwrap_or(Value::Null);
            if let (true, Some(secret), Some(map)) =
                (act.secret_in_args, secret, value.as_object_mut())
            {
                map.insert("note".to_owned(), json!(format!("token {secret}")));
            }
            Ok(value)
        }
        ArgsPlan::Mistyped => Ok(json!({ "tag": 7, "end": "sideways" })),
        ArgsPlan::NotJson => Err("{\"tag\": \"unterminated".to_owned()),
        ArgsPlan::Query(turns) => {
            let mut args = json!({ "query": serde_json::to_string(turns).unwrap_or_default() });
            if conversation {
                args["conversation"] = json!("sim-chat");
            }
            Ok(args)
        }
    }
}

/// A simulated host tool.
pub(crate) struct SimTool {
    spec: ToolSpec,
    def: ToolDef,
    log: Arc<EffectLog>,
    secret: Option<String>,
}

impl SimTool {
    /// The tool `def` of `history`, writing to `log`.
    pub(crate) fn new(def: &ToolDef, history: &History, log: Arc<EffectLog>) -> Self {
        let mut spec = ToolSpec::new(
            def.name.clone(),
            "A simulated tool.",
            json!({
                "type": "object",
                "properties": {
                    "tag": { "type": "string" },
                    "end": { "enum": ["Ok", "Err", "Panic", "Hang", "ErrorResult"] }
                },
                "required": ["tag", "end"]
            }),
        )
        .replay(if def.never {
            ToolReplay::Never
        } else {
            ToolReplay::Safe
        })
        .side_effects(side_effects(def.effects));
        if def.read_only {
            spec = spec.read_only();
        } else {
            spec = spec.concurrency_safe(def.concurrency_safe);
        }
        if def.approval_required {
            spec = spec.approval_required();
        }
        if def.external {
            spec = spec.external();
        }
        if def.sandboxed {
            spec = spec.sandboxed();
        }
        if let Some(ms) = def.timeout_ms {
            spec = spec.timeout(Duration::from_millis(ms));
        }
        Self {
            spec,
            def: def.clone(),
            log,
            secret: history.secret.clone(),
        }
    }

    fn said(&self, act: &Act, what: &str) -> String {
        let mut text = format!("{what} {}", act.tag);
        if let (true, Some(secret)) = (act.secret_in_result, &self.secret) {
            text.push_str(&format!(" (with {secret})"));
        }
        text.push_str(&"x".repeat(act.filler));
        text
    }
}

/// The `SideEffects` set of the bits `bits`.
pub(crate) fn side_effects(bits: u16) -> SideEffects {
    SideEffects::NAMED
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .fold(SideEffects::NONE, |all, (_, (class, _))| all | *class)
}

#[async_trait]
impl Tool for SimTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let context = context.ok_or_else(|| anyhow::anyhow!("no run context"))?;
        let act: Act = serde_json::from_value(args)
            .map_err(|e| anyhow::anyhow!("the arguments are not an act: {e}"))?;
        let nested = ToolExecutionContext::from_run_context(context);
        self.log.push(Effect {
            run: context.run_id().clone(),
            call: context.call_id().clone(),
            tool: self.def.name.clone(),
            tag: act.tag.clone(),
            depth: nested.depth(),
        });
        if act.ms > 0 {
            tokio::time::sleep(Duration::from_millis(act.ms)).await;
        }
        let mut answers = Vec::new();
        let calls = act
            .nest
            .iter()
            .map(|call| nest(&nested, call, self.secret.as_deref()));
        if act.nest_parallel {
            answers.extend(futures_util::future::join_all(calls).await);
        } else {
            for call in calls {
                answers.push(call.await);
            }
        }
        let answers = answers.join("; ");
        match act.end {
            End::Ok => Ok(ToolResult::text(format!(
                "{} [{answers}]",
                self.said(&act, "done")
            ))),
            End::ErrorResult => Ok(ToolResult::error(self.said(&act, "could not"))),
            End::Err => Err(anyhow::anyhow!(self.said(&act, "failed"))),
            End::Panic => panic!("sim: planted panic in {}", act.tag),
            End::Hang => std::future::pending().await,
        }
    }

    async fn reconcile(&self, context: &ToolRunContext) -> anyhow::Result<Reconciled> {
        if !self.def.reconciles {
            return Ok(Reconciled::Unknown);
        }
        Ok(if self.log.has(context.run_id(), context.call_id()) {
            Reconciled::Done(ToolResult::text(format!("found done by {}", self.def.name)))
        } else {
            Reconciled::NotDone
        })
    }
}

async fn nest(context: &ToolExecutionContext, call: &CallPlan, secret: Option<&str>) -> String {
    let args = arguments(&call.args, secret, false).unwrap_or(Value::Null);
    match context.call_tool(&call.tool, args).await {
        Ok(result) => format!("{}: {}", call.tool, result.content),
        Err(error) => format!("{}: refused: {error}", call.tool),
    }
}
