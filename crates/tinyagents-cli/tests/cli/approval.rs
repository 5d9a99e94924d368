//! A run that waits for a person, decided with `approve` and finished with
//! `resume`, each in a process of its own.

use serde_json::Value;

use crate::support::{
    Scratch, code, flatten, json_lines, result_of, run_id, stderr, stdout, team_file,
};

fn suspended(scratch: &Scratch) -> String {
    let file = team_file();
    let output = scratch.run(&[
        "--json",
        "run",
        file.to_str().unwrap(),
        "Prepare the release",
    ]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    run_id(&json_lines(&output))
}

fn runs(scratch: &Scratch) -> Vec<Value> {
    let output = scratch.run(&["--json", "runs"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    json_lines(&output)
}

/// Issue 16: a suspended run exits with its code; `approve` and then
/// `resume`, in new processes, finish it: the approved call runs once (its
/// progress shown), the model answers, and `runs` and `show` read the
/// ledger. The same run cannot be resumed twice.
#[test]
fn a_suspended_run_is_approved_and_resumed_in_new_processes() {
    let scratch = Scratch::new();
    let run = suspended(&scratch);
    let listed = runs(&scratch);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["run_id"], run.as_str());
    assert_eq!(listed[0]["status"], "awaiting_approval");
    assert_eq!(listed[0]["calls"], 3, "p1, p2 and the specialist's p1");

    let approved = scratch.run(&["approve", &run]);
    assert_eq!(code(&approved), 0, "{}", stderr(&approved));
    let text = stdout(&approved);
    assert!(
        text.contains("approved p3 everything_trigger-long-running-operation"),
        "{text}"
    );
    assert!(
        text.contains(&format!("`tinyagents resume {run}`")),
        "{text}"
    );

    let resumed = scratch.run(&["--json", "resume", &run]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let lines = json_lines(&resumed);
    let events = flatten(&lines);
    let started: Vec<_> = events
        .iter()
        .filter(|(_, e)| e["type"] == "tool_started")
        .map(|(_, e)| e["call_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(started, ["p3"], "only the approved call runs");
    let progress = events
        .iter()
        .filter(|(_, e)| e["type"] == "tool_progress" && e["call_id"] == "p3")
        .count();
    assert_eq!(progress, 6, "six steps of progress");
    let result = result_of(&lines);
    assert_eq!(result["status"], "completed");
    assert_eq!(
        result["final_text"],
        "Release 1.4 is out: 42 changes, the release job finished."
    );
    assert_eq!(
        result["usage"]["input_tokens"], 760,
        "the whole run's tokens"
    );

    let listed = runs(&scratch);
    assert_eq!(listed[0]["status"], "completed");
    assert_eq!(listed[0]["calls"], 4);
    assert_eq!(listed[0]["in_doubt"], 0);
    let shown = scratch.run(&["show", &run]);
    let text = stdout(&shown);
    assert!(
        text.contains("✓ p3 everything_trigger-long-running-operation · completed"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "✓ p1 everything_get-sum · completed · run {run}::p2"
        )),
        "{text}"
    );
    assert!(text.contains("ledger: finished"), "{text}");

    let again = scratch.run(&["resume", &run]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("does not wait for a decision (it is completed)"),
        "{}",
        stderr(&again)
    );
}

/// Issue 16: `approve --deny` refuses the call: it never runs, the model
/// reads the person's reason and answers.
#[test]
fn a_denied_call_never_runs_and_the_model_reads_why() {
    let scratch = Scratch::new();
    let run = suspended(&scratch);
    let denied = scratch.run(&[
        "approve",
        &run,
        "--call",
        "p3",
        "--deny",
        "--reason",
        "not during the freeze",
    ]);
    assert_eq!(code(&denied), 0, "{}", stderr(&denied));
    assert!(stdout(&denied).contains("denied p3"), "{}", stdout(&denied));
    let resumed = scratch.run(&["--json", "resume", &run]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let lines = json_lines(&resumed);
    let events = flatten(&lines);
    assert!(
        !events.iter().any(|(_, e)| e["type"] == "tool_progress"),
        "the denied call did not run"
    );
    assert_eq!(result_of(&lines)["status"], "completed");
    let shown = stdout(&scratch.run(&["show", &run]));
    assert!(
        !shown.contains("p3 everything_trigger-long-running-operation · completed"),
        "{shown}"
    );
}

/// Issue 16: what `approve` and `resume` cannot do is an error naming
/// what was wrong: a call that does not wait, a run with undecided calls,
/// a run that does not exist.
#[test]
fn approve_and_resume_refuse_what_they_cannot_do() {
    let scratch = Scratch::new();
    let run = suspended(&scratch);
    let early = scratch.run(&["resume", &run]);
    assert_eq!(code(&early), 1);
    assert!(
        stderr(&early).contains(
            "has calls without a decision: p3 (everything_trigger-long-running-operation)"
        ),
        "{}",
        stderr(&early)
    );
    let wrong = scratch.run(&["approve", &run, "--call", "p9"]);
    assert_eq!(code(&wrong), 2, "a call that does not wait is bad input");
    assert!(
        stderr(&wrong).contains("call 'p9' of run '")
            && stderr(&wrong).contains("waiting: p3 (everything_trigger-long-running-operation)"),
        "{}",
        stderr(&wrong)
    );
    let missing = scratch.run(&["approve", "run-nope"]);
    assert_eq!(code(&missing), 2, "an unknown run is bad input");
    assert!(
        stderr(&missing).contains("no run 'run-nope'"),
        "{}",
        stderr(&missing)
    );
    // The refused commands changed nothing: the run still waits.
    let listed = json_lines(&scratch.run(&["--json", "runs"]));
    assert_eq!(listed[0]["status"], "awaiting_approval");
}

/// Issue 16, across features: a run in a session that waits is kept in
/// its session by the process that resumes it; `recover` refuses a run
/// that waits (it did not crash).
#[test]
fn a_session_run_that_waits_is_kept_in_its_session_once_resumed() {
    let scratch = Scratch::new();
    let file = team_file();
    let output = scratch.run(&[
        "--json",
        "run",
        file.to_str().unwrap(),
        "Prepare the release",
        "--session",
        "release",
    ]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let run = run_id(&json_lines(&output));
    let refused = scratch.run(&["recover", &run]);
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains("waits for a decision, it did not crash"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(code(&scratch.run(&["approve", &run])), 0);
    let resumed = scratch.run(&["resume", &run, "--output", "tree"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let shown = stdout(&scratch.run(&["sessions", "release"]));
    assert!(
        shown.contains("  user: Prepare the release\n  assistant: Release 1.4 is out: 42 changes, the release job finished."),
        "{shown}"
    );
    assert!(shown.contains("· agent specialist"), "{shown}");
}

/// Rewrites the stored suspended state of `run` with `edit`.
fn edit_suspended(scratch: &Scratch, run: &str, edit: impl Fn(&str) -> String) {
    let db = rusqlite::Connection::open(scratch.store().join("runs.db")).unwrap();
    let text: String = db
        .query_row("SELECT suspended FROM runs WHERE run_id = ?1", [run], |r| {
            r.get(0)
        })
        .unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed nothing");
    db.execute(
        "UPDATE runs SET suspended = ?2 WHERE run_id = ?1",
        [run, edited.as_str()],
    )
    .unwrap();
}

/// Issue 16, after a resume of a stored state someone edited: an approval
/// was given for the arguments the person saw; a stored state whose
/// waiting call's arguments were changed afterwards is refused by its seal
/// (issue 29) before anything of it is read, and junk in place of the
/// state is an error naming it. Nothing runs, nothing panics.
#[test]
fn an_edited_or_unreadable_stored_state_runs_nothing() {
    let scratch = Scratch::new();
    let run = suspended(&scratch);
    assert_eq!(code(&scratch.run(&["approve", &run])), 0);
    edit_suspended(&scratch, &run, |text| {
        text.replace("\\\"duration\\\":3", "\\\"duration\\\":1")
    });
    let resumed = scratch.run(&["--json", "resume", &run]);
    assert_eq!(code(&resumed), 1, "{}", stdout(&resumed));
    assert!(
        stderr(&resumed).contains("its suspended state does not match its seal")
            && stderr(&resumed).contains("nothing of it was used"),
        "{}",
        stderr(&resumed)
    );
    assert!(
        !stdout(&resumed).contains("tool_progress"),
        "the edited call ran: {}",
        stdout(&resumed)
    );
    let shown = scratch.run(&["show", &run]);
    assert_eq!(code(&shown), 1, "an edited record is refused everywhere");

    let scratch = Scratch::new();
    let run = suspended(&scratch);
    edit_suspended(&scratch, &run, |_| "{not json".to_owned());
    let resumed = scratch.run(&["resume", &run]);
    assert_eq!(code(&resumed), 1);
    assert!(
        stderr(&resumed).contains(&format!(
            "run {run}: its stored suspended state is unreadable"
        )),
        "{}",
        stderr(&resumed)
    );
}

/// Issue 29: a resume in a new process draws one tree of the whole run:
/// the calls of its first segment (read from the ledger, the delegated
/// agent's under its call) and what the resume ran.
#[test]
fn a_resume_in_a_new_process_draws_the_whole_run() {
    let scratch = Scratch::new();
    let run = suspended(&scratch);
    assert_eq!(code(&scratch.run(&["approve", &run])), 0);
    let resumed = scratch.run(&["resume", &run, "--output", "tree"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let text = stdout(&resumed);
    assert_eq!(
        text.matches("agent coordinator · run").count(),
        1,
        "one tree: {text}"
    );
    for expected in [
        "✓ p1 everything_echo",
        "✓ p2 specialist",
        "✓ p1 everything_get-sum",
        "✓ p3 everything_trigger-long-running-operation",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    assert!(
        crate::support::indent_of(&text, "p1 everything_get-sum")
            > crate::support::indent_of(&text, "p2 specialist"),
        "the delegated call sits under its call:\n{text}"
    );
}

/// Issue 29: `show --follow` prints a run's tree as it changes and stops
/// once the run waits for a person.
#[test]
fn show_follow_prints_the_tree_until_the_run_waits() {
    let scratch = Scratch::new();
    let file = team_file();
    let mut running = crate::support::Running::start(
        &scratch,
        &[
            "--json",
            "run",
            file.to_str().unwrap(),
            "Prepare the release",
        ],
    );
    let first = running.wait_for(|e| e["type"] == "run_started");
    let run = first["run_id"].as_str().unwrap().to_owned();
    let followed = scratch.run(&["show", &run, "--follow"]);
    assert_eq!(code(&followed), 0, "{}", stderr(&followed));
    let text = stdout(&followed);
    let last = text.rsplit("\n\n").next().unwrap_or_default();
    assert!(last.contains("awaiting_approval"), "{text}");
    assert!(last.contains("✓ p1 everything_echo · completed"), "{last}");
    assert!(
        last.contains("⏸ p3 everything_trigger-long-running-operation waits (undecided)"),
        "{last}"
    );
    let (code, _) = running.finish();
    assert_eq!(code, 3);
}
