//! The campaign's agent: a 40-turn run of mixed turns over a real SQLite
//! ledger, with a `pay` tool that never repeats and writes its effect to a
//! file (the "payment service", keyed by the call's idempotency key and
//! fsync'd), a replay-safe `read`, and a `batch` tool that pays through
//! nested calls, to depth 2. The model's answer is a function of the
//! transcript (how many turns it holds), so a recovered run asks for the
//! turns after its checkpoint, as a real model would continue.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    core::ChatRequest, core::ModelError, core::ToolReplay, harness::ToolExecutionContext,
    tools::Reconciled,
};

/// The run every trial drives.
pub(crate) const RUN: &str = "campaign";

/// Turns of the run before its final answer.
pub(crate) const TURNS: usize = 40;

/// The effects file: one line per payment, its idempotency key.
pub(crate) fn effects_file(dir: &Path) -> PathBuf {
    dir.join("effects")
}

/// The payment service's record: how many times each key was paid.
pub(crate) fn effects(dir: &Path) -> std::collections::HashMap<String, usize> {
    let mut paid = std::collections::HashMap::new();
    let text = std::fs::read_to_string(effects_file(dir)).unwrap_or_default();
    // A line without its end was torn by the kill: no payment.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        *paid.entry(line.trim_end().to_owned()).or_default() += 1;
    }
    paid
}

/// Turn `i` of the script.
fn turn(i: usize) -> ChatResponse {
    let to = |tag: &str| format!("{tag}{i}");
    match i % 5 {
        0 => ScriptedModel::tool_calls([("pay", json!({ "to": to("m") }))]),
        1 => ScriptedModel::tool_calls([
            ("read", json!({ "to": to("r") })),
            ("read", json!({ "to": to("s") })),
        ]),
        2 => ScriptedModel::tool_calls([("batch", json!({ "to": [to("a"), to("b")] }))]),
        3 => ScriptedModel::tool_calls([(
            "batch",
            json!({ "to": [to("c"), to("d")], "deep": true }),
        )]),
        _ => ScriptedModel::tool_calls([
            ("pay", json!({ "to": to("x") })),
            ("read", json!({ "to": to("y") })),
        ]),
    }
}

/// Answers with the turn the transcript has reached.
struct TurnModel;

#[async_trait]
impl ChatModel for TurnModel {
    fn name(&self) -> &str {
        "turns"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let done = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        Ok(if done < TURNS {
            turn(done)
        } else {
            ChatResponse::text("all paid")
        })
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PayArgs {
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BatchArgs {
    to: Vec<String>,
    #[serde(default)]
    deep: bool,
}

fn key(context: &ToolRunContext) -> anyhow::Result<String> {
    context
        .idempotency_key()
        .map(ToString::to_string)
        .ok_or_else(|| anyhow::anyhow!("no idempotency key"))
}

fn pay_tool(dir: &Path, reconcile: bool) -> Arc<dyn Tool> {
    let file = effects_file(dir);
    let pay = FnTool::with_context(
        "pay",
        "Pays.",
        move |args: PayArgs, context: ToolRunContext| {
            let file = file.clone();
            async move {
                let key = key(&context)?;
                tokio::time::sleep(Duration::from_micros(500)).await;
                let mut out = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)?;
                out.write_all(format!("{key}\n").as_bytes())?;
                out.sync_all()?;
                tokio::time::sleep(Duration::from_micros(500)).await;
                anyhow::Ok(format!("paid {}", args.to))
            }
        },
    )
    .map_spec(|spec| spec.replay(ToolReplay::Never));
    if !reconcile {
        return Arc::new(pay);
    }
    let dir = dir.to_path_buf();
    Arc::new(pay.with_reconcile(move |context| {
        let dir = dir.clone();
        async move {
            let key = key(&context)?;
            Ok(if effects(&dir).contains_key(&key) {
                Reconciled::Done(ToolResult::text("paid (found by its key)"))
            } else {
                Reconciled::NotDone
            })
        }
    }))
}

fn read_tool() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::new("read", "Reads.", |args: PayArgs| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            anyhow::Ok(format!("read {}", args.to))
        })
        .map_spec(ToolSpec::read_only),
    )
}

/// `batch` pays each of `to` through a nested `pay`; with `deep`, the last
/// through a nested `batch` (depth 2). It has no effect of its own, so
/// with reconciliation on it answers `NotDone`: run it again, and each of
/// its nested payments is reconciled as it is met.
fn batch_tool(reconcile: bool) -> Arc<dyn Tool> {
    let batch = FnTool::with_context(
        "batch",
        "Pays several.",
        |args: BatchArgs, context: ToolRunContext| async move {
            let harness = context
                .host_extension()
                .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
                .ok_or_else(|| anyhow::anyhow!("no nested calls"))?;
            let mut said = Vec::new();
            let last = args.to.len().saturating_sub(1);
            for (i, to) in args.to.iter().enumerate() {
                let answer = if args.deep && i == last {
                    harness.call_tool("batch", json!({ "to": [to] })).await
                } else {
                    harness.call_tool("pay", json!({ "to": to })).await
                };
                said.push(match answer {
                    Ok(result) => result.content,
                    Err(error) => format!("refused: {error}"),
                });
            }
            anyhow::Ok(said.join(" | "))
        },
    )
    .map_spec(|spec| spec.replay(ToolReplay::Never));
    if reconcile {
        Arc::new(batch.with_reconcile(|_| async { Ok(Reconciled::NotDone) }))
    } else {
        Arc::new(batch)
    }
}

/// The campaign's harness over `ledger`.
pub(crate) fn harness(
    dir: &Path,
    ledger: Arc<dyn tinyagents::ledger::EffectLedger>,
    reconcile: bool,
) -> AgentHarness {
    let limits = RunLimits::default()
        .with_max_nested_depth(2)
        .with_max_tool_calls(2_000)
        .with_max_model_calls(200);
    let mut builder = AgentHarness::builder(Arc::new(TurnModel))
        .ledger(ledger)
        .limits(limits);
    for tool in [pay_tool(dir, reconcile), read_tool(), batch_tool(reconcile)] {
        builder.register(tool).expect("distinct names");
    }
    builder.build().expect("a valid harness")
}
