//! Issue 11, the property: random suspended states with random edits.
//! Whatever is edited, a resume either refuses with a clear error before
//! anything runs, or runs only calls a person approved, once each, with
//! their own arguments, and never past the run's tool-call limit.

use std::collections::HashSet;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::*;

/// One edit an attacker makes to the stored state or the decisions.
#[derive(Debug, Clone)]
enum Edit {
    RenamePending(usize, usize),
    RenameIssued(usize, usize),
    RetagPending(usize),
    BreakPendingArgs(usize),
    DuplicateEntry(usize, bool),
    RemoveEntry(usize, bool),
    AddPending(bool),
    ResetBudget,
    RaiseFormat,
    PendingRunId(usize),
    DecisionRunId(usize),
    DropDecision(usize),
    DuplicateDecision(usize),
    Depth,
    Turn(bool),
}

#[derive(Debug, Clone)]
struct Case {
    /// The model's calls: `true` for the flagged `deploy`, `false` for `read`.
    calls: Vec<bool>,
    /// A person's decision on each waiting call, in order.
    approve: Vec<bool>,
    max_tool_calls: u32,
    edits: Vec<Edit>,
    ledger: bool,
}

const NAMES: [&str; 3] = ["deploy", "read", "missing"];

fn edit() -> impl Strategy<Value = Edit> {
    let i = 0usize..8;
    prop_oneof![
        (i.clone(), 0usize..3).prop_map(|(a, b)| Edit::RenamePending(a, b)),
        (i.clone(), 0usize..3).prop_map(|(a, b)| Edit::RenameIssued(a, b)),
        i.clone().prop_map(Edit::RetagPending),
        i.clone().prop_map(Edit::BreakPendingArgs),
        (i.clone(), any::<bool>()).prop_map(|(a, b)| Edit::DuplicateEntry(a, b)),
        (i.clone(), any::<bool>()).prop_map(|(a, b)| Edit::RemoveEntry(a, b)),
        any::<bool>().prop_map(Edit::AddPending),
        Just(Edit::ResetBudget),
        Just(Edit::RaiseFormat),
        i.clone().prop_map(Edit::PendingRunId),
        i.clone().prop_map(Edit::DecisionRunId),
        i.clone().prop_map(Edit::DropDecision),
        i.prop_map(Edit::DuplicateDecision),
        Just(Edit::Depth),
        any::<bool>().prop_map(Edit::Turn),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        vec(any::<bool>(), 1..=4),
        vec(any::<bool>(), 4),
        1u32..=6,
        vec(edit(), 0..=3),
        any::<bool>(),
    )
        .prop_map(|(mut calls, approve, max_tool_calls, edits, ledger)| {
            // At least one flagged call, so the run suspends.
            calls[0] = true;
            Case {
                calls,
                approve,
                max_tool_calls,
                edits,
                ledger,
            }
        })
}

fn tools() -> (Arc<ProbeTool>, Arc<ProbeTool>) {
    (flagged("deploy"), plain("read"))
}

fn harness_for(
    case: &Case,
    model: Vec<ChatResponse>,
    deploy: &Arc<ProbeTool>,
    read: &Arc<ProbeTool>,
    ledger: Option<&Arc<dyn EffectLedger>>,
) -> AgentHarness {
    let limits = RunLimits::default().with_max_tool_calls(case.max_tool_calls);
    build(&script(model), &[deploy.clone(), read.clone()], |b| {
        let b = b.limits(limits);
        match ledger {
            Some(ledger) => b.ledger(Arc::clone(ledger)),
            None => b,
        }
    })
}

fn apply(edit: &Edit, suspended: &mut SuspendedRun, decisions: &mut Vec<ApprovalDecision>) {
    let n = suspended.turn.len().max(1);
    match edit {
        Edit::RenamePending(i, name) => {
            if let Some(p) = pending_mut(suspended).nth(*i % n) {
                p.call.name = NAMES[*name].into();
            }
        }
        Edit::RenameIssued(i, name) => {
            let issued = issued_mut(suspended);
            let len = issued.len().max(1);
            if let Some(call) = issued.get_mut(*i % len) {
                call.name = NAMES[*name].into();
            }
        }
        Edit::RetagPending(i) => {
            if let Some(p) = pending_mut(suspended).nth(*i % n) {
                p.call.arguments = json!({"tag": "forged"});
            }
        }
        Edit::BreakPendingArgs(i) => {
            if let Some(p) = pending_mut(suspended).nth(*i % n) {
                p.call.arguments = json!({"tag": 5});
            }
        }
        Edit::DuplicateEntry(i, with_issued) => {
            if let Some(entry) = suspended.turn.get(*i % n).cloned() {
                suspended.turn.push(entry);
                if *with_issued {
                    let issued = issued_mut(suspended);
                    // An earlier edit may have removed every issued call.
                    if let Some(call) = issued.get(*i % issued.len().max(1)).cloned() {
                        issued.push(call);
                    }
                }
            }
        }
        Edit::RemoveEntry(i, with_issued) => {
            if suspended.turn.len() > 1 {
                suspended.turn.remove(*i % n);
                if *with_issued {
                    let issued = issued_mut(suspended);
                    if !issued.is_empty() {
                        let at = *i % issued.len();
                        issued.remove(at);
                    }
                }
            }
        }
        Edit::AddPending(with_issued) => {
            let template = pending_mut(suspended).next().cloned();
            if let Some(mut pending) = template {
                pending.call.id = CallId::new("p99");
                pending.call.arguments = json!({"tag": "added"});
                if *with_issued {
                    issued_mut(suspended).push(pending.call.clone());
                }
                // The decisions are a person's (the host's): an added call
                // has none, unless a person decides on the edited state.
                suspended.turn.push(TurnEntry::Pending { pending });
            }
        }
        Edit::ResetBudget => suspended.budget = Default::default(),
        Edit::RaiseFormat => suspended.format += 1,
        Edit::PendingRunId(i) => {
            if let Some(p) = pending_mut(suspended).nth(*i % n) {
                p.run_id = RunId::new("another-run");
            }
        }
        Edit::DecisionRunId(i) => {
            let len = decisions.len().max(1);
            if let Some(d) = decisions.get_mut(*i % len) {
                d.run_id = RunId::new("another-run");
            }
        }
        Edit::DropDecision(i) => {
            if !decisions.is_empty() {
                let at = *i % decisions.len();
                decisions.remove(at);
            }
        }
        Edit::DuplicateDecision(i) => {
            if let Some(d) = decisions.get(*i % decisions.len().max(1)).cloned() {
                decisions.push(d);
            }
        }
        Edit::Depth => suspended.depth += 1,
        Edit::Turn(up) => {
            let turn = &mut suspended.state.turn;
            *turn = if *up {
                *turn + 1
            } else {
                turn.saturating_sub(1)
            };
        }
    }
}

/// The tags a [`ProbeTool`] started, in order.
fn started(tool: &ProbeTool) -> Vec<String> {
    tool.order
        .entries()
        .into_iter()
        .filter_map(|e| e.strip_prefix("start ").map(str::to_owned))
        .collect()
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let ledger: Option<Arc<dyn EffectLedger>> = case
        .ledger
        .then(|| Arc::new(MemoryLedger::new()) as Arc<dyn EffectLedger>);
    let calls: Vec<(String, Value)> = case
        .calls
        .iter()
        .enumerate()
        .map(|(i, deploy)| {
            let name = if *deploy { "deploy" } else { "read" };
            (name.to_owned(), json!({"tag": format!("t{i}")}))
        })
        .collect();
    let (deploy, read) = tools();
    let first = harness_for(
        &case,
        vec![turn(&calls), done()],
        &deploy,
        &read,
        ledger.as_ref(),
    );
    let run = first.run("go").await.unwrap();
    if run.status != RunStatus::AwaitingApproval {
        // The flagged call was refused at the limit: nothing to resume.
        return Ok(());
    }
    let ran_before = calls_of(&deploy) + calls_of(&read);
    let mut suspended = through_json(&run);
    // A person's decisions on the honest state; the tags they approved.
    let mut decisions = Vec::new();
    let mut approved = HashSet::new();
    for (pending, yes) in suspended.pending().zip(&case.approve) {
        if *yes {
            decisions.push(pending.approve());
            let tag = pending.call.arguments["tag"].as_str().unwrap_or_default();
            approved.insert(tag.to_owned());
        } else {
            decisions.push(pending.deny("no"));
        }
    }
    for edit in &case.edits {
        apply(edit, &mut suspended, &mut decisions);
    }
    let (deploy, read) = tools();
    let second = harness_for(&case, vec![done(), done()], &deploy, &read, ledger.as_ref());
    match resume(&second, suspended, &decisions).await {
        Err(TinyAgentsError::State(text)) => {
            prop_assert!(!text.is_empty());
            prop_assert_eq!(
                calls_of(&deploy) + calls_of(&read),
                0,
                "refused, yet ran: {}",
                text
            );
        }
        Err(other) => prop_assert!(false, "an unexpected error: {other:?}"),
        Ok(resumed) => {
            prop_assert_eq!(
                calls_of(&read),
                0,
                "read never waited, so never runs on resume"
            );
            let ran = started(&deploy);
            let unique: HashSet<&String> = ran.iter().collect();
            prop_assert_eq!(unique.len(), ran.len(), "a call ran twice: {:?}", ran);
            for tag in &ran {
                prop_assert!(
                    approved.contains(tag),
                    "{} ran without a person's approval",
                    tag
                );
            }
            prop_assert!(
                ran_before + ran.len() <= case.max_tool_calls as usize,
                "over the limit: {} before, {:?} after, limit {}",
                ran_before,
                ran,
                case.max_tool_calls
            );
            prop_assert!(resumed.budget.tool_calls <= case.max_tool_calls);
            assert_transcript_paired(&resumed.messages);
        }
    }
    Ok(())
}

/// Property, 10,000 cases: random suspended states (one to four calls,
/// random decisions, with and without a ledger) under zero to three random
/// edits of the state and the decisions; a resume refuses before anything
/// runs, or runs only approved calls, once each, within the limit.
#[test]
fn i11_prop_an_edited_suspended_state_never_widens_what_the_run_may_do() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 10_000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |case| rt.block_on(check(case)))
        .unwrap();
}
