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
    match error {
        ArgumentError::Invalid { path, message, .. } => {
            assert_eq!(path, "/a");
            assert!(message.contains("integer"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn text_that_is_not_json_is_quoted_back() {
    let registry = registry();
    let entry = registry.get("add").unwrap();
    let mut bad = call("add", Value::Null);
    bad.raw_arguments = Some("{a: 1}".into());
    let error = prepare_arguments(
        entry,
        &bad,
        &Map::new(),
        InvalidArgsPolicy::NormalizeThenReturn,
    )
    .unwrap_err();
    assert!(
        matches!(&error, ArgumentError::NotJson { raw, .. } if raw == "{a: 1}"),
        "{error}"
    );
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
