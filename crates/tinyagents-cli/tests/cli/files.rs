//! Bad agents files: each an error naming the file, the line, the key and
//! what was expected, with exit code 2, before anything runs.

use crate::support::{Scratch, code, stderr, stdout};

const SERVER: &str = r#"
[mcp.everything]
command = "node"
args = ["EVERYTHING"]
"#;

/// `check`s `body` and returns the error's first line (`file:line:col: …`).
fn error_of(scratch: &Scratch, body: &str) -> String {
    let file = scratch.file("bad.toml", body);
    let output = scratch.run(&["check", file.to_str().unwrap()]);
    let text = stderr(&output);
    assert_eq!(code(&output), 2, "{text}");
    let first = text.lines().next().unwrap().to_owned();
    // The second line quotes the line of the file.
    assert!(
        text.lines().nth(1).is_some_and(|l| l.contains(" | ")),
        "{text}"
    );
    first
}

/// Issue 16: a bad agents file is an error naming the line, the key and
/// what was expected: malformed TOML, an unknown key, a wrong type, a
/// missing key, a bad model spec, a bad script step, references to agents,
/// servers and side-effect classes that do not exist, agents calling each
/// other in a circle.
#[test]
fn bad_agents_files_name_the_line_the_key_and_what_was_expected() {
    let scratch = Scratch::new();
    let cases: &[(&str, &str)] = &[
        ("[agents.a\nmodel = \"scripted\"\n", "bad.toml:1:10: "),
        (
            "[agents.a]\nmodle = \"scripted\"\n",
            "bad.toml:2:1: agents.a.modle: unknown field `modle`, expected one of `description`, `model`",
        ),
        (
            "[agents.a]\nmodel = \"env\"\n[agents.a.limits]\nmax_model_calls = \"ten\"\n",
            "bad.toml:4:19: agents.a.limits.max_model_calls: invalid type: string \"ten\", expected u32",
        ),
        (
            "[agents.a]\ninstructions = \"hi\"\n",
            "agents.a: missing field `model`",
        ),
        (
            "[agents.a]\nmodel = \"gpt-4o\"\n",
            "bad.toml:2:9: agents.a.model: ",
        ),
        (
            "[agents.a]\nmodel = \"scripted\"\nscript = [{ text = \"x\", tool = \"y\" }]\n",
            "bad.toml:3:10: agents.a.script[0]: expected exactly one of `text` (an answer), `tool` (one call) or `calls` (several)",
        ),
        (
            "[agents.a]\nmodel = \"env\"\nagents = [\"helper\"]\n",
            "bad.toml:3:11: agents.a.agents: no agent named 'helper': expected one of a",
        ),
        (
            "[agents.a]\nmodel = \"env\"\nservers = [\"everything\"]\n",
            "bad.toml:3:12: agents.a.servers: no MCP server named 'everything': expected one of none",
        ),
        (
            "[agents.a]\nmodel = \"env\"\n[agents.a.policy]\ndeny_side_effects = [\"payments\"]\n",
            "bad.toml:4:22: agents.a.policy.deny_side_effects: no side-effect class named 'payments': expected one of network_egress, file_write, destructive, payment",
        ),
        (
            "main = \"a\"\n[agents.a]\nmodel = \"env\"\nagents = [\"b\"]\n[agents.b]\nmodel = \"env\"\nagents = [\"a\"]\n",
            "agents.a.agents: agents call each other in a circle (a -> b -> a): expected a tree of agents",
        ),
        (
            "[agents.a]\nmodel = \"env\"\n[agents.b]\nmodel = \"env\"\n",
            "main: several agents could be the one `run` runs (a, b): expected `main = \"ID\"` naming one",
        ),
    ];
    for (body, expected) in cases {
        let error = error_of(&scratch, body);
        assert!(
            error.contains(expected),
            "for\n{body}\nexpected {expected:?} in\n{error}"
        );
        assert!(error.starts_with("error: "), "{error}");
    }
}

/// Issue 16: what can only be checked against the MCP servers' tools is
/// checked before anything runs, at the same place in the file: a tool no
/// server offers, a policy naming a tool the agent does not have.
#[test]
fn names_checked_against_the_servers_point_into_the_file() {
    let scratch = Scratch::new();
    let unknown_tool = format!(
        "{SERVER}\n[agents.a]\nmodel = \"scripted\"\nscript = [{{ text = \"x\" }}]\ntools = [\"everything_echo\", \"everything_ech\"]\n"
    );
    let error = error_of(&scratch, &unknown_tool);
    assert!(
        error.contains(
            "bad.toml:9:29: agents.a.tools: no tool named 'everything_ech': expected one of "
        ) && error.contains("everything_echo"),
        "{error}"
    );
    let foreign_policy = format!(
        "{SERVER}\n[agents.a]\nmodel = \"scripted\"\nscript = [{{ text = \"x\" }}]\ntools = [\"everything_echo\"]\n[agents.a.policy]\nrequire_approval = [\"everything_get-sum\"]\n"
    );
    let error = error_of(&scratch, &foreign_policy);
    assert!(
        error.contains("bad.toml:11:21: agents.a.policy.require_approval: no tool of this agent named 'everything_get-sum': expected one of everything_echo"),
        "{error}"
    );
}

/// Issue 16: a file that cannot be read names itself; `run` reports a bad
/// file the way `check` does, before it starts any server.
#[test]
fn unreadable_and_bad_files_stop_run_before_it_starts() {
    let scratch = Scratch::new();
    let missing = scratch.run(&["run", "nowhere.toml", "hi"]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).contains("nowhere.toml: cannot read the agents file"),
        "{}",
        stderr(&missing)
    );
    let file = scratch.file("bad.toml", "[agents.a]\nmodel = 3\n");
    let output = scratch.run(&["run", file.to_str().unwrap(), "hi"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output)
            .contains("bad.toml:2:9: agents.a.model: invalid type: integer `3`, expected a string"),
        "{}",
        stderr(&output)
    );
    assert!(
        !scratch.store().join("runs.db").exists(),
        "nothing was recorded"
    );
}

/// Issue 34: an MCP server that does not start stops `run` before anything
/// runs, naming the server, its command, the tail of its stderr and the
/// log it is in; a missing pinned server of the repository's examples
/// names the one command that installs it.
#[test]
fn a_server_that_does_not_start_is_named_with_its_command_its_stderr_and_the_fix() {
    let scratch = Scratch::new();
    let file = scratch.file(
        "fresh.toml",
        r#"
[mcp.everything]
command = "node"
args = [".tools/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"]

[agents.a]
model = "scripted"
servers = ["everything"]
script = [{ text = "never" }]
"#,
    );
    let output = scratch.run(&["run", file.to_str().unwrap(), "hello"]);
    assert_eq!(code(&output), 1, "{}", stdout(&output));
    let said = stderr(&output);
    let log = scratch.store().join("mcp-everything.log");
    for expected in [
        "MCP server 'everything' ([mcp.everything]) did not start",
        "command: node .tools/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        &format!("its stderr, last lines of {}", log.display()),
        "Cannot find module",
        "run `cargo xtask peers`",
    ] {
        assert!(said.contains(expected), "{expected:?} not in:\n{said}");
    }
    let runs = scratch.run(&["--json", "runs"]);
    assert_eq!(code(&runs), 0, "{}", stderr(&runs));
    assert!(
        stdout(&runs).is_empty(),
        "no run was recorded: {}",
        stdout(&runs)
    );
}
