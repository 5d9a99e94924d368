//! A model's argument text prepared against a compiled schema, under each
//! invalid-arguments policy: it is refused with an error, or the prepared
//! arguments satisfy the schema (and stay within the depth limit). Nothing
//! panics.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use tinyagents::{core::CallId, FnTool, tools::InvalidArgsPolicy, core::MAX_ARGUMENT_DEPTH, core::ModelToolCall, tools::ToolRegistry, ToolSpec, tools::prepare_arguments, core::text_nesting};

/// Tools with the shapes of schema that models get wrong: nested objects,
/// arrays of objects, enums, numbers with bounds, required fields,
/// injected values.
fn registry() -> &'static ToolRegistry {
    static REGISTRY: OnceLock<ToolRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let schemas = [
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
            json!({"type": "object", "properties": {
                "order": {"type": "object", "properties": {
                    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}, "required": ["sku"]}},
                    "mode": {"enum": ["fast", "slow"]}
                }, "required": ["items"]},
                "note": {"type": ["string", "null"], "maxLength": 40}
            }, "required": ["order"], "additionalProperties": false}),
            json!({"type": "object", "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}, "user": {"type": "string"}}, "required": ["amount", "user"]}),
        ];
        let mut registry = ToolRegistry::new();
        for (i, schema) in schemas.into_iter().enumerate() {
            let mut spec = ToolSpec::new(format!("t{i}"), "A fuzzed tool.", schema);
            if i == 2 {
                spec = spec.injected("user");
            }
            let tool = FnTool::new(format!("t{i}"), "A fuzzed tool.", |_: Value| async {
                anyhow::Ok("ok")
            })
            .map_spec(move |_| spec.clone());
            registry
                .register(Arc::new(tool))
                .expect("the fuzzed tools register");
        }
        registry
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let name = format!("t{}", choice % 3);
    let Some(entry) = registry().get(&name) else {
        return;
    };
    let call = ModelToolCall::from_text(None, name.as_str(), text).into_call(CallId::new("p1"));
    let mut injected = Map::new();
    injected.insert("user".to_owned(), json!("host"));
    for policy in [
        InvalidArgsPolicy::Fail,
        InvalidArgsPolicy::ReturnToModel,
        InvalidArgsPolicy::NormalizeThenReturn,
    ] {
        if let Ok(prepared) = prepare_arguments(entry, &call, &injected, policy) {
            assert!(
                entry.validate(&prepared).is_ok(),
                "prepared arguments fail their schema: {prepared}"
            );
            assert!(
                text_nesting(&prepared.to_string()) <= MAX_ARGUMENT_DEPTH,
                "prepared arguments deeper than the limit"
            );
            if choice % 3 == 2 {
                assert_eq!(
                    prepared["user"],
                    json!("host"),
                    "the injected value was not kept"
                );
            }
        }
    }
});
