//! `run`: the example team offline, as a tree and as JSON lines.

use crate::support::{
    Scratch, code, flatten, indent_of, json_lines, result_of, stdout, team_file, terminal_events,
};

/// Issue 16: an offline agents file runs and prints the call tree: the
/// run, its turns, each call with its harness id, the delegated agent's
/// run under the call that started it and its own calls under it, tokens,
/// and the call that waits; a run that waits exits with code 3.
#[test]
fn the_example_team_runs_offline_and_prints_the_tree() {
    let scratch = Scratch::new();
    let file = team_file();
    let output = scratch.run(&[
        "run",
        file.to_str().unwrap(),
        "Prepare the release",
        "--output",
        "tree",
    ]);
    let text = stdout(&output);
    assert_eq!(code(&output), 3, "{text}");
    assert!(text.starts_with("⏸ agent coordinator · run run-"), "{text}");
    // Turn 1 issued two calls; the specialist's run is under p2, and its
    // call under that run.
    let turn = indent_of(&text, "turn 1 · 222 tokens (180 in, 42 out)");
    assert_eq!(indent_of(&text, "✓ p1 everything_echo"), turn + 2, "{text}");
    let delegating = indent_of(&text, "✓ p2 specialist");
    assert_eq!(delegating, turn + 2, "{text}");
    let child = indent_of(&text, "✓ agent specialist · run run-");
    assert_eq!(child, delegating + 2, "{text}");
    assert!(
        text.contains("::p2 · 231 tokens (210 in, 21 out)"),
        "{text}"
    );
    assert_eq!(
        indent_of(&text, "✓ p1 everything_get-sum"),
        child + 4,
        "{text}"
    );
    // The waiting call, and what to do about it.
    let waits = text
        .lines()
        .find(|l| l.contains("p3 everything_trigger-long-running-operation"))
        .unwrap();
    assert!(waits.contains("⏸") && waits.contains("waits: tool 'everything_trigger-long-running-operation' requires a person's approval"), "{waits}");
    assert!(
        text.contains("awaiting approval · 500 tokens (440 in, 60 out)"),
        "{text}"
    );
    assert!(text.contains("`tinyagents approve run-"), "{text}");
}

/// Issue 16: `--json` prints one parseable event per line: the run's own
/// events, the delegated run's inside `delegated` envelopes, one terminal
/// event per started call, and a last `result` line with the exit code.
#[test]
fn json_prints_one_parseable_event_per_line() {
    let scratch = Scratch::new();
    let file = team_file();
    let output = scratch.run(&[
        "--json",
        "run",
        file.to_str().unwrap(),
        "Prepare the release",
    ]);
    assert_eq!(code(&output), 3);
    let lines = json_lines(&output);
    assert_eq!(lines[0]["type"], "run_started");
    assert_eq!(lines[0]["agent_id"], "coordinator");
    let events = flatten(&lines);
    let started: Vec<(Vec<String>, String, String)> = events
        .iter()
        .filter(|(_, e)| e["type"] == "tool_started")
        .map(|(s, e)| {
            (
                s.clone(),
                e["call_id"].as_str().unwrap().to_owned(),
                e["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let top = Vec::<String>::new();
    let in_p2 = vec!["p2".to_owned()];
    assert_eq!(
        started,
        [
            (top.clone(), "p1".to_owned(), "everything_echo".to_owned()),
            (top.clone(), "p2".to_owned(), "specialist".to_owned()),
            (
                in_p2.clone(),
                "p1".to_owned(),
                "everything_get-sum".to_owned()
            ),
        ]
    );
    for (scope, call, _) in &started {
        assert_eq!(
            terminal_events(&events, scope, call),
            1,
            "call {call} in {scope:?}"
        );
    }
    // Capture is on in the example: the arguments ride on the events.
    assert!(events.iter().any(|(s, e)| *s == in_p2
        && e["type"] == "tool_completed"
        && e["result"] == "The sum of 40 and 2 is 42."));
    assert!(
        events.iter().any(|(s, e)| s.is_empty()
            && e["type"] == "approval_requested"
            && e["call_id"] == "p3")
    );
    let result = result_of(&lines);
    assert_eq!(result["status"], "awaiting_approval");
    assert_eq!(result["exit_code"], 3);
    assert_eq!(result["pending"][0]["call_id"], "p3");
    assert_eq!(result["usage"]["input_tokens"], 440);
}
