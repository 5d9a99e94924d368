//! How deep a tool call's arguments may nest.
//!
//! serde_json refuses to read JSON that nests 128 levels or more (its
//! default recursion limit), and every persisted form of a run wraps a
//! call's arguments in a few levels of its own: a suspended run's pending
//! call sits 5 levels deep, a transcript message's call 6 (in a suspended
//! run or a ledger checkpoint) or 4 (in a session record). A
//! model could otherwise issue arguments that parse at the provider
//! (127 levels) and make its own run's state unreadable. Arguments deeper
//! than [`MAX_ARGUMENT_DEPTH`] are therefore kept in the transcript as raw
//! text ([`ToolCall::confine_deep_arguments`]) and refused at admission.
//!
//! [`ToolCall::confine_deep_arguments`]: crate::ToolCall::confine_deep_arguments

use serde_json::Value;

/// The deepest a call's arguments may nest, counting each object or array
/// as one level (`{"a": 1}` nests 1 level, `{"a": [1]}` 2, a bare `1` 0).
///
/// Chosen so that the deepest persisted wrapping of a call's arguments
/// (6 levels, measured by the harness's tests) plus this stays well under
/// serde_json's default limit of 127 readable levels, with room for a
/// format to grow a few levels of wrapping.
pub const MAX_ARGUMENT_DEPTH: usize = 100;

/// Whether `value` nests more than `max` levels deep. It recurses at most
/// `max + 1` levels and stops at the first branch that goes past, so flat
/// arguments cost one look at each top-level value.
pub fn nests_deeper_than(value: &Value, max: usize) -> bool {
    match value {
        Value::Array(items) => max == 0 || items.iter().any(|v| nests_deeper_than(v, max - 1)),
        Value::Object(map) => max == 0 || map.values().any(|v| nests_deeper_than(v, max - 1)),
        _ => false,
    }
}

/// How many levels `value` nests, without recursion (a worklist), so even
/// a value deeper than the stack would allow to recurse is measured.
pub fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut work = vec![(value, 0usize)];
    while let Some((value, above)) = work.pop() {
        let level = above + 1;
        match value {
            Value::Array(items) => work.extend(items.iter().map(|child| (child, level))),
            Value::Object(map) => work.extend(map.values().map(|child| (child, level))),
            _ => continue,
        }
        deepest = deepest.max(level);
    }
    deepest
}

/// How many levels a JSON text nests: the deepest run of open brackets
/// outside strings. It reads any text, JSON or not (what a model sent when
/// its text did not parse), in one pass and without recursion.
pub fn text_nesting(text: &str) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn the_three_measures_agree_and_stop_at_the_bound() {
        for levels in [0, 1, 2, 5, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_DEPTH + 1] {
            let value = nested(levels);
            assert_eq!(nesting(&value), levels);
            assert_eq!(text_nesting(&value.to_string()), levels);
            assert!(!nests_deeper_than(&value, levels));
            assert_eq!(
                nests_deeper_than(&value, levels.saturating_sub(1)),
                levels > 0
            );
        }
        let mixed = json!({"a": 1, "b": {"c": [1, {"d": "]]]{{{\\\"["}]}, "e": []});
        assert_eq!(nesting(&mixed), 4);
        assert_eq!(text_nesting(&mixed.to_string()), 4);
        assert!(nests_deeper_than(&mixed, 3));
        assert!(!nests_deeper_than(&mixed, 4));
        assert_eq!(text_nesting("{a: [1"), 2);
    }
}
