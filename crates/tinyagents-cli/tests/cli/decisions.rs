//! Issue 29: one `approve` decides some calls and denies others, each
//! decision kept with who and why; empty listings say so.

use crate::support::{
    Scratch, code, json_lines, payments, payments_js, result_of, run_id, stderr, stdout,
};

/// An agents file whose one turn pays `a` and `b`, each waiting for a
/// person, then answers.
fn two_payments(scratch: &Scratch) -> std::path::PathBuf {
    let path = scratch.path().join("two.toml");
    let body = format!(
        r#"
[mcp.payments]
command = "node"
args = ["{js}"]
env = {{ PAYMENTS_FILE = "{effects}", PAY_DELAY_MS = "5" }}

[agents.payer]
model = "scripted"
tools = ["payments_pay"]
script = [
    {{ calls = [
        {{ tool = "payments_pay", arguments = {{ to = "a" }} }},
        {{ tool = "payments_pay", arguments = {{ to = "b" }} }},
    ] }},
    {{ text = "settled" }},
]

[agents.payer.policy]
require_approval = ["payments_pay"]
"#,
        js = payments_js().to_string_lossy(),
        effects = scratch.path().join("payments.txt").to_string_lossy(),
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// Issue 29: `approve RUN --call p1 --deny-call p2 --reason …` decides
/// both in one step: the run resumes, pays `a` only, the model reads the
/// reason for `b`, and `show` lists who decided what and why.
#[test]
fn one_step_approves_some_calls_and_denies_others() {
    let scratch = Scratch::new();
    let file = two_payments(&scratch);
    let first = scratch.run(&["--json", "run", file.to_str().unwrap(), "go"]);
    assert_eq!(code(&first), 3, "{}", stderr(&first));
    let run = run_id(&json_lines(&first));
    let partial = scratch.run(&["approve", &run, "--call", "p1", "--by", "alice"]);
    assert_eq!(code(&partial), 0, "{}", stderr(&partial));
    assert!(
        stdout(&partial).contains("1 of 2 waiting calls decided; still waiting: p2 (payments_pay)"),
        "{}",
        stdout(&partial)
    );
    let early = scratch.run(&["resume", &run]);
    assert_eq!(code(&early), 1);
    assert!(
        stderr(&early).contains("has calls without a decision: p2 (payments_pay)"),
        "{}",
        stderr(&early)
    );
    let again = scratch.run(&["approve", &run, "--call", "p1"]);
    assert_eq!(
        code(&again),
        2,
        "a call is decided once: {}",
        stderr(&again)
    );
    assert!(
        stderr(&again).contains("call 'p1' of run"),
        "{}",
        stderr(&again)
    );

    let mixed = scratch.run(&[
        "approve",
        &run,
        "--deny-call",
        "p2",
        "--reason",
        "b is not a customer",
        "--by",
        "bob",
    ]);
    assert_eq!(code(&mixed), 0, "{}", stderr(&mixed));
    assert!(
        stdout(&mixed).contains("denied p2 payments_pay (by bob)"),
        "{}",
        stdout(&mixed)
    );
    let resumed = scratch.run(&["--json", "resume", &run]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let lines = json_lines(&resumed);
    assert_eq!(result_of(&lines)["status"], "completed");
    assert_eq!(payments(scratch.path()), ["a"], "only the approved payment");
    let denied = lines
        .iter()
        .find(|e| e["type"] == "tool_failed" && e["call_id"] == "p2")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        denied["error"]
            .as_str()
            .unwrap_or_default()
            .contains("b is not a customer"),
        "{denied}"
    );
    let shown = stdout(&scratch.run(&["show", &run]));
    assert!(
        shown.contains("p1 payments_pay approved by alice"),
        "{shown}"
    );
    assert!(
        shown.contains("p2 payments_pay denied by bob") && shown.contains("(b is not a customer)"),
        "{shown}"
    );
}

/// Issue 29: an approval in the same step as a denial of another run's
/// call, or of a call that does not wait, records nothing.
#[test]
fn a_step_naming_a_call_that_does_not_wait_records_nothing() {
    let scratch = Scratch::new();
    let file = two_payments(&scratch);
    let first = scratch.run(&["--json", "run", file.to_str().unwrap(), "go"]);
    let run = run_id(&json_lines(&first));
    let refused = scratch.run(&["approve", &run, "--call", "p1", "--deny-call", "p7"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("call 'p7' of run")
            && stderr(&refused).contains("waiting: p1 (payments_pay), p2 (payments_pay)"),
        "{}",
        stderr(&refused)
    );
    let shown = stdout(&scratch.run(&["show", &run]));
    assert!(
        shown.contains("⏸ p1 payments_pay waits (undecided)"),
        "{shown}"
    );
}

/// Issue 29: empty listings say so, naming the store.
#[test]
fn empty_listings_say_so() {
    let scratch = Scratch::new();
    let missing = scratch.run(&["runs"]);
    assert_eq!(code(&missing), 1);
    assert!(
        stderr(&missing).contains("no runs at"),
        "{}",
        stderr(&missing)
    );
    let file = two_payments(&scratch);
    let first = scratch.run(&["--json", "run", file.to_str().unwrap(), "go"]);
    assert_eq!(code(&first), 3);
    let none = scratch.run(&["runs", "--status", "failed"]);
    assert_eq!(code(&none), 0);
    assert!(
        stdout(&none).starts_with("no runs failed in "),
        "{}",
        stdout(&none)
    );
    let sessions = scratch.run(&["sessions"]);
    assert_eq!(code(&sessions), 0);
    assert!(
        stdout(&sessions).starts_with("no sessions in "),
        "{}",
        stdout(&sessions)
    );
    let bad = scratch.run(&["runs", "--status", "sleeping"]);
    assert_eq!(code(&bad), 2);
    assert!(stderr(&bad).contains("not a status"), "{}", stderr(&bad));
}
