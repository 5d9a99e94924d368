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

/// Loads `text` as `agents.toml` in `dir` (beside the files it names).
fn load_in(dir: &std::path::Path, text: &str) -> Result<super::Loaded, FileError> {
    let path = dir.join("agents.toml");
    std::fs::write(&path, text).unwrap();
    load(&path)
}

const PRICED: &str = r#"
[prices]
currency = "USD"
[prices.models."gpt-4o"]
input = "250"
output = 1000
cached_input = "125.5"
[agents.a]
model = "openai:gpt-4o"
[agents.a.limits]
max_cost = "150.25"
"#;

#[test]
fn prices_and_max_cost_are_read_exactly() {
    use tinyagents::core::{Cost, ModelPrice, PriceTable};
    let loaded = load_text(PRICED).unwrap();
    let expected = PriceTable::new("USD").with_model(
        "gpt-4o",
        ModelPrice {
            input: "250".parse().unwrap(),
            output: "1000".parse().unwrap(),
            cached_input: Some("125.5".parse().unwrap()),
        },
    );
    assert_eq!(loaded.prices.as_deref(), Some(&expected));
    let limits = &loaded.file.agents["a"].get_ref().limits;
    let max_cost = limits.max_cost.as_ref().unwrap().get_ref().0;
    assert_eq!(max_cost, Cost::from_nanos(150_250_000_000));
    assert!(loaded.caps_cost());
    // A whole number is an amount too; a file without prices has none.
    let whole = load_text(&PRICED.replace("\"150.25\"", "3")).unwrap();
    let limits = &whole.file.agents["a"].get_ref().limits;
    assert_eq!(
        limits.max_cost.as_ref().unwrap().get_ref().0,
        Cost::from_units(3)
    );
    let plain = load_text("[agents.a]\nmodel = \"env\"\n").unwrap();
    assert!(plain.prices.is_none() && !plain.caps_cost());
}

#[test]
fn a_prices_file_beside_the_agents_file_is_read_and_prices_add_to_it() {
    use tinyagents::core::Rate;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prices.json"),
        r#"{"currency": "EUR", "models": {"m": {"input": "1", "output": 2}, "n": {"input": "3", "output": "4"}}}"#,
    )
    .unwrap();
    let loaded = load_in(
        dir.path(),
        "prices_file = \"prices.json\"\n[prices.models.n]\ninput = \"5\"\noutput = \"6\"\n[agents.a]\nmodel = \"env\"\n",
    )
    .unwrap();
    let table = loaded.prices.as_deref().unwrap();
    assert_eq!(table.currency, "EUR");
    assert_eq!(
        table.price("m").unwrap().output,
        "2".parse::<Rate>().unwrap()
    );
    assert_eq!(
        table.price("n").unwrap().input,
        "5".parse::<Rate>().unwrap()
    );
    std::fs::write(
        dir.path().join("prices.toml"),
        "currency = \"USD\"\n[models.m]\ninput = \"7.5\"\noutput = \"30\"\n",
    )
    .unwrap();
    let loaded = load_in(
        dir.path(),
        "prices_file = \"prices.toml\"\n[agents.a]\nmodel = \"env\"\n[agents.a.limits]\nmax_cost = \"2\"\n",
    )
    .unwrap();
    let table = loaded.prices.as_deref().unwrap();
    assert_eq!(table.currency, "USD");
    assert_eq!(
        table.price("m").unwrap().input,
        "7.5".parse::<Rate>().unwrap()
    );
}

#[test]
fn bad_prices_and_max_costs_name_the_key_the_line_and_the_column() {
    let prices = |model: &str| {
        format!(
            "[agents.a]\nmodel = \"env\"\n[prices]\ncurrency = \"USD\"\n[prices.models.m]\n{model}\n"
        )
    };
    let cases: &[(String, &str)] = &[
        (
            prices("input = 2.5\noutput = \"1\""),
            ":6:9: prices.models.m.input: 2.5 is a floating-point number: write it as a string (\"2.5\") so it is exact",
        ),
        (
            prices("input = -3\noutput = \"1\""),
            ":6:9: prices.models.m.input: -3 is negative: expected an amount of 0 or more",
        ),
        (
            prices("input = \"1\"\noutput = \"-1\""),
            ":7:10: prices.models.m.output: '-1' is not an amount: expected a non-negative decimal such as 150 or 7.5",
        ),
        (
            prices("input = \"1\"\noutput = \"2,5\""),
            ":7:10: prices.models.m.output: '2,5' is not an amount: expected a non-negative decimal such as 150 or 7.5",
        ),
        (
            prices("input = \"1\"\noutput = \"1\"\ncached_input = \"0.0001\""),
            ":8:16: prices.models.m.cached_input: '0.0001' has 4 decimals; at most 3 are exact here",
        ),
        (
            prices("input = \"1\"\noutput = true"),
            ":7:10: prices.models.m.output: invalid type: boolean `true`, expected an amount: a decimal string such as \"7.5\", or a whole number",
        ),
        (
            prices("input = \"1\"\nouput = \"1\""),
            ":7:1: prices.models.m.ouput: unknown field `ouput`, expected one of `input`, `output`, `cached_input`",
        ),
        (
            prices("input = \"1\""),
            "prices.models.m: missing field `output`",
        ),
        (
            "[agents.a]\nmodel = \"env\"\n[prices]\ncurrency = \"USD\"\nunit = \"cents\"\n".to_owned(),
            ":5:1: prices.unit: unknown field `unit`, expected `currency` or `models`",
        ),
        (
            "[prices]\n[agents.a]\nmodel = \"env\"\n[agents.a.limits]\nmax_cost = 0.5\n".to_owned(),
            ":5:12: agents.a.limits.max_cost: 0.5 is a floating-point number: write it as a string (\"0.5\") so it is exact",
        ),
        (
            "[prices]\n[agents.a]\nmodel = \"env\"\n[agents.a.limits]\nmax_cost = \"0.0000000001\"\n".to_owned(),
            ":5:12: agents.a.limits.max_cost: '0.0000000001' has 10 decimals; at most 9 are exact here",
        ),
        (
            "[agents.a]\nmodel = \"env\"\n[agents.a.limits]\nmax_cost = \"5\"\n".to_owned(),
            ":4:12: agents.a.limits.max_cost: a cap on money needs prices: expected a [prices] table (or `prices_file = \"FILE\"`) pricing the agents' models",
        ),
        (
            "prices_file = \"prices.csv\"\n[agents.a]\nmodel = \"env\"\n".to_owned(),
            ":1:15: prices_file: 'prices.csv' is neither a .json nor a .toml file: expected one of those",
        ),
    ];
    for (text, expected) in cases {
        let error = error_text(text);
        assert!(
            error.contains(expected),
            "for\n{text}\nexpected {expected:?} in\n{error}"
        );
    }
}

#[test]
fn a_bad_prices_file_is_an_error_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let agents = "prices_file = \"prices.json\"\n[agents.a]\nmodel = \"env\"\n";
    let error = load_in(dir.path(), agents).unwrap_err().to_string();
    assert!(
        error.contains("agents.toml:1:15: prices_file: cannot read ")
            && error.contains("prices.json"),
        "{error}"
    );
    std::fs::write(
        dir.path().join("prices.json"),
        "{\"currency\": \"USD\",\n \"models\": {\"m\": {\"input\": 2.5, \"output\": \"1\"}}}\n",
    )
    .unwrap();
    let error = load_in(dir.path(), agents).unwrap_err().to_string();
    assert!(
        error.contains(
            "prices.json:2:30: models.m.input: 2.5 is a floating-point number: write it as a string (\"2.5\") so it is exact"
        ),
        "{error}"
    );
    assert!(
        error.ends_with("    2 |  \"models\": {\"m\": {\"input\": 2.5, \"output\": \"1\"}}}"),
        "{error}"
    );
    std::fs::write(
        dir.path().join("prices.json"),
        "{\"currency\": \"EUR\", \"models\": {}}",
    )
    .unwrap();
    let error = load_in(
        dir.path(),
        &format!("{agents}[prices]\ncurrency = \"USD\"\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains(
            "prices.currency: 'USD' is not the currency of the prices file ('EUR'): expected the same, or none here"
        ),
        "{error}"
    );
}
