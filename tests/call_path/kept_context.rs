//! A tool that keeps its context past its call (in a task it spawned, a
//! cache) holds no part of the run: the run's event stream still closes
//! when the run ends, so a host that reads it to its end is not left
//! waiting; progress reported through a kept context after the run goes
//! nowhere; and a nested call made through one is refused at once. On
//! every origin of the keeping call: model-issued, nested and delegated.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tinyagents::harness::ToolExecutionContext;
use tinyagents::prelude::*;

use crate::{assert_one_run_end, coordinator, harness, one_turn, run, run_coordinator, spec};

/// How long a stream may stay open after its run ended before the test
/// calls it a hang (the run itself takes milliseconds).
const HANG: Duration = Duration::from_secs(30);

/// A tool that keeps every context it is given and, when `inner` names a
/// tool, calls it as a nested call first.
struct Keeper {
    spec: ToolSpec,
    inner: Option<&'static str>,
    kept: Arc<Mutex<Vec<ToolRunContext>>>,
}

fn keeper(
    name: &str,
    inner: Option<&'static str>,
    kept: &Arc<Mutex<Vec<ToolRunContext>>>,
) -> Arc<dyn Tool> {
    Arc::new(Keeper {
        spec: spec(name),
        inner,
        kept: Arc::clone(kept),
    })
}

#[async_trait]
impl Tool for Keeper {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let context = context.ok_or_else(|| anyhow::anyhow!("no context"))?;
        self.kept.lock().push(context.clone());
        context.report_progress(Some(0.5), "half way");
        if let Some(inner) = self.inner {
            installed(context).call_tool(inner, json!({})).await?;
        }
        Ok(ToolResult::text(format!("kept {}", context.call_id())))
    }
}

/// The harness's context installed in `context`.
fn installed(context: &ToolRunContext) -> &ToolExecutionContext {
    context
        .host_extension()
        .and_then(|any| any.downcast_ref::<ToolExecutionContext>())
        .expect("the harness installs its context")
}

/// What the kept contexts do after their run: progress and warnings go
/// nowhere, and a nested call through any of them is refused at once.
async fn use_after_the_run(kept: &[ToolRunContext]) {
    for context in kept {
        context.report_progress(Some(1.0), "after the run");
        context.warn("after the run");
        let late = tokio::time::timeout(HANG, installed(context).call_tool("add", json!({})))
            .await
            .expect("a nested call through a kept context is answered at once");
        let error = late.expect_err("a kept context makes no nested call after its run");
        assert!(
            error.to_string().contains("settled"),
            "the refusal says the calling tool settled: {error}"
        );
    }
}

/// Model-issued and nested: `keep` (p1) keeps its context and calls
/// `keep_inner` (p1/1), which keeps its own. The run's stream closes when
/// the run ends, each kept context still names its call, and using them
/// afterwards reaches nothing.
#[tokio::test]
async fn i32_kept_contexts_of_a_model_issued_and_a_nested_call_hold_no_part_of_the_run() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let harness = harness(
        one_turn(&[("keep".to_owned(), json!({}))]),
        vec![
            keeper("keep", Some("keep_inner"), &kept),
            keeper("keep_inner", None, &kept),
            crate::add(),
        ],
        |b| b,
    );
    let (result, events) = tokio::time::timeout(HANG, run(&harness))
        .await
        .expect("the event stream closed when the run ended");
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_one_run_end(&events);
    let progress: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        ["half way"],
        "the model-issued call's progress, during its call"
    );
    let kept = kept.lock().clone();
    let ids: Vec<String> = kept.iter().map(|c| c.call_id().to_string()).collect();
    assert_eq!(ids, ["p1", "p1/1"]);
    use_after_the_run(&kept).await;
}

/// Delegated: the helper agent's tool keeps its context; the
/// coordinator's stream (which carries the helper's events) closes when
/// the coordinator's run ends.
#[tokio::test]
async fn i32_a_kept_context_of_a_delegated_call_holds_no_part_of_the_run() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let root = coordinator(
        vec![
            ScriptedModel::tool_call("keep", json!({})),
            ChatResponse::text("helped"),
        ],
        vec![keeper("keep", None, &kept), crate::add()],
        Vec::new(),
        None,
    )
    .await;
    let (result, events) =
        tokio::time::timeout(HANG, run_coordinator(&root, RunRequest::new("go")))
            .await
            .expect("the event stream closed when the run ended");
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_one_run_end(&events);
    let delegated = crate::delegated_events(&events);
    assert!(
        delegated.iter().any(
            |e| matches!(e, AgentEvent::ToolProgress { message, .. } if message == "half way")
        ),
        "the delegated call's progress reached the coordinator's stream during its call"
    );
    let kept = kept.lock().clone();
    assert_eq!(kept.len(), 1);
    use_after_the_run(&kept).await;
}

/// A tool that hands its context to a task it spawns, lets the task send a
/// nested call, and returns without waiting for it.
struct Spawner {
    spec: ToolSpec,
    task: Mutex<Option<tokio::task::JoinHandle<Result<ToolResult, TinyAgentsError>>>>,
}

#[async_trait]
impl Tool for Spawner {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let context = context.ok_or_else(|| anyhow::anyhow!("no context"))?;
        let harness = installed(context).clone();
        let task = tokio::spawn(async move { harness.call_tool("counted", json!({})).await });
        *self.task.lock() = Some(task);
        // The task runs and sends its request; the call then settles
        // before the loop serves it.
        tokio::task::yield_now().await;
        Ok(ToolResult::text("spawned"))
    }
}

/// The spawner's late nested call `late` was refused as `parent settled:
/// <parent>`, never ran `counted` and never started.
async fn assert_late_call_refused(
    spawner: &Spawner,
    counted: &crate::Counted,
    events: &[AgentEvent],
    parent: &str,
    late: &str,
) {
    let task = spawner.task.lock().take().expect("the spawner ran");
    let refused = task
        .await
        .unwrap()
        .expect_err("the late nested call is refused");
    assert!(
        refused
            .to_string()
            .starts_with(&format!("parent settled: {parent}")),
        "{refused}"
    );
    assert_eq!(counted.runs(), 0, "the late nested call never ran");
    assert!(
        !events.iter().any(|e| matches!(
            e,
            AgentEvent::ToolStarted { call_id, .. } if call_id.as_str() == late
        )),
        "the late nested call never started"
    );
}

/// A read-only tool that sleeps, keeping its batch (and the loop serving
/// nested calls) alive after the spawner settled.
fn sleeper() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::new("sleep", "Sleeps.", |_: Value| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            anyhow::Ok("slept")
        })
        .map_spec(ToolSpec::read_only),
    )
}

/// NT-24 on the model-issued origin: a nested call a model-issued call's
/// spawned task sent just before that call settled, and that the loop
/// serves after, is refused as `parent settled` without running or
/// starting, as one of a settled nested parent is, while the batch goes
/// on (another call of it still runs).
#[tokio::test(start_paused = true)]
async fn i32_a_nested_call_sent_before_its_model_issued_parent_settled_and_served_after_is_refused()
{
    let spawner = Arc::new(Spawner {
        spec: spec("spawn").read_only(),
        task: Mutex::new(None),
    });
    let counted = crate::plain("counted");
    let harness = harness(
        one_turn(&[
            ("spawn".to_owned(), json!({})),
            ("sleep".to_owned(), json!({})),
        ]),
        vec![
            Arc::clone(&spawner) as Arc<dyn Tool>,
            sleeper(),
            crate::t(&counted),
        ],
        |b| b,
    );
    let (result, events) = tokio::time::timeout(HANG, run(&harness))
        .await
        .expect("the run ended");
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_one_run_end(&events);
    assert_late_call_refused(&spawner, &counted, &events, "p1", "p1/1").await;
}

/// NT-24 on the nested origin: a nested call (`p1/1/1`) that a nested
/// call's (`p1/1`) spawned task sent just before `p1/1` settled is refused
/// as `parent settled`, never runs and never starts.
#[tokio::test(start_paused = true)]
async fn i32_a_nested_call_sent_before_its_nested_parent_settled_and_served_after_is_refused() {
    let spawner = Arc::new(Spawner {
        spec: spec("spawn").read_only(),
        task: Mutex::new(None),
    });
    let counted = crate::plain("counted");
    let harness = harness(
        one_turn(&[crate::Origin::Nested.call("spawn", json!({}))]),
        vec![Arc::clone(&spawner) as Arc<dyn Tool>, crate::t(&counted)],
        |b| b,
    );
    let (result, events) = tokio::time::timeout(HANG, run(&harness))
        .await
        .expect("the run ended");
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_one_run_end(&events);
    assert_late_call_refused(&spawner, &counted, &events, "p1/1", "p1/1/1").await;
}
