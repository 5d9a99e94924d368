//! Item 3: with a ledger, an approval asked for while a call ran is
//! honoured: the row settles `deferred` (the call did not act), and the
//! approved call runs exactly once after the resume, with or without a
//! restart of the process in between.

use std::sync::atomic::AtomicUsize;

use tinyagents::{ledger::CallStatus, ledger::RunState, ledger::SqliteLedger};

use super::*;

/// `wire` (never replayed): its first execution asks for a person's
/// approval without acting; later ones act. The counters are shared by
/// every instance, as the outside world is.
#[derive(Clone, Default)]
struct World {
    executions: Arc<AtomicUsize>,
    effects: Arc<AtomicUsize>,
    /// How many of its first executions ask (one when zero).
    asks: usize,
}

impl World {
    fn wire(&self) -> Arc<dyn Tool> {
        let world = self.clone();
        let tool = FnTool::new(
            "wire",
            "Wires money.",
            move |_: serde_json::Map<String, Value>| {
                let world = world.clone();
                async move {
                    if world.executions.fetch_add(1, Ordering::SeqCst) < world.asks.max(1) {
                        return Err(anyhow::Error::new(TinyAgentsError::ApprovalRequired {
                            tool: "wire".into(),
                            reason: "a second pair of eyes".into(),
                        }));
                    }
                    world.effects.fetch_add(1, Ordering::SeqCst);
                    anyhow::Ok("wired")
                }
            },
        )
        .map_spec(|s| s.replay(tinyagents::core::ToolReplay::Never));
        Arc::new(tool)
    }

    fn harness(&self, ledger: Arc<dyn EffectLedger>, answers: Vec<ChatResponse>) -> AgentHarness {
        build(&script(answers), &[self.wire()], |b| b.ledger(ledger))
    }
}

fn wire_turn() -> ChatResponse {
    ScriptedModel::tool_call("wire", json!({"amount": 5}))
}

async fn row_status(ledger: &dyn EffectLedger, run: &RunId) -> (CallStatus, u32) {
    let row = ledger.get(run, &CallId::new("p1")).await.unwrap().unwrap();
    (row.status, row.attempts)
}

/// Issue 11 item 3, in one process: the row is `deferred` while the run
/// waits, the approved call runs once (the row completes on its second
/// attempt), and the same state resumed again is refused.
#[tokio::test]
async fn i11_3_an_approval_asked_while_running_is_honoured_once_with_a_ledger() {
    let world = World::default();
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let harness = world.harness(ledger.clone(), vec![wire_turn(), done()]);
    let suspended = through_json(&harness.run("go").await.unwrap());
    let run_id = suspended.run_id.clone();
    assert_eq!(
        row_status(ledger.as_ref(), &run_id).await.0,
        CallStatus::Deferred
    );
    assert!(
        ledger.unresolved(&run_id).await.unwrap().is_empty(),
        "a deferred call is not in doubt"
    );
    let decisions = approve_all(&suspended);

    let run = resume(&harness, suspended.clone(), &decisions)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(tool_results(&run.messages)[0].1, "wired");
    assert_eq!(
        row_status(ledger.as_ref(), &run_id).await,
        (CallStatus::Completed, 2)
    );
    assert_eq!(ledger.run_state(&run_id).await.unwrap(), RunState::Finished);

    let text = refusal(resume(&harness, suspended, &decisions).await);
    assert!(text.contains("has finished"), "{text}");
    assert_eq!(
        world.effects.load(Ordering::SeqCst),
        1,
        "the approved call acted once"
    );
}

/// Issue 11 item 3, across a restart: the run suspends in one process
/// (SQLite ledger), the process ends, a new one reopens the file and
/// resumes the stored state: the approved call runs once.
#[tokio::test]
async fn i11_3_an_approval_asked_while_running_is_honoured_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let world = World::default();
    let stored = {
        let ledger = Arc::new(SqliteLedger::open(&path).await.unwrap());
        let harness = world.harness(ledger.clone(), vec![wire_turn()]);
        let suspended = through_json(&harness.run("go").await.unwrap());
        ledger.shutdown().await.unwrap();
        serde_json::to_string(&suspended).unwrap()
    };
    let suspended: SuspendedRun = serde_json::from_str(&stored).unwrap();
    let run_id = suspended.run_id.clone();
    let ledger = Arc::new(SqliteLedger::open(&path).await.unwrap());
    assert_eq!(
        row_status(ledger.as_ref(), &run_id).await.0,
        CallStatus::Deferred
    );
    let harness = world.harness(ledger.clone(), vec![done()]);
    let decisions = approve_all(&suspended);
    let run = resume(&harness, suspended, &decisions).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(tool_results(&run.messages)[0].1, "wired");
    assert_eq!(
        row_status(ledger.as_ref(), &run_id).await,
        (CallStatus::Completed, 2)
    );
    assert_eq!(world.effects.load(Ordering::SeqCst), 1);
}

/// Issue 11 items 3 and 4d, without a ledger: a call approved on resume
/// that asks again while it runs (it did not act) may be approved again;
/// the second approval runs it once, and resuming that state again does
/// not run it twice.
#[tokio::test]
async fn i11_3_a_call_that_asks_again_after_its_approval_can_be_approved_again_and_runs_once() {
    let world = World {
        asks: 2,
        ..World::default()
    };
    let harness = build(
        &script(vec![wire_turn(), done(), done()]),
        &[world.wire()],
        |b| b,
    );
    let first = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&first);
    let second = through_json(&resume(&harness, first, &decisions).await.unwrap());
    assert_eq!(world.executions.load(Ordering::SeqCst), 2);
    let decisions = approve_all(&second);
    let run = resume(&harness, second.clone(), &decisions).await.unwrap();
    assert_eq!(tool_results(&run.messages)[0].1, "wired");
    let again = resume(&harness, second, &decisions)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        again.contains("was resumed from this suspended state before (call p1 was decided then)"),
        "{again}"
    );
    assert_eq!(world.effects.load(Ordering::SeqCst), 1);
}
