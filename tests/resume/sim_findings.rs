//! Issue 13: seams of resume and recovery the simulator found
//! (docs/simulation.md, "What it found"), each fixed with its regression
//! here; the shrunk history of each is kept in
//! crates/tinyagents-sim/findings/.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tinyagents::{
    core::ChatRequest, core::ModelError, core::ToolReplay, harness::ToolExecutionContext,
    middleware::RedactionMiddleware, middleware::Redactor,
};

use super::*;

const SECRET: &str = "sk-live-0123456789abcdefghij";

fn opens_and_ends_once(events: &[AgentEvent], run: &RunId) {
    assert!(
        matches!(events.first(), Some(AgentEvent::RunStarted { run_id, .. }) if run_id == run),
        "{events:#?}"
    );
    let ends = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. }
            )
        })
        .count();
    assert_eq!(ends, 1, "{events:#?}");
    assert!(matches!(
        events.last(),
        Some(AgentEvent::RunCompleted { .. } | AgentEvent::RunFailed { .. })
    ));
}

/// Found by seed 1 (findings/every-segment-opens-with-run-started.json): a
/// resumed segment ended with `RunCompleted` but never said `RunStarted`,
/// nor did a recovered one, nor a resume refused before it opened; a
/// reader of that stream alone could not tell which run it was. Every
/// segment now opens with `RunStarted` and ends once.
#[tokio::test]
async fn i13_every_segment_a_run_a_resume_a_refused_resume_and_a_recovery_opens_with_run_started() {
    let deploy = flagged("deploy");
    let model = script(vec![
        ScriptedModel::tool_call("deploy", json!({"tag": "prod"})),
        done(),
    ]);
    let ledger = Arc::new(MemoryLedger::new());
    let shared = Arc::clone(&ledger) as Arc<dyn EffectLedger>;
    let harness = build(&model, &[deploy.clone()], |b| b.ledger(shared));
    let id = RunId::new("segments");
    let (run, events) =
        run_collecting(&harness, RunRequest::new("go").with_run_id(id.clone())).await;
    opens_and_ends_once(&events, &id);
    let suspended = through_json(&run.unwrap());
    let (refused, events) = resume_collecting(&harness, suspended.clone(), &[]).await;
    assert!(refused.is_err());
    opens_and_ends_once(&events, &id);
    let decisions = approve_all(&suspended);
    let (resumed, events) = resume_collecting(&harness, suspended, &decisions).await;
    assert_eq!(resumed.unwrap().status, RunStatus::Completed);
    opens_and_ends_once(&events, &id);
    let (sink, collected) = collector();
    let recovered = harness.recover(&id, ResumeOptions::default(), &sink).await;
    drop(sink);
    assert!(recovered.is_err(), "a finished run is not recovered");
    opens_and_ends_once(&collected.await.unwrap(), &id);
}

/// Found by seed 8 (findings/no-secret-in-a-stored-state.json): the
/// stored state of a run waiting for approval held the waiting call's
/// arguments unredacted, so a secret the transcript and the ledger never
/// saw reached the host's storage. The state now keeps the call redacted
/// and lists it in `replay_blocked`; the real arguments stay in the
/// process: resuming that very value runs the call with them, and a state
/// read back from storage refuses to run it (rather than run it on
/// "[REDACTED]").
#[tokio::test]
async fn i13_a_waiting_call_with_a_secret_is_stored_redacted_and_runs_only_from_this_process() {
    let seen = Arc::new(parking_lot_free::Log::default());
    let wire = {
        let seen = Arc::clone(&seen);
        FnTool::new("wire", "Wires money.", move |args: Value| {
            let seen = Arc::clone(&seen);
            async move {
                seen.push(args.to_string());
                anyhow::Ok("wired")
            }
        })
        .map_spec(ToolSpec::approval_required)
    };
    let wire: Arc<dyn Tool> = Arc::new(wire);
    let redaction = || {
        Arc::new(RedactionMiddleware::with_redactor(
            Redactor::new().with_secret(SECRET),
        ))
    };
    let turn = || ScriptedModel::tool_call("wire", json!({"to": "acme", "token": SECRET}));
    let model = script(vec![turn(), done(), turn(), done()]);
    let harness = build(&model, &[Arc::clone(&wire)], |b| b.middleware(redaction()));
    let run = harness.run("pay").await.unwrap();
    let state = run.suspended.clone().unwrap();
    let stored = serde_json::to_string(&state).unwrap();
    assert!(!stored.contains(SECRET), "{stored}");
    assert_eq!(state.replay_blocked, [CallId::new("p1")]);
    // From the value this process returned: it runs, with the real token.
    let decisions = approve_all(&state);
    let resumed = resume(&harness, state, &decisions).await.unwrap();
    assert_eq!(tool_results(&resumed.messages)[0].1, "wired");
    assert!(seen.entries()[0].contains(SECRET), "{:?}", seen.entries());
    // Read back from storage (another run of the same agent): refused.
    let again = harness.run("pay again").await.unwrap();
    let from_storage: SuspendedRun =
        serde_json::from_str(&serde_json::to_string(again.suspended.as_ref().unwrap()).unwrap())
            .unwrap();
    let decisions = approve_all(&from_storage);
    let refused = resume(&harness, from_storage, &decisions).await.unwrap();
    let (_, text, is_error) = tool_results(&refused.messages).remove(0);
    assert!(is_error);
    assert!(
        text.contains("held a secret that redaction kept out of the stored state, so it cannot run from that state"),
        "{text}"
    );
    assert_eq!(seen.entries().len(), 1, "the refused call did not run");
}

/// A run over a ledger whose only call needs approval; the state it waits
/// in, approved and resumed once: the call runs, then the model fails, so
/// the run is neither finished nor checkpointed again.
async fn resumed_once_then_failed(
    deploy: &Arc<ProbeTool>,
) -> (AgentHarness, SuspendedRun, Vec<ApprovalDecision>) {
    let model = Arc::new(ScriptedModel::with_results([
        Ok(ScriptedModel::tool_call("deploy", json!({"tag": "prod"}))),
        Err(ModelError::Server {
            status: 503,
            message: "overloaded".into(),
        }),
        Ok(done()),
    ]));
    let ledger = Arc::new(MemoryLedger::new()) as Arc<dyn EffectLedger>;
    let harness = build(&model, &[Arc::clone(deploy) as Arc<dyn Tool>], |b| {
        b.ledger(ledger)
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    let decisions = approve_all(&suspended);
    let first = resume(&harness, suspended.clone(), &decisions).await;
    assert!(matches!(first, Err(TinyAgentsError::Model(_))), "{first:?}");
    assert_eq!(calls_of(deploy), 1);
    (harness, suspended, decisions)
}

/// Found by seed 3651 (findings/a-state-resumes-once-with-a-ledger.json):
/// with a ledger, a stored state whose first resume ran the approved call
/// and then failed (the model errored, so the run was neither finished nor
/// checkpointed again) could be resumed again, and the approved call ran a
/// second time. The ledger's row of the call now says it was decided.
#[tokio::test]
async fn i13_with_a_ledger_a_state_whose_resume_failed_is_not_resumed_again() {
    let deploy = flagged("deploy");
    let (harness, suspended, decisions) = resumed_once_then_failed(&deploy).await;
    let again = refusal(resume(&harness, suspended, &decisions).await);
    assert!(
        again.ends_with("was resumed from this suspended state before (call p1 is completed in the effect ledger): a suspended state resumes once"),
        "{again}"
    );
    assert_eq!(calls_of(&deploy), 1, "the approved call ran once");
}

/// A model whose second turn never answers in the first process (the
/// process dies while it waits), and which answers from the script in a
/// recovered one.
struct DiesAtTurnTwo {
    script: Vec<ChatResponse>,
    dying: bool,
    asked: AtomicUsize,
    waiting: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl ChatModel for DiesAtTurnTwo {
    fn name(&self) -> &str {
        "dies-at-turn-two"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let turn = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        if self.dying && turn == 1 {
            self.waiting.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(self.script.get(turn).cloned().unwrap_or_else(done))
    }
}

/// Found by seed 2152 (findings/a-recovered-run-keeps-what-it-spent.json):
/// a recovered run restored its budget from the checkpoint taken as the
/// interrupted turn began; the turn's calls answered from their rows were
/// admitted again, but the nested calls they had made were not, so their
/// slots were forgotten and the run could spend its budget a second time.
/// Recovery now charges every call its ledger rows show.
#[tokio::test]
async fn i13_a_recovered_run_keeps_the_budget_its_answered_calls_spent() {
    let leaf = plain("leaf");
    let fanout: Arc<dyn Tool> = Arc::new(
        FnTool::with_context(
            "fanout",
            "Calls leaf twice.",
            |_: Value, ctx: ToolRunContext| async move {
                let harness = ToolExecutionContext::from_run_context(&ctx);
                for tag in ["a", "b"] {
                    harness.call_tool("leaf", json!({"tag": tag})).await?;
                }
                anyhow::Ok("fanned out")
            },
        )
        .map_spec(|s| s.replay(ToolReplay::Never)),
    );
    let script = vec![
        ScriptedModel::tool_call("fanout", json!({})),
        ScriptedModel::tool_calls([("leaf", json!({"tag": "c"})), ("leaf", json!({"tag": "d"}))]),
        done(),
    ];
    let ledger = Arc::new(MemoryLedger::new());
    let limits = RunLimits::default()
        .with_max_tool_calls(4)
        .with_max_nested_depth(1);
    let process = |dying: bool, waiting: Arc<tokio::sync::Notify>| {
        let model = Arc::new(DiesAtTurnTwo {
            script: script.clone(),
            dying,
            asked: AtomicUsize::new(0),
            waiting,
        });
        let mut builder = AgentHarness::builder(model)
            .limits(limits.clone())
            .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>);
        builder.register(Arc::clone(&fanout)).unwrap();
        builder
            .register(Arc::clone(&leaf) as Arc<dyn Tool>)
            .unwrap();
        builder.build().unwrap()
    };
    let id = RunId::new("budget");
    let waiting = Arc::new(tokio::sync::Notify::new());
    let first = process(true, Arc::clone(&waiting));
    let none = EventSink::none();
    tokio::select! {
        _ = first.run_with(RunRequest::new("go").with_run_id(id.clone()), &none) => {
            panic!("the first process was meant to die at turn two")
        }
        () = waiting.notified() => {}
    }
    drop(first);
    assert_eq!(calls_of(&leaf), 2, "turn one spent three slots");
    let second = process(false, Arc::new(tokio::sync::Notify::new()));
    let recovered = second
        .recover(&id, ResumeOptions::default(), &EventSink::none())
        .await;
    assert_eq!(
        recovered.unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: tinyagents::core::LimitKind::ToolCalls,
            limit: 4,
            used: 4,
        },
        "turn two's second call found the budget spent"
    );
    assert_eq!(
        calls_of(&leaf),
        3,
        "one slot was left: only the first leaf of turn two ran"
    );
}

/// Found by seed 3651 once more (the same history, after the fix above): a
/// replay-safe approved call that timed out in a resume leaves its row
/// started, and a second resume of the same state ran it again. A call a
/// person approved is now recorded never replayed: met again in doubt, it
/// is put to its tool, and one that cannot tell is answered "interrupted,
/// outcome unknown" instead of running twice.
#[tokio::test(start_paused = true)]
async fn i13_an_approved_call_left_in_doubt_by_a_timeout_does_not_run_again_on_a_second_resume() {
    let deploy = ProbeTool::new("deploy", false, Behaviour::Sleep(Duration::from_secs(60)))
        .with_spec(|s| {
            s.approval_required()
                .replay(ToolReplay::Safe)
                .timeout(Duration::from_millis(10))
        });
    let (harness, suspended, decisions) = resumed_once_then_failed(&deploy).await;
    let again = resume(&harness, suspended, &decisions).await.unwrap();
    let (_, text, is_error) = tool_results(&again.messages).remove(0);
    assert!(
        is_error && text.starts_with("interrupted, outcome unknown"),
        "{text}"
    );
    assert_eq!(calls_of(&deploy), 1, "the approved call ran once");
}

/// Found by seed 244 (findings/a-settled-call-is-not-asked-for-again.json):
/// a call a person approved ran and settled, then the process died before
/// the next checkpoint; the recovery met the call again, and since no
/// approval survives a process, asked a person to approve it once more: a
/// "no" then told the model a payment that had happened was refused. A
/// call met again with a settled row of the same call is now answered from
/// its row before anyone is asked.
#[tokio::test]
async fn i13_a_recovery_answers_a_settled_approved_call_from_its_row_instead_of_asking_again() {
    let wire = flagged("wire");
    let ledger = Arc::new(MemoryLedger::new());
    let script = vec![
        ScriptedModel::tool_call("wire", json!({"tag": "rent"})),
        ChatResponse::text("paid"),
    ];
    let process = |dying: bool, waiting: Arc<tokio::sync::Notify>| {
        let model = Arc::new(DiesAtTurnTwo {
            script: script.clone(),
            dying,
            asked: AtomicUsize::new(0),
            waiting,
        });
        let mut builder =
            AgentHarness::builder(model).ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>);
        builder
            .register(Arc::clone(&wire) as Arc<dyn Tool>)
            .unwrap();
        builder.build().unwrap()
    };
    let id = RunId::new("approved-then-died");
    let waiting = Arc::new(tokio::sync::Notify::new());
    let first = process(true, Arc::clone(&waiting));
    let run = first
        .run_with(
            RunRequest::new("pay").with_run_id(id.clone()),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let suspended = through_json(&run);
    let decisions = approve_all(&suspended);
    let none = EventSink::none();
    tokio::select! {
        _ = first.resume(suspended, &decisions, ResumeOptions::default(), &none) => {
            panic!("the process was meant to die after the approved call")
        }
        () = waiting.notified() => {}
    }
    drop(first);
    assert_eq!(calls_of(&wire), 1);
    let second = process(false, Arc::new(tokio::sync::Notify::new()));
    let recovered = second
        .recover(&id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        recovered.status,
        RunStatus::Completed,
        "nobody was asked again"
    );
    assert!(recovered.pending().is_empty());
    assert_eq!(tool_results(&recovered.messages)[0].1, "ok rent");
    assert_eq!(calls_of(&wire), 1, "the approved call ran once");
}

/// Found by seed 22839 (findings/a-blocked-replay-keeps-its-slot.json): a
/// recovered turn answers a call whose arguments held a secret from its row
/// without admitting it again (the secret was never persisted), and that
/// answer spent no slot, so the turn's next call, refused by the budget the
/// first time, ran. Every call the recovered turn meets spends its slot
/// again, as when it was first issued. (The run here fails at its limit, and
/// the process dies before it marks the run finished.)
#[tokio::test]
async fn i13_a_recovered_turn_charges_a_blocked_replay_so_a_call_over_budget_stays_refused() {
    let wire = plain("wire");
    let read = plain("read");
    // The process dies before it marks the run finished: that write is lost.
    let ledger = Arc::new(HookedLedger::new(|write| match write {
        LedgerWrite::Finished => Verdict::Drop,
        _ => Verdict::Pass,
    }));
    let turn = || {
        ScriptedModel::tool_calls([
            ("wire", json!({"tag": "rent", "token": SECRET})),
            ("read", json!({"tag": "notes"})),
        ])
    };
    let model = script(vec![turn(), turn(), done()]);
    let shared = Arc::clone(&ledger) as Arc<dyn EffectLedger>;
    let harness = build(&model, &[wire.clone(), read.clone()], |b| {
        b.limits(RunLimits::default().with_max_tool_calls(1))
            .middleware(Arc::new(RedactionMiddleware::with_redactor(
                Redactor::new().with_secret(SECRET),
            )))
            .ledger(shared)
    });
    let id = RunId::new("blocked");
    let first = harness
        .run_with(
            RunRequest::new("go").with_run_id(id.clone()),
            &EventSink::none(),
        )
        .await;
    assert!(
        matches!(first, Err(TinyAgentsError::LimitExceeded { .. })),
        "{first:?}"
    );
    assert_eq!(
        (calls_of(&wire), calls_of(&read)),
        (1, 0),
        "read was over the budget"
    );
    let again = harness
        .recover(&id, ResumeOptions::default(), &EventSink::none())
        .await;
    assert!(
        matches!(again, Err(TinyAgentsError::LimitExceeded { .. })),
        "{again:?}"
    );
    assert_eq!(
        (calls_of(&wire), calls_of(&read)),
        (1, 0),
        "read is still over the budget"
    );
}
