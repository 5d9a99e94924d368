//! Issue 31: an agents file's MCP servers pinned in `mcp.lock` beside it
//! (`check --write-lock`); a server whose tools differ from the lock fails
//! the run before anything runs, naming the tool, what changed and the fix.

use crate::support::{Scratch, code, payments, payments_file, stderr, stdout};

#[test]
fn a_run_over_a_locked_server_that_drifted_fails_naming_the_change_and_the_fix() {
    let scratch = Scratch::new();
    let file = payments_file(scratch.path(), 5);
    let file_arg = file.to_str().unwrap();
    let locked = scratch.run(&["check", file_arg, "--write-lock"]);
    assert_eq!(code(&locked), 0, "{}", stderr(&locked));
    let lock_path = scratch.path().join("mcp.lock");
    assert!(
        stdout(&locked).contains(&format!("in {}", lock_path.display())),
        "{}",
        stdout(&locked)
    );
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&lock_path).unwrap()).unwrap();
    let pins = lock["servers"]["payments"]
        .as_object()
        .expect("the server pinned");
    assert!(pins.contains_key("pay"), "{lock}");

    // Pinned and unchanged: the run goes.
    let first = scratch.run(&["run", file_arg, "acme", "--no-input"]);
    assert_ne!(code(&first), 1, "{}", stderr(&first));

    // The lock says `pay` was something else: nothing runs.
    let before = payments(scratch.path());
    let mut edited = lock.clone();
    edited["servers"]["payments"]["pay"]["input_schema"] = serde_json::json!("0".repeat(64));
    edited["servers"]["payments"]["pay"]["definition"] = serde_json::json!("0".repeat(64));
    std::fs::write(&lock_path, edited.to_string()).unwrap();
    let drifted = scratch.run(&["run", file_arg, "acme again", "--no-input"]);
    assert_eq!(code(&drifted), 1, "{}", stderr(&drifted));
    let said = stderr(&drifted);
    assert!(
        said.contains("MCP server 'payments' does not match its lock")
            && said.contains("tool 'pay' changed its input schema since the lock was written")
            && said.contains("--write-lock"),
        "{said}"
    );
    assert_eq!(payments(scratch.path()), before, "nothing ran");

    // Reviewed and pinned again: it runs.
    let relocked = scratch.run(&["check", file_arg, "--write-lock"]);
    assert_eq!(code(&relocked), 0, "{}", stderr(&relocked));
    let again = scratch.run(&["run", file_arg, "acme again", "--no-input"]);
    assert_ne!(code(&again), 1, "{}", stderr(&again));

    std::fs::write(&lock_path, "not json").unwrap();
    let corrupt = scratch.run(&["run", file_arg, "x", "--no-input"]);
    assert_ne!(code(&corrupt), 0);
    assert!(
        stderr(&corrupt).contains("not an MCP lock"),
        "{}",
        stderr(&corrupt)
    );
}
