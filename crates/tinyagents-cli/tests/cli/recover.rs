//! A run whose process was killed, recovered by another process from the
//! ledger.

use crate::support::{
    Running, Scratch, code, json_lines, long_operation, long_started, result_of, stderr, stdout,
};

/// Issue 16: a kill during a run, then `recover`, finishes it: the call
/// that was in flight is not run again (its tool is `Never` replayed and
/// cannot tell whether it happened), the model is told its outcome is
/// unknown and answers, the call stays listed in doubt, and the call that
/// had completed answers from its ledger row.
#[test]
fn a_killed_run_is_recovered_by_a_new_process() {
    let scratch = Scratch::new();
    let file = long_operation(&scratch, 60);
    let mut running = Running::start(&scratch, &["--json", "run", file.to_str().unwrap(), "go"]);
    let started = running.wait_for(long_started);
    let call = started["call_id"].as_str().unwrap().to_owned();
    // The long operation is under way (its started row, and with it the
    // echo's settled row, are durable before it runs).
    running.wait_for(|e| e["type"] == "tool_progress");
    let first: serde_json::Value = serde_json::from_str(&running.seen[0]).unwrap();
    let run = first["run_id"].as_str().unwrap().to_owned();
    running.kill();

    let listed = json_lines(&scratch.run(&["--json", "runs"]));
    assert_eq!(listed[0]["status"], "interrupted", "{listed:?}");
    assert_eq!(listed[0]["in_doubt"], 1);
    let shown = stdout(&scratch.run(&["show", &run]));
    assert!(shown.contains(&format!("? {call} everything_trigger-long-running-operation · started · IN DOUBT · never replayed")), "{shown}");
    assert!(
        shown.contains("✓ p1 everything_echo · completed"),
        "{shown}"
    );

    let recovered = scratch.run(&["--json", "recover", &run]);
    assert_eq!(code(&recovered), 0, "{}", stderr(&recovered));
    let lines = json_lines(&recovered);
    assert!(
        !lines.iter().any(|e| e["type"] == "tool_progress"),
        "the long operation did not run again"
    );
    let result = result_of(&lines);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["final_text"], "done");

    let listed = json_lines(&scratch.run(&["--json", "runs"]));
    assert_eq!(listed[0]["status"], "completed");
    assert_eq!(listed[0]["in_doubt"], 1, "the effect is still unknown");
    let shown = stdout(&scratch.run(&["show", &run]));
    assert!(
        shown.contains(&format!(
            "{call} everything_trigger-long-running-operation · interrupted · IN DOUBT"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("✓ p1 everything_echo · completed"),
        "{shown}"
    );
    assert!(shown.contains("ledger: finished"), "{shown}");
}

/// Issue 16: `recover` refuses a run whose process is still alive, and a
/// run the ledger knows nothing of.
#[test]
fn recover_refuses_a_live_run_and_an_unknown_one() {
    let scratch = Scratch::new();
    let file = long_operation(&scratch, 60);
    let mut running = Running::start(&scratch, &["--json", "run", file.to_str().unwrap(), "go"]);
    running.wait_for(long_started);
    let first: serde_json::Value = serde_json::from_str(&running.seen[0]).unwrap();
    let run = first["run_id"].as_str().unwrap().to_owned();
    let refused = scratch.run(&["recover", &run]);
    assert_eq!(code(&refused), 1);
    assert!(
        stderr(&refused).contains(&format!("is running in process {}", running.pid())),
        "{}",
        stderr(&refused)
    );
    running.kill();
    let unknown = scratch.run(&["recover", "run-unknown"]);
    assert_eq!(code(&unknown), 1);
    assert!(
        stderr(&unknown).contains("was not started by the command line"),
        "{}",
        stderr(&unknown)
    );
}
