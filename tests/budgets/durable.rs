//! What was spent survives a suspension and a crash: a resumed and a
//! recovered run go on from it, never counting it twice nor forgetting it.

use std::sync::atomic::Ordering;

use tinyagents::ledger::MemoryLedger;
use tinyagents_tests::{Behaviour, ProbeTool};

use super::*;

/// A run spends 0.02 cents, waits for a person, and is resumed under a
/// `max_cost` of 0.05: the resumed run starts from 0.02, makes one more
/// call (0.04), and the next one (0.06) is refused.
#[tokio::test]
async fn a_resumed_run_goes_on_from_what_it_spent_and_counts_it_once() {
    let wire =
        ProbeTool::new("wire", false, Behaviour::Yield(1)).with_spec(ToolSpec::approval_required);
    let model = ScriptedModel::new([
        calling("wire", json!({}), 0, 10),
        calling("add", json!({"a": 1, "b": 2}), 0, 10),
        answer("never asked", 0, 10),
    ]);
    let harness = priced(model, 10, |b| {
        b.tools([Arc::clone(&wire) as Arc<dyn Tool>]).limits(
            RunLimits::default()
                .with_max_cost("0.05".parse().unwrap())
                .with_behavior(LimitBehavior::Stop),
        )
    });
    let waiting = harness.run("go").await.unwrap();
    assert_eq!(waiting.status, RunStatus::AwaitingApproval);
    let suspended = waiting.suspended.clone().unwrap();
    assert_eq!(suspended.budget.spent.cost, "0.02".parse().unwrap());
    // Through JSON, as a host stores it.
    let suspended: SuspendedRun =
        serde_json::from_str(&serde_json::to_string(&suspended).unwrap()).unwrap();
    let decisions: Vec<ApprovalDecision> = suspended.pending().map(|p| p.approve()).collect();
    let run = harness
        .resume(
            suspended,
            &decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(wire.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        run.status,
        RunStatus::LimitReached(tinyagents::core::LimitKind::Cost)
    );
    assert_eq!(run.budget.spent.cost, "0.04".parse().unwrap());
    assert_eq!(run.budget.spent.model_calls, 2);
}

/// A run is killed while its second turn's tool runs, after two model
/// calls (0.04 cents) its checkpoint holds; the recovery goes on from
/// 0.04 and its one more call brings the run to 0.06, which a `max_cost`
/// of 0.07 then bounds.
#[tokio::test]
async fn a_recovered_run_goes_on_from_what_its_checkpoint_says_it_spent() {
    let ledger = Arc::new(MemoryLedger::new());
    let limits = RunLimits::default()
        .with_max_cost("0.07".parse().unwrap())
        .with_behavior(LimitBehavior::Stop);
    let started = Arc::new(tokio::sync::Notify::new());
    let hang = ProbeTool::new("hang", false, Behaviour::BlockOnce(Arc::clone(&started)));
    let crashing = priced(
        ScriptedModel::new([
            calling("add", json!({"a": 1, "b": 2}), 0, 10),
            calling("hang", json!({}), 0, 10),
        ]),
        10,
        |b| {
            b.tools([hang as Arc<dyn Tool>])
                .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
                .limits(limits.clone())
        },
    );
    let run_id = RunId::from("crashing");
    let events = EventSink::none();
    let run = crashing.run_with(RunRequest::new("go").with_run_id(run_id.clone()), &events);
    tokio::select! {
        _ = run => panic!("the run was meant to crash while hang ran"),
        () = started.notified() => {}
    }
    let recovering = priced(
        ScriptedModel::new([
            calling("add", json!({"a": 1, "b": 2}), 0, 10),
            answer("never asked", 0, 10),
        ]),
        10,
        |b| {
            b.tools([ProbeTool::new("hang", false, Behaviour::Yield(1)) as Arc<dyn Tool>])
                .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
                .limits(limits)
        },
    );
    let run = recovering
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.status,
        RunStatus::LimitReached(tinyagents::core::LimitKind::Cost)
    );
    assert_eq!(run.budget.spent.cost, "0.06".parse().unwrap());
    assert_eq!(run.budget.spent.model_calls, 3);
    assert_eq!(run.budget.spent.usage, Usage::new(0, 30));
}

/// The team over `ledger`: the coordinator on `root`, the helper on
/// `helper` with the tool `hang` (blocking once on `started` when given).
async fn ledgered_team(
    ledger: &Arc<MemoryLedger>,
    root: Vec<ChatResponse>,
    helper: Vec<ChatResponse>,
    started: Option<Arc<tokio::sync::Notify>>,
) -> tinyagents::orchestrator::ActiveAgent {
    use tinyagents::orchestrator::{
        AgentBuildRequest, AgentDefinition, AgentOrchestrator, BuildError, HostTools,
        InMemorySessionStore, ModelFactory,
    };
    let behaviour = started.map_or(Behaviour::Yield(1), Behaviour::BlockOnce);
    let hang = ProbeTool::new("hang", false, behaviour) as Arc<dyn Tool>;
    let defs = [
        AgentDefinition {
            model_options: output_cap(10),
            ..AgentDefinition::new("root", "Root").agent_tools(["helper"])
        },
        AgentDefinition {
            model_options: output_cap(50),
            ..AgentDefinition::new("helper", "Helper")
                .description("Helps.")
                .tools(["hang"])
                .exposed()
        },
    ];
    let root: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new(root).named(MODEL));
    let helper: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new(helper).named(MODEL));
    let models: Arc<dyn ModelFactory> = Arc::new(
        move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
            Ok(Arc::clone(if d.id.as_str() == "helper" {
                &helper
            } else {
                &root
            }))
        },
    );
    AgentOrchestrator::new(Arc::new(InMemorySessionStore::new()))
        .ledger(Arc::clone(ledger) as Arc<dyn EffectLedger>)
        .prices(prices())
        .prompt_estimator(|_| 0)
        .get_or_create_agent(
            AgentBuildRequest::new("root", defs.into_iter().map(Arc::new), models)
                .tools(HostTools::new().with_shared(hang)),
        )
        .await
        .unwrap()
}

/// The process dies while the helper's tool runs, after the coordinator's
/// call (0.02 cents, in its checkpoint) and the helper's (0.1, in the
/// helper's). The coordinator's recovery ends the helper and carries what
/// its checkpoint says it spent into the tree: with the coordinator's
/// answer, 0.14, not 0.04.
#[tokio::test]
async fn a_recovered_tree_keeps_what_its_abandoned_child_had_spent() {
    let ledger = Arc::new(MemoryLedger::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let first = ledgered_team(
        &ledger,
        vec![Origin::Model.delegation(0, 10)],
        vec![calling("hang", json!({}), 0, 50)],
        Some(Arc::clone(&started)),
    )
    .await;
    let top = RunId::new("top");
    let none = EventSink::none();
    let run = first.run(RunRequest::new("go").with_run_id(top.clone()), &none);
    tokio::select! {
        _ = run => panic!("the run was meant to die while the helper's tool ran"),
        () = started.notified() => {}
    }
    let second = ledgered_team(&ledger, vec![answer("done", 0, 10)], Vec::new(), None).await;
    let run = second
        .harness()
        .recover(&top, ResumeOptions::default(), &EventSink::none())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.budget.spent.cost, "0.14".parse().unwrap());
    assert_eq!(run.budget.spent.model_calls, 3);
    let report = run.spend_report();
    let helper = report
        .iter()
        .find(|line| line.run_id == RunId::new("top::p1"))
        .expect("the abandoned child has its line");
    assert_eq!(helper.total.cost, cost_of(0, 50));
    assert_eq!(helper.agent.as_ref().map(|a| a.as_str()), Some("helper"));
    assert_eq!(helper.parent.as_ref(), Some(&top));
}

/// A run made under a caller's node (as a served call is under the budget
/// its caller sent) waits for a person after one call of 10 tokens, and is
/// resumed in that same tree (`ResumeOptions::spend`): the resumed run
/// starts from its 10 without counting them again above, and the
/// caller's cap of 25 binds it: its second call fits (20), its third (30)
/// is refused before it is made.
#[tokio::test]
async fn a_run_resumed_in_its_callers_tree_is_bound_by_its_caps_and_counted_once() {
    use tinyagents::core::Spend;
    let caller = Spend::root(
        RunId::new("caller"),
        None,
        SpendCaps {
            max_tokens: Some(25),
            max_cost: None,
        },
        Spent::default(),
        None,
    );
    let wire =
        ProbeTool::new("wire", false, Behaviour::Yield(1)).with_spec(ToolSpec::approval_required);
    let model = ScriptedModel::new([
        calling("wire", json!({}), 5, 5),
        calling("add", json!({"a": 1, "b": 2}), 5, 5),
        answer("never asked", 5, 5),
    ]);
    let harness = priced(model, 10, |b| {
        b.tools([Arc::clone(&wire) as Arc<dyn Tool>])
            .limits(RunLimits::default().with_behavior(LimitBehavior::Stop))
    });
    let mut request = RunRequest::new("go");
    request.spend = Some(caller.clone());
    let waiting = harness.run_with(request, &EventSink::none()).await.unwrap();
    let suspended = waiting.suspended.clone().unwrap();
    assert_eq!(caller.total().usage.total(), 10);
    let decisions: Vec<ApprovalDecision> = suspended.pending().map(|p| p.approve()).collect();
    let options = ResumeOptions {
        spend: Some(caller.clone()),
        ..ResumeOptions::default()
    };
    let run = harness
        .resume(suspended, &decisions, options, &EventSink::none())
        .await
        .unwrap();
    assert_eq!(
        run.status,
        RunStatus::LimitReached(tinyagents::core::LimitKind::Tokens)
    );
    assert_eq!(run.budget.spent.usage.total(), 20);
    assert_eq!(run.budget.spent.model_calls, 2);
    // Counted once above: 10 before the wait, 10 after.
    assert_eq!(caller.total().usage.total(), 20);
    assert_eq!(wire.calls.load(Ordering::SeqCst), 1);
}

/// With a ledger, a stored state edited to have spent less (its tokens as
/// a resume counts them, or its money) is refused before anything runs:
/// the checkpoint says what was spent.
#[tokio::test]
async fn a_stored_state_edited_to_have_spent_less_is_refused_with_a_ledger() {
    let ledger = Arc::new(MemoryLedger::new());
    let wire =
        ProbeTool::new("wire", false, Behaviour::Yield(1)).with_spec(ToolSpec::approval_required);
    let model = ScriptedModel::new([calling("wire", json!({}), 5, 5), answer("done", 5, 5)]);
    let harness = priced(model, 10, |b| {
        b.tools([Arc::clone(&wire) as Arc<dyn Tool>])
            .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
    });
    let suspended = harness.run("go").await.unwrap().suspended.unwrap();
    assert_eq!(suspended.budget.spent.cost, cost_of(5, 5));
    let decisions: Vec<ApprovalDecision> = suspended.pending().map(|p| p.approve()).collect();
    let mut fewer_tokens = suspended.clone();
    fewer_tokens.budget.spent.usage = Usage::default();
    let mut less_money = suspended.clone();
    less_money.budget.spent.cost = Cost::ZERO;
    for (edited, what) in [(fewer_tokens, "fewer tokens"), (less_money, "less money")] {
        let error = harness
            .resume(
                edited,
                &decisions,
                ResumeOptions::default(),
                &EventSink::none(),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!(
                "it has spent {what} than the effect ledger's checkpoint records"
            )),
            "{error}"
        );
    }
    assert_eq!(wire.calls.load(Ordering::SeqCst), 0, "nothing ran");
}
