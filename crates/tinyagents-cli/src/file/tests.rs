//! Reading agents files: what each section becomes, and where an error
//! points.

use std::io::Write as _;

use super::{FileError, load};

fn load_text(text: &str) -> Result<super::Loaded, FileError> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    load(file.path())
}

fn error_text(text: &str) -> String {
    load_text(text).unwrap_err().to_string()
}

#[test]
fn a_full_file_is_read() {
    let loaded = load_text(
        r#"
main = "lead"
[store]
dir = "state"
[capture]
tool_io = true
[telemetry]
otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
protocol = "grpc"
[mcp.fs]
command = "node"
args = ["server.js", "/tmp"]
prefix = ""
[agents.lead]
model = "openai:gpt-4o"
servers = ["fs"]
agents = ["helper"]
[agents.lead.policy]
deny_side_effects = ["payment", "destructive"]
plan_mode = true
[agents.lead.limits]
max_tokens = 1000
[agents.helper]
model = "scripted:fake"
script = [{ text = "hi", usage = { input = 1, output = 2 } }]
"#,
    )
    .unwrap();
    assert_eq!(loaded.main, "lead");
    assert!(loaded.file.capture.tool_io && !loaded.file.capture.model_io);
    let telemetry = loaded.file.telemetry.as_ref().unwrap();
    assert_eq!(telemetry.protocol, super::Protocol::Grpc);
    assert_eq!(loaded.file.mcp["fs"].prefix.as_deref(), Some(""));
    let lead = loaded.file.agents["lead"].get_ref();
    assert_eq!(lead.limits.max_tokens, Some(1000));
    assert!(lead.policy.plan_mode);
}

#[test]
fn the_main_agent_is_the_one_no_other_calls() {
    let loaded =
        load_text("[agents.a]\nmodel = \"env\"\nagents = [\"b\"]\n[agents.b]\nmodel = \"env\"\n")
            .unwrap();
    assert_eq!(loaded.main, "a");
}

#[test]
fn errors_name_the_line_the_column_and_the_key() {
    let text = error_text("[agents.a]\nmodel = \"env\"\n\n[agents.a.limits]\nmax_tokens = -1\n");
    assert!(
        text.contains(
            ":5:14: agents.a.limits.max_tokens: invalid value: integer `-1`, expected u64"
        ),
        "{text}"
    );
    assert!(text.ends_with("    5 | max_tokens = -1"), "{text}");
    let text = error_text("[agents.a]\nmodel = \"env\"\n[mcp.x]\nargs = []\n");
    assert!(
        text.contains("mcp.x: expected `command = \"PROGRAM\"` (stdio) or `url"),
        "{text}"
    );
    let text =
        error_text("[agents.a]\nmodel = \"env\"\n[mcp.x]\ncommand = \"a\"\nurl = \"http://b\"\n");
    assert!(
        text.contains(
            ":5:7: mcp.x.url: a server has either `command` (stdio) or `url` (HTTP), not both"
        ),
        "{text}"
    );
    let text = error_text("[agents.a]\nmodel = \"env\"\n[store]\nledger = \"postgres://db/x\"\n");
    assert!(
        text.contains(
            ":4:10: store.ledger: 'postgres://db/x' is a URL: expected a path (a PostgreSQL store is `[store] url"
        ),
        "{text}"
    );
    let text = error_text("[agents.a]\nmodel = \"env\"\n[store]\nurl = \"mysql://db/x\"\n");
    assert!(
        text.contains(":4:7: store.url: 'mysql://db/x' is not a PostgreSQL connection string"),
        "{text}"
    );
    let text = error_text(
        "[agents.a]\nmodel = \"env\"\n[store]\nurl = \"postgres://db/x\"\ndir = \"here\"\n",
    );
    assert!(
        text.contains(":5:7: store: a store is either a directory of SQLite files"),
        "{text}"
    );
    let text = error_text(
        "[agents.a]\nmodel = \"env\"\n[telemetry]\notlp_endpoint = \"localhost:4317\"\n",
    );
    assert!(
        text.contains(":4:17: telemetry.otlp_endpoint: 'localhost:4317' is not an endpoint"),
        "{text}"
    );
    let text = error_text("[agents.\"a-b\"]\nmodel = \"env\"\n");
    assert!(
        text.contains("agents.a-b: 'a-b' is not a usable agent id"),
        "{text}"
    );
    let text = error_text("");
    assert!(
        text.contains("agents: the file declares no agent"),
        "{text}"
    );
    let text = error_text("[agents.a]\nmodel = \"openai:gpt-4o\"\nscript = [{ text = \"x\" }]\n");
    assert!(
        text.contains(":3:10: agents.a.script: a script is for `model = \"scripted\"`"),
        "{text}"
    );
}
