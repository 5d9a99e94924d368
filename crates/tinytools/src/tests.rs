//! Unit tests of registration and argument preparation.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tinyagents_core::{CallId, ToolCall, ToolResult};

use crate::{
    ArgumentError, FnTool, InvalidArgsPolicy, RegistryError, ToolRegistry, ToolSpec,
    prepare_arguments,
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
