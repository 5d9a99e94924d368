//! Runs in a session, and `sessions`.

use crate::support::{Scratch, code, json_lines, stderr, stdout};

/// Issue 16: runs with `--session` continue one conversation; `sessions`
/// lists it and prints its transcript with the delegated agent's child
/// session under it.
#[test]
fn runs_in_a_session_continue_and_sessions_print_the_transcript() {
    let scratch = Scratch::new();
    let file = scratch.file(
        "team.toml",
        r#"
[mcp.everything]
command = "node"
args = ["EVERYTHING"]

[agents.lead]
model = "scripted"
agents = ["counter"]
script = [
    { tool = "counter", arguments = { query = "count" } },
    { text = "Counted." },
]

[agents.counter]
model = "scripted"
tools = ["everything_get-sum"]
script = [
    { tool = "everything_get-sum", arguments = { a = 1, b = 2 } },
    { text = "3" },
]
"#,
    );
    for question in ["first question", "second question"] {
        let output = scratch.run(&[
            "--json",
            "run",
            file.to_str().unwrap(),
            question,
            "--session",
            "ops",
        ]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let runs = json_lines(&scratch.run(&["--json", "runs"]));
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["session"] == "ops"));

    let listed = stdout(&scratch.run(&["sessions"]));
    assert!(
        listed.contains("ops · 8 messages · 1 child session(s)"),
        "{listed}"
    );
    let shown = scratch.run(&["sessions", "ops"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    let expected = [
        "session ops",
        "  user: first question",
        "  assistant: Counted.",
        "  user: second question",
        "  assistant: Counted.",
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..5], expected, "{text}");
    assert!(
        text.contains("  child session ") && text.contains("· agent counter"),
        "{text}"
    );
    assert!(
        text.contains("    user: count\n    assistant: 3\n    user: count\n    assistant: 3"),
        "{text}"
    );

    let missing = scratch.run(&["sessions", "nope"]);
    assert_eq!(code(&missing), 1);
    assert!(
        stderr(&missing).contains("no session 'nope'"),
        "{}",
        stderr(&missing)
    );
}
