//! Issue 13: a seam of delegation and events the simulator found
//! (docs/simulation.md, "What it found"; the shrunk histories are
//! crates/tinyagents-sim/findings/a-dropped-delegated-run-closes-its-stream.json
//! and a-closing-event-for-every-start-delivered.json).

use super::*;

/// An event with the delegated calls it came through.
type Placed = (Vec<String>, AgentEvent);

/// Every event with the delegated calls it came through.
fn flatten(events: &[AgentEvent]) -> Vec<Placed> {
    fn walk(path: Vec<String>, event: &AgentEvent, out: &mut Vec<Placed>) {
        match event {
            AgentEvent::Delegated {
                parent_call_id,
                event,
                ..
            } => {
                let mut path = path;
                path.push(parent_call_id.to_string());
                walk(path, event, out);
            }
            other => out.push((path, other.clone())),
        }
    }
    let mut out = Vec::new();
    for event in events {
        walk(Vec::new(), event, &mut out);
    }
    out
}

/// Found by seed 27: a coordinator whose delegating call timed out (or was
/// cancelled) while the delegated agent's tool ran dropped the agent's run
/// inside its call; the child's stream kept a `ToolStarted` that never
/// ended and a run that never ended. A run dropped before it ends now
/// closes its own stream: each call it started gets a `ToolFailed`, the
/// run a `RunFailed`, both before the coordinator's own end of the
/// delegating call.
#[tokio::test(start_paused = true)]
async fn i13_a_delegated_run_dropped_by_its_timed_out_caller_closes_its_stream_first() {
    let slow = ProbeTool::new("slow", false, Behaviour::Sleep(Duration::from_secs(3600)))
        .with_spec(|s| s.timeout(Duration::from_secs(7200)));
    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["helper"]),
        AgentDefinition::new("helper", "Helper")
            .description("Helper does its job.")
            .exposed()
            .tools(["slow"]),
    ];
    let helper = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("slow", json!({"tag": "long"})),
    });
    let root = TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(result),
        None => call("Helper", json!({ "query": "take your time" })),
    });
    let models = by_agent(&[("root", root), ("helper", helper)]);
    let agent = AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
        .limits(RunLimits::default().with_tool_timeout(Some(Duration::from_millis(50))))
        .get_or_create_agent(
            request("root", &defs, &models)
                .tools(HostTools::new().with_shared(Arc::clone(&slow) as Arc<dyn Tool>)),
        )
        .await
        .unwrap();
    let (sink, mut receiver) = tinyagents::harness::event_channel(64);
    let run = agent.run(RunRequest::new("go"), &sink).await.unwrap();
    drop(sink);
    let mut events = Vec::new();
    while let Some(event) = receiver.recv().await {
        events.push(event);
    }
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(
        tinyagents_tests::tool_results(&run.messages)[0].1,
        "'Helper' timed out after 50 ms"
    );
    let flat = flatten(&events);
    let position = |wanted: &dyn Fn(&Placed) -> bool| {
        flat.iter()
            .position(wanted)
            .unwrap_or_else(|| panic!("missing event: {flat:#?}"))
    };
    let child = vec!["p1".to_owned()];
    let child_call_ends = position(&|(path, e)| {
        *path == child
            && matches!(e, AgentEvent::ToolFailed { call_id, error, .. }
                if call_id.as_str() == "p1" && error == "tool 'slow' was stopped: its run was dropped before the call ended")
    });
    let child_run_ends = position(&|(path, e)| {
        *path == child
            && matches!(e, AgentEvent::RunFailed { error } if error.contains("was stopped before it ended"))
    });
    let delegating_call_ends = position(&|(path, e)| {
        path.is_empty() && e.is_tool_terminal() && e.call_id().is_some_and(|id| id.as_str() == "p1")
    });
    assert!(
        child_call_ends < child_run_ends && child_run_ends < delegating_call_ends,
        "{flat:#?}"
    );
    for path in [Vec::new(), child] {
        let stream: Vec<AgentEvent> = flat
            .iter()
            .filter(|(p, _)| *p == path)
            .map(|(_, e)| e.clone())
            .collect();
        tinyagents_tests::assert_one_terminal_per_start(&stream);
        let ends = stream
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. }
                )
            })
            .count();
        assert_eq!(ends, 1, "{path:?}: {stream:#?}");
    }
}
