//! Unit tests of registration and argument preparation.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tinyagents_core::{CallId, ToolCall, ToolResult};

use crate::{
    ArgumentError, FnTool, InvalidArgsPolicy, RegistryError, Tool, ToolCallOptions, ToolRegistry,
    ToolRunContext, ToolSpec, prepare_arguments,
};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let add = FnTool::new("add", "Adds.", |args: Add| async move {
        anyhow::Ok((args.a + args.b).to_string())
    });
    registry.register(Arc::new(add)).unwrap();
    let tenant = FnTool::new("tenant", "Needs a tenant.", |_: Map<String, Value>| async move {
        anyhow::Ok(ToolResult::text("ok"))
    })
    .map_spec(|s| {
        ToolSpec::new(
            s.name,
            s.description,
            json!({"type": "object", "properties": {"tenant": {"type": "string"}, "q": {"type": "string"}},
                   "required": ["tenant", "q"]}),
        )
        .injected("tenant")
    });
    registry.register(Arc::new(tenant)).unwrap();
    registry
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(CallId::model(1), name, arguments)
}

#[test]
fn registration_refuses_duplicates_bad_names_and_bad_schemas() {
    let mut registry = registry();
    let again = FnTool::new("add", "Again.", |args: Add| async move {
        anyhow::Ok((args.a).to_string())
    });
    assert_eq!(
        registry.register(Arc::new(again)).unwrap_err(),
        RegistryError::Duplicate { name: "add".into() }
    );
    let spaced = FnTool::new("has space", "Bad.", |args: Add| async move {
        anyhow::Ok(args.a.to_string())
    });
    assert!(matches!(
        registry.register(Arc::new(spaced)),
        Err(RegistryError::InvalidName { .. })
    ));
    let broken = FnTool::new("broken", "Bad schema.", |args: Add| async move {
        anyhow::Ok(args.a.to_string())
    })
    .map_spec(|s| ToolSpec::new(s.name, s.description, json!({"type": 12})));
    assert!(matches!(
        registry.register(Arc::new(broken)),
        Err(RegistryError::InvalidSchema { .. })
    ));
}

#[test]
fn schema_violations_name_the_path_and_the_expectation() {
    let registry = registry();
    let entry = registry.get("add").unwrap();
    let error = prepare_arguments(
        entry,
        &call("add", json!({"a": "1", "b": 2})),
        &Map::new(),
        InvalidArgsPolicy::ReturnToModel,
    )
    .unwrap_err();
    match &error {
        ArgumentError::Invalid {
            path,
            keyword,
            expected,
            ..
        } => {
            assert_eq!(path, "/a");
            assert_eq!(keyword, "type");
            assert_eq!(expected, "\"integer\"");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        error.to_string(),
        "invalid arguments for tool 'add' at '/a': schema keyword 'type' expects \"integer\""
    );
}

/// A registry with one tool `t` whose schema is `schema`.
fn one(schema: Value) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    let tool = FnTool::new("t", "A tool.", |_: Map<String, Value>| async move {
        anyhow::Ok(ToolResult::text("ok"))
    })
    .map_spec(move |s| ToolSpec::new(s.name, s.description, schema));
    registry.register(Arc::new(tool)).unwrap();
    registry
}

/// The text of `t`'s error for `args`.
fn invalid(registry: &ToolRegistry, args: Value) -> String {
    prepare_arguments(
        registry.get("t").unwrap(),
        &call("t", args),
        &Map::new(),
        InvalidArgsPolicy::ReturnToModel,
    )
    .unwrap_err()
    .to_string()
}

const PLANTED: &str = "PLANTED-7731";

#[test]
fn schema_violations_never_quote_the_offending_value() {
    let registry = one(json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 9},
            "s": {"type": "string", "maxLength": 4, "pattern": "^[a-z]+$"},
            "e": {"enum": ["red", "green"]},
            "c": {"const": "fixed"},
            "o": {"type": ["integer", "null"]},
            "deep": {"type": "object", "properties": {"x": {"type": "boolean"}}}
        },
        "required": ["n"],
        "additionalProperties": false
    }));
    let cases = [
        (
            json!({"n": PLANTED}),
            "at '/n': schema keyword 'type' expects \"integer\"",
        ),
        (
            json!({"n": 7731}),
            "at '/n': schema keyword 'maximum' expects 9",
        ),
        (
            json!({"n": 1, "s": PLANTED}),
            "at '/s': schema keyword 'maxLength' expects 4",
        ),
        (
            json!({"n": 1, "s": "ab1"}),
            "at '/s': schema keyword 'pattern' expects \"^[a-z]+$\"",
        ),
        (
            json!({"n": 1, "e": PLANTED}),
            "at '/e': schema keyword 'enum' expects [\"red\",\"green\"]",
        ),
        (
            json!({"n": 1, "c": PLANTED}),
            "at '/c': schema keyword 'const' expects \"fixed\"",
        ),
        (
            json!({"n": 1, "o": PLANTED}),
            "at '/o': schema keyword 'type' expects [\"integer\",\"null\"]",
        ),
        (
            json!({"n": 1, "deep": {"x": PLANTED}}),
            "at '/deep/x': schema keyword 'type' expects \"boolean\"",
        ),
        (
            json!({"s": "ab"}),
            "at '<root>': schema keyword 'required' expects property \"n\"",
        ),
        (
            json!({"n": 1, PLANTED: 1}),
            "at '<root>': schema keyword 'additionalProperties' expects no properties other than",
        ),
        (
            json!(PLANTED),
            "at '<root>': schema keyword 'type' expects \"object\"",
        ),
    ];
    for (args, expected) in cases {
        let text = invalid(&registry, args.clone());
        assert!(
            text.starts_with("invalid arguments for tool 't' "),
            "{args}: {text}"
        );
        assert!(text.contains(expected), "{args}: {text}");
        assert!(!text.contains(PLANTED), "{args}: {text}");
        assert!(!text.contains("7731"), "{args}: {text}");
    }
}

#[test]
fn a_long_schema_value_is_cut() {
    let options: Vec<String> = (0..100).map(|i| format!("option-{i}")).collect();
    let registry = one(json!({"type": "object", "properties": {"e": {"enum": options}}}));
    let text = invalid(&registry, json!({"e": PLANTED}));
    assert!(text.ends_with("..."), "{text}");
    assert!(text.len() < 400, "{text}");
    assert!(!text.contains(PLANTED), "{text}");
}

#[test]
fn a_keyword_behind_a_ref_still_names_what_it_expects() {
    let registry = one(json!({
        "type": "object",
        "properties": {"inner": {"$ref": "#/$defs/Inner"}},
        "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    }));
    let text = invalid(&registry, json!({"inner": {"x": PLANTED}}));
    assert!(
        text.contains("at '/inner/x': schema keyword 'type' expects \"integer\""),
        "{text}"
    );
    assert!(!text.contains(PLANTED), "{text}");
}

#[test]
fn text_that_is_not_json_is_counted_not_quoted() {
    let registry = registry();
    let entry = registry.get("add").unwrap();
    for raw in [
        "{a: 1}".to_owned(),
        format!("{{\"a\": {PLANTED}"),
        format!("{{\"a\": \"{PLANTED}"),
        PLANTED.to_owned(),
        format!("{{\"a\": 1}} {PLANTED}"),
        format!("{{\"a\": \"\\q{PLANTED}\"}}"),
    ] {
        let mut bad = call("add", Value::Null);
        bad.raw_arguments = Some(raw.clone());
        let error = prepare_arguments(
            entry,
            &bad,
            &Map::new(),
            InvalidArgsPolicy::NormalizeThenReturn,
        )
        .unwrap_err();
        assert!(
            matches!(&error, ArgumentError::NotJson { received_bytes, .. } if *received_bytes == raw.len()),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "arguments for tool 'add' are not valid JSON ({} bytes received; ",
                raw.len()
            )),
            "{text}"
        );
        assert!(text.contains(" at line 1 column "), "{text}");
        assert!(
            !text.contains("PLANTED") && !text.contains("7731"),
            "{text}"
        );
        assert!(!text.contains("{a"), "{text}");
    }
}

#[test]
fn injected_arguments_overwrite_the_model_and_are_hidden_from_it() {
    let registry = registry();
    let entry = registry.get("tenant").unwrap();
    let mut injected = Map::new();
    injected.insert("tenant".into(), json!("acme"));
    let prepared = prepare_arguments(
        entry,
        &call("tenant", json!({"tenant": "evil", "q": "x"})),
        &injected,
        InvalidArgsPolicy::ReturnToModel,
    )
    .unwrap();
    assert_eq!(prepared, json!({"tenant": "acme", "q": "x"}));
    let offered = &entry.definition().parameters;
    assert!(offered["properties"].get("tenant").is_none());
    assert_eq!(offered["required"], json!(["q"]));
    let missing = prepare_arguments(
        entry,
        &call("tenant", json!({"q": "x"})),
        &Map::new(),
        InvalidArgsPolicy::ReturnToModel,
    );
    assert_eq!(
        missing.unwrap_err(),
        ArgumentError::MissingInjected {
            tool: "tenant".into(),
            key: "tenant".into()
        }
    );
}

#[test]
fn normalisation_unwraps_one_wrapper_key_and_json_strings() {
    let registry = registry();
    let entry = registry.get("add").unwrap();
    for sent in [
        json!({"input": {"a": 1, "b": 2}}),
        json!("{\"a\": 1, \"b\": 2}"),
        json!({"args": "{\"a\":1,\"b\":2}"}),
    ] {
        let prepared = prepare_arguments(
            entry,
            &call("add", sent.clone()),
            &Map::new(),
            InvalidArgsPolicy::NormalizeThenReturn,
        );
        assert_eq!(prepared.unwrap(), json!({"a": 1, "b": 2}), "{sent}");
        let strict = prepare_arguments(
            entry,
            &call("add", sent),
            &Map::new(),
            InvalidArgsPolicy::ReturnToModel,
        );
        assert!(strict.is_err());
    }
}

#[test]
fn model_dispatch_hides_host_tools() {
    let mut registry = registry();
    let secret = FnTool::new("host_only", "Host.", |args: Add| async move {
        anyhow::Ok(args.a.to_string())
    });
    registry.register_host_tool(Arc::new(secret)).unwrap();
    assert!(registry.get("host_only").is_some());
    assert!(registry.model_dispatch().get("host_only").is_none());
    let names: Vec<&str> = registry
        .model_dispatch()
        .definitions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["add", "tenant"]);
}

/// Polls `future` to its end. The futures of these tests never wait, so a
/// waker that does nothing suffices.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
}

/// Runs `tool` once with `{}`, without a context.
fn run_bare(tool: &dyn Tool) -> anyhow::Result<ToolResult> {
    ready(tool.execute_with_context(json!({}), ToolCallOptions::default(), None))
}

#[test]
fn a_serialisable_return_value_becomes_json_and_a_string_stays_text() {
    #[derive(serde::Serialize)]
    struct Sum {
        sum: i64,
        parts: Vec<i64>,
    }
    let sum = FnTool::new("sum", "Sums.", |_: Map<String, Value>| async move {
        anyhow::Ok(Sum {
            sum: 3,
            parts: vec![1, 2],
        })
    });
    let result = run_bare(&sum).unwrap();
    assert!(!result.is_error);
    assert_eq!(
        serde_json::from_str::<Value>(&result.content).unwrap(),
        json!({"sum": 3, "parts": [1, 2]})
    );

    let owned = FnTool::new("owned", "Text.", |_: Map<String, Value>| async move {
        anyhow::Ok(String::from("plain \"text\""))
    });
    assert_eq!(
        run_bare(&owned).unwrap(),
        ToolResult::text("plain \"text\"")
    );
    let borrowed = FnTool::new("borrowed", "Text.", |_: Map<String, Value>| async move {
        anyhow::Ok("static text")
    });
    assert_eq!(
        run_bare(&borrowed).unwrap(),
        ToolResult::text("static text")
    );
    // A value that serialises to a JSON string is text, not a quoted string.
    let string_value = FnTool::new("value", "Text.", |_: Map<String, Value>| async move {
        anyhow::Ok(json!("from a value"))
    });
    assert_eq!(
        run_bare(&string_value).unwrap(),
        ToolResult::text("from a value")
    );
    let number = FnTool::new("number", "A number.", |_: Map<String, Value>| async move {
        anyhow::Ok(42_u32)
    });
    assert_eq!(run_bare(&number).unwrap(), ToolResult::text("42"));
}

#[test]
fn a_tool_result_passes_through_unchanged() {
    let expected = ToolResult::error("it broke")
        .with_metadata(json!({"code": 7}))
        .with_control(tinyagents_core::ToolControl::Terminate);
    let sent = expected.clone();
    let tool = FnTool::new("failing", "Fails.", move |_: Map<String, Value>| {
        let sent = sent.clone();
        async move { anyhow::Ok(sent) }
    });
    let result = run_bare(&tool).unwrap();
    assert!(result.is_error);
    assert_eq!(result, expected);
}

#[test]
fn a_value_that_cannot_be_serialised_fails_the_call_naming_the_tool() {
    let tool = FnTool::new("pairs", "Bad keys.", |_: Map<String, Value>| async move {
        let mut map = std::collections::BTreeMap::new();
        map.insert((1_u8, 2_u8), "pair");
        anyhow::Ok(map)
    });
    let error = run_bare(&tool).unwrap_err().to_string();
    assert!(
        error.starts_with("tool 'pairs' returned a value that cannot be serialised: "),
        "{error}"
    );
}

#[test]
fn a_context_tool_receives_the_context_and_refuses_to_run_without_one() {
    let tool = FnTool::with_context(
        "whoami",
        "Names the call.",
        |_: Map<String, Value>, ctx: ToolRunContext| async move {
            anyhow::Ok(format!("{} {}", ctx.run_id(), ctx.call_id()))
        },
    );
    let context = ToolRunContext::new(
        tinyagents_core::RunId::new("r1"),
        CallId::new("c1"),
        tinyagents_core::CancellationToken::new(),
    );
    let result =
        ready(tool.execute_with_context(json!({}), ToolCallOptions::default(), Some(&context)))
            .unwrap();
    assert_eq!(result, ToolResult::text("r1 c1"));

    let error = run_bare(&tool).unwrap_err().to_string();
    assert_eq!(
        error,
        "tool 'whoami' needs the context of a run: call it through a harness"
    );
}
