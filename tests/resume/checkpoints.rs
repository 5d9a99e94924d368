//! Issue 11, item 6: with a ledger, each turn persists only what it added.
//! The checkpoint is a base and entries appended to it; these tests watch
//! every checkpoint write through a recording ledger, crash runs part way
//! and check that recovery and resume read back exactly the state the run
//! had.

use std::sync::atomic::AtomicUsize;

use std::sync::Mutex;
use tinyagents::{core::State, ledger::LedgerError};
use tinyagents_tests::{HookedLedger, LedgerWrite, Verdict};

use super::*;

/// One checkpoint write a [`Recorder`] passed on, with its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Base(usize),
    Entry(usize),
    /// An append the ledger refused.
    Failed,
}

/// A memory ledger that records every checkpoint write, and can fail or
/// silently drop the n-th appended entry (1-based).
struct Recorder {
    ledger: Arc<HookedLedger>,
    writes: Arc<Mutex<Vec<Write>>>,
}

impl Recorder {
    fn new(fail_append: Option<usize>, drop_append: Option<usize>) -> Self {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&writes);
        let appends = AtomicUsize::new(0);
        let ledger = HookedLedger::new(move |write| match write {
            LedgerWrite::Base(bytes) => {
                log.lock().unwrap().push(Write::Base(bytes));
                Verdict::Pass
            }
            LedgerWrite::Entry(bytes) => {
                let n = appends.fetch_add(1, Ordering::SeqCst) + 1;
                if fail_append == Some(n) {
                    log.lock().unwrap().push(Write::Failed);
                    return Verdict::Fail(LedgerError::Storage {
                        operation: "append_checkpoint",
                        detail: "disk full".to_owned(),
                        source: None,
                    });
                }
                log.lock().unwrap().push(Write::Entry(bytes));
                if drop_append == Some(n) {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                }
            }
            _ => Verdict::Pass,
        });
        Self {
            ledger: Arc::new(ledger),
            writes,
        }
    }

    fn ledger(&self) -> Arc<dyn EffectLedger> {
        self.ledger.clone()
    }

    fn writes(&self) -> Vec<Write> {
        self.writes.lock().unwrap().clone()
    }
}

/// A model that calls `step` once per turn (tag `s<i>`, `i` from 1) for
/// `turns` turns, then `hang` once, then answers.
fn stepper(turns: usize) -> Arc<ScriptedModel> {
    let asked = AtomicUsize::new(0);
    Arc::new(ScriptedModel::from_fn(move |_| {
        let i = asked.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(match i {
            i if i <= turns => ScriptedModel::tool_call("step", json!({"tag": format!("s{i}")})),
            i if i == turns + 1 => ScriptedModel::tool_call("hang", json!({"tag": "h"})),
            _ => done(),
        })
    }))
}

/// A hook that changes the transcript before the model's `at`-th call.
struct Rewrite {
    at: u32,
    edit: fn(&mut Vec<Message>),
}

#[async_trait]
impl Middleware for Rewrite {
    fn name(&self) -> &str {
        "rewrite"
    }
    async fn before_model(
        &self,
        _ctx: &mut RunContext,
        state: &mut State,
    ) -> Result<(), TinyAgentsError> {
        // `turn` counts the model calls made so far.
        if state.turn + 1 == self.at {
            (self.edit)(&mut state.messages);
        }
        Ok(())
    }
}

/// A harness of the stepper over `ledger`, with `hang` as given and an
/// optional rewriting hook.
fn stepping(
    turns: usize,
    ledger: Arc<dyn EffectLedger>,
    hang: Arc<ProbeTool>,
    rewrite: Option<Rewrite>,
) -> AgentHarness {
    let tools: Vec<Arc<dyn Tool>> = vec![plain("step"), hang];
    let model = stepper(turns);
    build(&model, &tools, |b| {
        let b = b.ledger(ledger).system_prompt("You step.").limits(
            RunLimits::default()
                .with_max_tool_calls(1000)
                .with_max_model_calls(1000),
        );
        match rewrite {
            Some(hook) => b.middleware(Arc::new(hook)),
            None => b,
        }
    })
}

/// Runs the stepper until its `hang` call starts, then drops the run (the
/// process died while the tool ran).
async fn crash_at_hang(
    turns: usize,
    ledger: Arc<dyn EffectLedger>,
    rewrite: Option<Rewrite>,
) -> RunId {
    let started = Arc::new(tokio::sync::Notify::new());
    let hang = ProbeTool::new("hang", false, Behaviour::BlockOnce(started.clone()));
    let harness = stepping(turns, ledger, hang, rewrite);
    let run_id = RunId::from("steps");
    let events = EventSink::none();
    let run = harness.run_with(RunRequest::new("go").with_run_id(run_id.clone()), &events);
    tokio::select! {
        _ = run => panic!("the run was meant to crash while hang ran"),
        () = started.notified() => {}
    }
    run_id
}

/// The transcript of the same run with nothing crashing, up to and with
/// the assistant message that called `hang`.
async fn reference_prefix(turns: usize, rewrite: Option<Rewrite>) -> Vec<Message> {
    let hang = plain("hang");
    let harness = stepping(turns, Arc::new(MemoryLedger::new()), hang, rewrite);
    let run = harness.run("go").await.unwrap();
    let at = run
        .messages
        .iter()
        .position(|m| matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.first().is_some_and(|c| c.name == "hang")))
        .unwrap();
    run.messages[..=at].to_vec()
}

/// Recovers the crashed run with a model that answers at once.
async fn recover(
    ledger: Arc<dyn EffectLedger>,
    run_id: &RunId,
) -> Result<AgentRun, TinyAgentsError> {
    let step = plain("step");
    let hang = plain("hang");
    let tools: Vec<Arc<dyn Tool>> = vec![step, hang.clone()];
    let harness = build(&script(vec![done()]), &tools, |b| {
        b.ledger(ledger).system_prompt("You step.").limits(
            RunLimits::default()
                .with_max_tool_calls(1000)
                .with_max_model_calls(1000),
        )
    });
    let run = harness
        .recover(run_id, ResumeOptions::default(), &EventSink::none())
        .await;
    assert_eq!(calls_of(&hang), 0, "hang is never replayed");
    run
}

#[tokio::test]
async fn i11_6_each_turn_appends_what_it_added_and_compaction_keeps_the_bytes_linear() {
    let turns = 200;
    let recorder = Recorder::new(None, None);
    let run_id = crash_at_hang(turns, recorder.ledger(), None).await;
    let writes = recorder.writes();
    assert_eq!(writes.len(), turns + 1, "one checkpoint per tool turn");
    assert!(matches!(writes[0], Write::Base(_)), "{writes:?}");
    let entries: Vec<usize> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Entry(bytes) => Some(*bytes),
            Write::Base(_) | Write::Failed => None,
        })
        .collect();
    let bases: Vec<usize> = writes
        .iter()
        .filter_map(|w| match w {
            Write::Base(bytes) => Some(*bytes),
            Write::Entry(_) | Write::Failed => None,
        })
        .collect();
    // An entry holds one turn's two messages and the counters, whatever
    // the turn; a base is written again only when the entries since the
    // last one outweigh it three times, so there are few, each about four
    // times the last.
    let largest = entries.iter().max().copied().unwrap();
    assert!(largest < 700, "entries of {largest} bytes");
    assert!(entries.len() > turns * 9 / 10, "{} entries", entries.len());
    assert!(bases.len() <= 16, "{} bases: {bases:?}", bases.len());
    let last_base = *bases.last().unwrap();
    // What the ledger holds is the last base and the entries since: at
    // most four times the base.
    let held: usize = writes
        .iter()
        .rev()
        .map_while(|w| match w {
            Write::Entry(bytes) => Some(*bytes),
            Write::Base(_) | Write::Failed => None,
        })
        .sum();
    assert!(
        held <= 3 * last_base + largest,
        "{held} bytes of entries after a base of {last_base}"
    );
    let written: usize = entries.iter().sum::<usize>() + bases.iter().sum::<usize>();
    // Amortised, a turn writes its entry and about as much again of
    // bases.
    assert!(
        written <= 3 * largest * (turns + 1),
        "{written} bytes written in {} turns, entries up to {largest} bytes",
        turns + 1
    );
    // Written every turn whole, the checkpoints would be quadratic:
    // about turns / 2 times the final state.
    let whole_every_turn = turns * last_base / 2;
    assert!(
        written * 10 < whole_every_turn,
        "{written} vs {whole_every_turn}"
    );

    let recovered = recover(recorder.ledger(), &run_id).await.unwrap();
    assert_eq!(recovered.status, RunStatus::Completed);
    let expected = reference_prefix(turns, None).await;
    assert_eq!(recovered.messages[..expected.len()], expected[..]);
    assert_eq!(recovered.budget.tool_calls as usize, turns + 1);
}

#[tokio::test]
async fn i11_6_a_shortened_transcript_is_checkpointed_as_a_new_base_and_recovers_exactly() {
    // Before the 12th model call, drop the first two turns (a reducer).
    let reduce = || Rewrite {
        at: 12,
        edit: |messages| {
            messages.drain(2..6);
        },
    };
    let recorder = Recorder::new(None, None);
    let run_id = crash_at_hang(20, recorder.ledger(), Some(reduce())).await;
    let writes = recorder.writes();
    // The checkpoint of turn 12 is the 12th write.
    assert!(matches!(writes[11], Write::Base(_)), "{writes:?}");

    let recovered = recover(recorder.ledger(), &run_id).await.unwrap();
    let expected = reference_prefix(20, Some(reduce())).await;
    assert_eq!(recovered.messages[..expected.len()], expected[..]);
    assert!(!mentions(&recovered.messages, "s1") && !mentions(&recovered.messages, "s2"));
    assert!(mentions(&recovered.messages, "s3"));
}

/// Whether a call of `messages` has the tag `tag`.
fn mentions(messages: &[Message], tag: &str) -> bool {
    serde_json::to_string(messages)
        .unwrap()
        .contains(&format!(r#"{{"tag":"{tag}"}}"#))
}

#[tokio::test]
async fn i11_6_an_edited_last_persisted_message_is_checkpointed_as_a_new_base() {
    // Before the 9th model call, rewrite the assistant message of turn 8
    // (the last message its checkpoint persisted); the length stays.
    let edit = || Rewrite {
        at: 9,
        edit: |messages| {
            let at = messages.len() - 2;
            if let Message::Assistant { content, .. } = &mut messages[at] {
                *content = "edited by a hook".to_owned();
            }
        },
    };
    let recorder = Recorder::new(None, None);
    let run_id = crash_at_hang(15, recorder.ledger(), Some(edit())).await;
    assert!(matches!(recorder.writes()[8], Write::Base(_)));

    let recovered = recover(recorder.ledger(), &run_id).await.unwrap();
    let expected = reference_prefix(15, Some(edit())).await;
    assert_eq!(recovered.messages[..expected.len()], expected[..]);
    assert!(
        serde_json::to_string(&recovered.messages)
            .unwrap()
            .contains("edited by a hook")
    );
}

#[tokio::test]
async fn i11_6_a_failed_append_is_followed_by_a_base_and_recovery_stays_exact() {
    let recorder = Recorder::new(Some(5), None);
    let run_id = crash_at_hang(30, recorder.ledger(), None).await;
    let writes = recorder.writes();
    // The write after the failed append is a whole base.
    let failed = writes.iter().position(|w| *w == Write::Failed).unwrap();
    assert!(matches!(writes[failed + 1], Write::Base(_)), "{writes:?}");
    assert_eq!(writes.len(), 31, "{writes:?}");

    let recovered = recover(recorder.ledger(), &run_id).await.unwrap();
    let expected = reference_prefix(30, None).await;
    assert_eq!(recovered.messages[..expected.len()], expected[..]);
}

#[tokio::test]
async fn i11_6_a_checkpoint_that_lost_an_entry_is_refused_and_nothing_runs() {
    // A first run shows which writes the run makes (they are the same
    // every time); pick a length after whose last base come at least two
    // entries.
    let mut turns = 20;
    let (writes, after_last_base) = loop {
        let first = Recorder::new(None, None);
        crash_at_hang(turns, first.ledger(), None).await;
        let writes = first.writes();
        let after_last_base = writes
            .iter()
            .rev()
            .take_while(|w| matches!(w, Write::Entry(_)))
            .count();
        if after_last_base >= 2 {
            break (writes, after_last_base);
        }
        turns += 1;
    };
    let appends = writes
        .iter()
        .filter(|w| matches!(w, Write::Entry(_)))
        .count();
    // The second run loses the first entry after its last base: the next
    // extends a transcript the stored chain does not hold.
    let recorder = Recorder::new(None, Some(appends - after_last_base + 1));
    let run_id = crash_at_hang(turns, recorder.ledger(), None).await;
    let step = plain("step");
    let tools: Vec<Arc<dyn Tool>> = vec![step.clone(), plain("hang")];
    let harness = build(&script(vec![done()]), &tools, |b| {
        b.ledger(recorder.ledger())
    });
    let refused = harness
        .recover(&run_id, ResumeOptions::default(), &EventSink::none())
        .await;
    let text = refusal(refused);
    assert!(
        text.contains("checkpoint of run steps is inconsistent")
            && text.contains("after the base extends a transcript of"),
        "{text}"
    );
    assert_eq!(calls_of(&step), 0);
}

#[tokio::test]
async fn i11_6_a_run_suspended_after_many_turns_resumes_against_its_incremental_checkpoint() {
    // 40 turns of `step`, then a call a person must approve.
    let asked = AtomicUsize::new(0);
    let model = Arc::new(ScriptedModel::from_fn(move |_| {
        let i = asked.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(match i {
            i if i <= 40 => ScriptedModel::tool_call("step", json!({"tag": format!("s{i}")})),
            41 => ScriptedModel::tool_call("wire", json!({"tag": "w"})),
            _ => done(),
        })
    }));
    let recorder = Recorder::new(None, None);
    let wire = flagged("wire");
    let tools: Vec<Arc<dyn Tool>> = vec![plain("step"), wire.clone()];
    let ledger: Arc<dyn EffectLedger> = recorder.ledger();
    let harness = build(&model, &tools, |b| b.ledger(ledger));
    let run = harness.run("go").await.unwrap();
    let suspended = through_json(&run);
    let entries = recorder
        .writes()
        .iter()
        .filter(|w| matches!(w, Write::Entry(_)))
        .count();
    assert!(entries > 30, "{entries} entries");

    // The resume is held to the checkpoint read back from its entries: a
    // transcript edited before the suspended turn differs from it...
    let decisions = approve_all(&suspended);
    let mut edited = suspended.clone();
    let forged = edited
        .state
        .messages
        .iter_mut()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content),
            _ => None,
        })
        .unwrap();
    *forged = "forged".to_owned();
    let text = refusal(resume(&harness, edited, &decisions).await);
    assert!(
        text.contains("differs from the effect ledger's checkpoint"),
        "{text}"
    );
    assert_eq!(calls_of(&wire), 0);

    // ...and the state as stored matches it exactly: the approved call runs once.
    let resumed = resume(&harness, suspended, &decisions).await.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(calls_of(&wire), 1);
}

/// Issue 32: a memory ledger keeps each turn's checkpoint entry as a value
/// (no JSON per turn, no compaction) and encodes it only when it is read;
/// a recovery from it is as exact as from the encoded entries, and the
/// checkpoint it reads back is the one the encoded path stores.
#[tokio::test]
async fn i32_a_memory_ledger_keeps_entries_unencoded_and_a_recovery_from_it_is_exact() {
    let turns = 40;
    let ledger = Arc::new(MemoryLedger::new());
    assert!(ledger.keeps_entries_unencoded());
    let run_id = crash_at_hang(turns, ledger.clone(), None).await;
    let kept = ledger.load_checkpoint(&run_id).await.unwrap().unwrap();
    // One base, then one entry a turn: nothing compacted.
    assert_eq!(kept.appended.len(), turns);

    // The same run on the encoded path (the recorder hands bytes on).
    let recorder = Recorder::new(None, None);
    let encoded_run = crash_at_hang(turns, recorder.ledger(), None).await;
    let encoded = recorder
        .ledger()
        .load_checkpoint(&encoded_run)
        .await
        .unwrap()
        .unwrap();
    let messages = |checkpoint: &tinyagents::ledger::Checkpoint| {
        let mut held: Vec<Value> = Vec::new();
        let base: Value = serde_json::from_slice(&checkpoint.data).unwrap();
        held.extend(
            base["state"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .cloned(),
        );
        for entry in &checkpoint.appended {
            let entry: Value = serde_json::from_slice(entry).unwrap();
            held.extend(entry["messages"].as_array().unwrap().iter().cloned());
        }
        held
    };
    assert_eq!(messages(&kept), messages(&encoded));

    let recovered = recover(ledger, &run_id).await.unwrap();
    assert_eq!(recovered.status, RunStatus::Completed);
    let expected = reference_prefix(turns, None).await;
    assert_eq!(recovered.messages[..expected.len()], expected[..]);
    assert_eq!(recovered.budget.tool_calls as usize, turns + 1);
}
