//! Issue 33: an agents file's prices and `max_cost`, run by the binary: a
//! run stops before the model call that would pass its cap, and the tree,
//! the line a run ends with and `show` print each run's and turn's tokens
//! and cost (in the smallest unit of the file's currency).

use std::path::PathBuf;

use crate::support::{Scratch, code, flatten, json_lines, stderr, stdout};

/// A lead that asks a helper once, then answers; each answer reports
/// 1,000 tokens in and 200 out. `HELPER_MODEL` and `LIMITS` are filled in.
const TEAM: &str = r#"
main = "lead"

[prices]
currency = "USD"

[prices.models.small]
input = "100"
output = "1000"
cached_input = "50"

[agents.lead]
model = "scripted:small"
agents = ["helper"]
script = [
    { tool = "helper", arguments = { query = "count" }, usage = { input = 1000, output = 200, cached = 400, reasoning = 50 } },
    { text = "done", usage = { input = 1000, output = 200 } },
]

[agents.lead.limits]
LIMITS

[agents.helper]
model = "HELPER_MODEL"
script = [{ text = "42", usage = { input = 1000, output = 200, cached = 400 } }]
"#;

/// Writes the team with the helper on `helper_model` and `limits`.
fn team(scratch: &Scratch, helper_model: &str, limits: &str) -> PathBuf {
    let path = scratch.path().join("team.toml");
    let text = TEAM
        .replace("HELPER_MODEL", helper_model)
        .replace("LIMITS", limits);
    std::fs::write(&path, text).unwrap();
    path
}

/// `text`'s lines without their times (` · 3ms`, ` · 1.2s`).
fn untimed(text: &str) -> Vec<String> {
    let time = |part: &str| {
        part.strip_suffix("ms")
            .is_some_and(|n| n.parse::<u64>().is_ok())
            || part
                .strip_suffix('s')
                .is_some_and(|n| n.parse::<f64>().is_ok())
    };
    text.lines()
        .map(|line| {
            line.split(" · ")
                .filter(|part| !time(part))
                .collect::<Vec<_>>()
                .join(" · ")
        })
        .collect()
}

/// The lines of `show RUN` from `spend` on, up to the next section.
fn spend_section(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("spend"))
        .take_while(|l| l.starts_with("spend") || l.starts_with("  "))
        .map(str::to_owned)
        .collect()
}

/// Each call reserves its worst case (its prompt's estimate, and 4,096
/// output tokens at 1,000 per million: 4.096) and spends 0.28; the cap
/// of 4.5 lets the lead's first call and the helper's through (0.28 spent,
/// 4.1 reserved) and refuses the lead's second (0.56 spent, 4.096 more
/// would pass 4.5), which is never made.
#[test]
fn a_run_stops_before_the_model_call_that_would_pass_max_cost() {
    let scratch = Scratch::new();
    let file = team(&scratch, "scripted:small", "max_cost = \"4.5\"");
    let output = scratch.run(&["--json", "run", file.to_str().unwrap(), "hi"]);
    // A limit stops the run with what it has: exit code 4.
    assert_eq!(code(&output), 4, "{}", stderr(&output));
    let lines = json_lines(&output);
    let events = flatten(&lines);
    let completed: Vec<(Vec<String>, String)> = events
        .iter()
        .filter(|(_, e)| e["type"] == "model_completed")
        .map(|(scope, e)| (scope.clone(), e["cost"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        completed,
        [
            (Vec::new(), "0.28".to_owned()),
            (vec!["p1".to_owned()], "0.28".to_owned())
        ]
    );
    let limit = events
        .iter()
        .find(|(scope, e)| scope.is_empty() && e["type"] == "limit_reached")
        .map(|(_, e)| e.clone())
        .unwrap();
    assert_eq!(limit["kind"], "cost");
    assert_eq!(limit["limit"], 4_500_000_000_u64);
    assert_eq!(limit["used"], 560_000_000);
    let result = lines.last().unwrap();
    assert_eq!(result["status"], "limit_reached", "{result}");
    assert_eq!(result["exit_code"], 4);
    assert_eq!(result["spent"]["cost"], "0.56");
    assert_eq!(result["spent"]["model_calls"], 2);

    let run = result["run_id"].as_str().unwrap();
    let shown = scratch.run(&["show", run]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert_eq!(
        spend_section(&stdout(&shown)),
        [
            "spend (money in the smallest unit of USD):".to_owned(),
            format!(
                "  agent lead · run {run} · 1200 tokens (1000 in, 200 out; 400 cached, 50 reasoning) · cost 0.28 USD · tree 2400 tokens (2000 in, 400 out; 800 cached, 50 reasoning), cost 0.56 USD"
            ),
            "    turn 1 · 1200 tokens (1000 in, 200 out; 400 cached, 50 reasoning) · cost 0.28 USD"
                .to_owned(),
            format!(
                "      agent helper · run {run}::p1 · 1200 tokens (1000 in, 200 out; 400 cached) · cost 0.28 USD"
            ),
            "        turn 1 · 1200 tokens (1000 in, 200 out; 400 cached) · cost 0.28 USD"
                .to_owned(),
        ]
    );
}

/// Without a cap, the helper's model has no price: its call is counted
/// as unpriced, its run's line and the lead's say so, and the lead's line
/// shows the tree's totals beside its own.
#[test]
fn the_tree_and_show_print_each_runs_and_turns_tokens_and_cost() {
    let scratch = Scratch::new();
    let file = team(&scratch, "scripted:big", "max_model_calls = 5");
    let output = scratch.run(&["run", file.to_str().unwrap(), "hi", "--output", "tree"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    let lines = untimed(&text);
    let run = lines[0]
        .split(" · run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    let lead = format!(
        "run {run} · 2400 tokens (2000 in, 400 out; 400 cached, 50 reasoning) · cost 0.58 USD \
         · tree 3600 tokens (3000 in, 600 out; 800 cached, 50 reasoning), cost 0.58 USD · 1 call unpriced"
    );
    assert_eq!(
        lines[..6],
        [
            format!("✓ agent lead · {lead}"),
            "  ✓ turn 1 · 1200 tokens (1000 in, 200 out; 400 cached, 50 reasoning) · cost 0.28 USD"
                .to_owned(),
            "    ✓ p1 helper".to_owned(),
            format!(
                "      ✓ agent helper · run {run}::p1 · 1200 tokens (1000 in, 200 out; 400 cached) · 1 call unpriced"
            ),
            "        ✓ turn 1 · 1200 tokens (1000 in, 200 out; 400 cached) · unpriced".to_owned(),
            "  ✓ turn 2 · 1200 tokens (1000 in, 200 out) · cost 0.3 USD".to_owned(),
        ],
        "{text}"
    );
    // The line the run ends with: its own and its tree's spend.
    assert_eq!(lines[6], lead.replacen(" · ", " completed · ", 1), "{text}");

    let shown = scratch.run(&["show", &run]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let section = spend_section(&stdout(&shown));
    assert_eq!(section[1], format!("  agent lead · {lead}"));
    assert_eq!(
        section[4],
        "        turn 1 · 1200 tokens (1000 in, 200 out; 400 cached) · unpriced"
    );
    let json = json_lines(&scratch.run(&["--json", "show", &run]));
    let record = json.iter().find(|l| l["type"] == "run").unwrap();
    assert_eq!(record["currency"], "USD");
    assert_eq!(record["spent"]["cost"], "0.58");
    assert_eq!(record["spent"]["model_calls"], 3);
    assert_eq!(record["spent"]["unpriced_calls"], 1);
    assert_eq!(record["spent"]["usage"]["cached_input_tokens"], 800);
}

/// A file that caps money with a model it does not price: `check` and
/// `run` warn, naming the agent and the model; the capped tree refuses
/// that model's call, which fails the helper's run, not the lead's.
#[test]
fn a_model_without_a_price_under_max_cost_is_warned_of() {
    let scratch = Scratch::new();
    let file = team(&scratch, "scripted:big", "max_cost = \"100\"");
    let warning = "warning: agents.helper: model 'big' has no price in [prices]: under a \
                   max_cost its calls are refused (add [prices.models.\"big\"])";
    let checked = scratch.run(&["check", file.to_str().unwrap()]);
    assert_eq!(code(&checked), 0, "{}", stderr(&checked));
    assert!(stderr(&checked).contains(warning), "{}", stderr(&checked));
    assert!(
        stdout(&checked).contains("prices: 1 model(s), in the smallest unit of USD"),
        "{}",
        stdout(&checked)
    );
    let output = scratch.run(&["run", file.to_str().unwrap(), "hi", "--output", "tree"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stderr(&output).contains(warning), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("failed: model 'big' has no price in the price table"),
        "{}",
        stdout(&output)
    );
}
