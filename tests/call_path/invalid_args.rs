//! Rule NT-07: an invalid-arguments error names its tool, once. The text is
//! "invalid arguments for tool 'add' at '/b': …" on every origin — in what
//! the model reads, in a nested call's `ToolFailed`, and in the run's error
//! under `InvalidArgsPolicy::Fail` — never that prefix twice.

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::tools::InvalidArgsPolicy;

use crate::{Origin, add, answer, failed_error, harness, one_turn, run};

/// `add` with `b` a string: `b` breaks the schema's `type`.
fn bad_add() -> serde_json::Value {
    json!({"a": 1, "b": "two"})
}

/// `text` names the tool `add` exactly once, as the argument error says it.
fn assert_named_once(text: &str, what: &str) {
    assert_eq!(
        text.matches("invalid arguments for tool 'add'").count(),
        1,
        "{what}: the prefix once: {text}"
    );
    assert_eq!(
        text.matches("tool 'add'").count(),
        1,
        "{what}: the tool once: {text}"
    );
    assert!(
        text.contains(
            "invalid arguments for tool 'add' at '/b': schema keyword 'type' expects \"integer\""
        ),
        "{what}: {text}"
    );
}

#[tokio::test]
async fn nt_07_an_invalid_arguments_error_names_its_tool_once_on_every_origin() {
    for origin in Origin::ALL {
        let harness = harness(
            one_turn(&[origin.call("add", bad_add())]),
            vec![add()],
            |b| b,
        );
        let (result, events) = run(&harness).await;
        let run = result.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{origin:?}");
        let (content, is_error) = answer(&run, "p1").unwrap();
        assert!(is_error, "{origin:?}: {content}");
        assert_named_once(&content, &format!("{origin:?}: the model's answer"));
        if origin != Origin::Model {
            let id = origin.id_of(1);
            let error = failed_error(&events, &id)
                .unwrap_or_else(|| panic!("{origin:?}: {id} has a ToolFailed"));
            assert_named_once(&error, &format!("{origin:?}: the ToolFailed of {id}"));
        }
    }
}

#[tokio::test]
async fn nt_07_the_fail_policy_ends_the_run_with_the_tool_named_once() {
    let harness = harness(
        one_turn(&[Origin::Model.call("add", bad_add())]),
        vec![add()],
        |b| b.invalid_args(InvalidArgsPolicy::Fail),
    );
    let (result, _) = run(&harness).await;
    let error = result.unwrap_err();
    match &error {
        TinyAgentsError::InvalidArguments { tool, path, .. } => {
            assert_eq!((tool.as_str(), path.as_str()), ("add", "/b"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_named_once(&error.to_string(), "the run's error");
}
