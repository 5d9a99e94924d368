//! Item 4: a stored state is not trusted wholesale. Its turn must match its
//! transcript, approved calls are admitted again (arguments prepared, the
//! budget reserved), and with a ledger the checkpoint holds it to what the
//! run really spent.

use std::sync::Mutex;

use super::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeployArgs {
    tag: String,
    tenant: Option<String>,
}

/// A run of one `deploy` call waiting for a person, on `harness`.
async fn deploy_suspended(
    configure: impl FnOnce(AgentHarnessBuilder) -> AgentHarnessBuilder,
) -> (AgentHarness, Arc<ProbeTool>, SuspendedRun) {
    let deploy = flagged("deploy");
    let model = script(vec![
        ScriptedModel::tool_call("deploy", json!({"tag": "prod"})),
        done(),
    ]);
    let harness = build(&model, &[deploy.clone()], configure);
    let suspended = through_json(&harness.run("go").await.unwrap());
    (harness, deploy, suspended)
}

/// Issue 11 item 4a: a waiting call duplicated in the stored turn (and in
/// its transcript, so the counts agree) is refused; so is a turn with more
/// entries than the model issued calls. The approval is not paid twice:
/// nothing runs.
#[tokio::test]
async fn i11_4a_duplicated_waiting_calls_are_refused_and_nothing_runs() {
    let (harness, deploy, suspended) = deploy_suspended(|b| b).await;
    let decisions = approve_all(&suspended);

    let mut both = suspended.clone();
    let entry = both.turn[0].clone();
    both.turn.push(entry.clone());
    both.turn.push(entry);
    let call = issued_mut(&mut both)[0].clone();
    issued_mut(&mut both).extend([call.clone(), call]);
    let text = refusal(resume(&harness, both, &decisions).await);
    assert!(text.contains("call p1 appears twice"), "{text}");

    let mut turn_only = suspended;
    let entry = turn_only.turn[0].clone();
    turn_only.turn.push(entry);
    let text = refusal(resume(&harness, turn_only, &decisions).await);
    assert!(
        text.contains("its turn has 2 entries but the model issued 1 calls"),
        "{text}"
    );
    assert_eq!(calls_of(&deploy), 0);
}

/// Issue 11 item 4b: nine waiting calls added to the state (turn and
/// transcript) with its budget reset, all approved: each is admitted again
/// against `max_tool_calls = 2`, so two run and the rest are refused at the
/// limit. The stored budget cannot buy calls.
#[tokio::test]
async fn i11_4b_added_calls_and_a_reset_budget_never_run_past_the_limit() {
    let limits = RunLimits::default().with_max_tool_calls(2);
    let (harness, deploy, mut suspended) = deploy_suspended(|b| b.limits(limits)).await;
    let template = suspended.turn[0].clone();
    let issued = issued_mut(&mut suspended)[0].clone();
    for n in 2..=10 {
        let id = CallId::new(format!("p{n}"));
        let mut entry = template.clone();
        if let TurnEntry::Pending { pending } = &mut entry {
            pending.call.id = id.clone();
        }
        suspended.turn.push(entry);
        let mut call = issued.clone();
        call.id = id;
        issued_mut(&mut suspended).push(call);
    }
    suspended.budget = Default::default();
    let decisions = approve_all(&suspended);
    assert_eq!(decisions.len(), 10);
    let run = resume(&harness, suspended, &decisions).await.unwrap();
    assert_eq!(calls_of(&deploy), 2);
    assert_eq!(run.budget.tool_calls, 2);
    let results = tool_results(&run.messages);
    assert_eq!(results.len(), 10);
    assert!(
        results[..2]
            .iter()
            .all(|(_, text, e)| text == "ok prod" && !e)
    );
    assert!(
        results[2..]
            .iter()
            .all(|(_, text, e)| *e
                && text == "refused: the run reached its max_tool_calls limit of 2"),
        "{results:?}"
    );
}

/// Issue 11 item 4b: with a ledger, a stored state that its checkpoint
/// contradicts is refused before anything runs: less spent, another depth,
/// other properties, an edited transcript.
#[tokio::test]
async fn i11_4b_with_a_ledger_a_state_the_checkpoint_contradicts_is_refused() {
    let ledger: Arc<dyn EffectLedger> = Arc::new(MemoryLedger::new());
    let (harness, deploy, suspended) = deploy_suspended(|b| b.ledger(ledger)).await;
    let decisions = approve_all(&suspended);
    assert_eq!(suspended.budget.model_calls, 1);

    let mut spent_less = suspended.clone();
    spent_less.budget.model_calls = 0;
    let text = refusal(resume(&harness, spent_less, &decisions).await);
    assert!(
        text.contains("spent fewer model calls than the effect ledger's checkpoint"),
        "{text}"
    );

    let mut deeper = suspended.clone();
    deeper.depth = 3;
    let text = refusal(resume(&harness, deeper, &decisions).await);
    assert!(
        text.contains("its depth is 3, the effect ledger's checkpoint says 0"),
        "{text}"
    );

    let mut properties = suspended.clone();
    properties
        .properties
        .insert("tinyagents.session".into(), json!("someone-else"));
    let text = refusal(resume(&harness, properties, &decisions).await);
    assert!(text.contains("its properties differ"), "{text}");

    let mut transcript = suspended.clone();
    issued_mut(&mut transcript)[0].arguments = json!({"tag": "staging"});
    let text = refusal(resume(&harness, transcript, &decisions).await);
    assert!(
        text.contains("its transcript differs from the effect ledger's checkpoint of turn 1"),
        "{text}"
    );

    assert_eq!(calls_of(&deploy), 0);
    let run = resume(&harness, suspended, &decisions).await.unwrap();
    assert_eq!(calls_of(&deploy), 1, "the untouched state still resumes");
    assert_eq!(run.status, RunStatus::Completed);
}

/// Issue 11 item 4c: approved arguments are prepared again on resume: an
/// injected argument edited in the stored state is injected again (the
/// host's value wins), and arguments edited to break the schema are refused
/// with the argument error; the tool never sees either edit.
#[tokio::test]
async fn i11_4c_approved_arguments_are_prepared_again_injection_wins_and_the_schema_holds() {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = Arc::clone(&seen);
    let deploy = FnTool::new("deploy", "Deploys.", move |args: DeployArgs| {
        let log = Arc::clone(&log);
        async move {
            log.lock()
                .unwrap()
                .push(json!({"tag": args.tag, "tenant": args.tenant}));
            anyhow::Ok("deployed")
        }
    })
    .map_spec(|s| s.approval_required().injected("tenant"));
    let model = script(vec![
        ScriptedModel::tool_call("deploy", json!({"tag": "prod"})),
        done(),
        done(),
    ]);
    let deploy: Arc<dyn Tool> = Arc::new(deploy);
    let harness = build(&model, &[deploy.clone()], |b| {
        b.inject("tenant", json!("acme"))
    });
    let suspended = through_json(&harness.run("go").await.unwrap());
    assert_eq!(
        suspended.pending().next().unwrap().call.arguments,
        json!({"tag": "prod", "tenant": "acme"})
    );

    let mut injected = suspended.clone();
    for pending in pending_mut(&mut injected) {
        pending.call.arguments = json!({"tag": "prod", "tenant": "evil"});
    }
    // The host approves what it is shown: the edited call.
    let decisions = approve_all(&injected);
    let run = resume(&harness, injected, &decisions).await.unwrap();
    assert_eq!(tool_results(&run.messages)[0].1, "deployed");
    assert_eq!(
        *seen.lock().unwrap(),
        [json!({"tag": "prod", "tenant": "acme"})]
    );

    let mut broken = suspended;
    for pending in pending_mut(&mut broken) {
        pending.call.arguments = json!({"tag": 5});
    }
    let decisions = approve_all(&broken);
    // Another process (a fresh harness): the first resume's record of the
    // used approval is not here, so the schema alone must refuse the call.
    let restarted = build(&model, &[deploy], |b| b.inject("tenant", json!("acme")));
    let run = resume(&restarted, broken, &decisions).await.unwrap();
    let (_, text, is_error) = tool_results(&run.messages).remove(0);
    assert!(is_error);
    assert!(text.contains("deploy") && text.contains("/tag"), "{text}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the broken call never ran");
}
