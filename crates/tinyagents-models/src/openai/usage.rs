//! The `usage` object of a Chat Completions response or of a stream's last
//! chunk: `prompt_tokens` (cache reads included), `completion_tokens`
//! (reasoning included), and the optional breakdowns
//! `prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens`.
//!
//! Every count defaults to 0: absent, `null` or of another type. Usage is
//! bookkeeping beside the answer, and compatible servers fill the details
//! in unevenly (some send `null`, some their own shapes), so a bad count is
//! ignored rather than failing a response whose content is fine; failing it
//! would throw away a paid-for answer, and `Malformed` is not retried.

use serde_json::Value;
use tinyagents_core::Usage;

/// The [`Usage`] an OpenAI `usage` object reports.
///
/// A breakdown larger than its whole is capped at the whole: the cached
/// tokens are a part of the prompt, the reasoning tokens of the completion.
pub(super) fn usage(value: &Value) -> Usage {
    let input_tokens = u64_field(value, "prompt_tokens");
    let output_tokens = u64_field(value, "completion_tokens");
    Usage {
        input_tokens,
        output_tokens,
        cached_input_tokens: detail(value, "prompt_tokens_details", "cached_tokens")
            .min(input_tokens),
        reasoning_tokens: detail(value, "completion_tokens_details", "reasoning_tokens")
            .min(output_tokens),
    }
}

/// `value[object][field]`, 0 when either is absent, `null` or not a count.
fn detail(value: &Value, object: &str, field: &str) -> u64 {
    value
        .get(object)
        .map_or(0, |details| u64_field(details, field))
}

/// A non-negative integer field, 0 when absent or of another type.
fn u64_field(value: &Value, name: &str) -> u64 {
    value.get(name).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cached_and_reasoning_details_are_read() {
        let value = json!({
            "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        });
        assert_eq!(
            usage(&value),
            Usage {
                input_tokens: 2006,
                output_tokens: 300,
                cached_input_tokens: 1920,
                reasoning_tokens: 256,
            }
        );
    }

    #[test]
    fn absent_or_null_details_are_zero() {
        for value in [
            json!({"prompt_tokens": 12, "completion_tokens": 7}),
            json!({"prompt_tokens": 12, "completion_tokens": 7,
                "prompt_tokens_details": null, "completion_tokens_details": null}),
            json!({"prompt_tokens": 12, "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": null},
                "completion_tokens_details": {}}),
        ] {
            assert_eq!(usage(&value), Usage::new(12, 7), "{value}");
        }
    }

    #[test]
    fn malformed_details_are_ignored() {
        for value in [
            json!({"prompt_tokens": 12, "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": "4"},
                "completion_tokens_details": {"reasoning_tokens": -1}}),
            json!({"prompt_tokens": 12, "completion_tokens": 7,
                "prompt_tokens_details": "cached",
                "completion_tokens_details": [3]}),
            json!({"prompt_tokens": 12, "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 1.5},
                "completion_tokens_details": {"reasoning_tokens": {"n": 3}}}),
        ] {
            assert_eq!(usage(&value), Usage::new(12, 7), "{value}");
        }
    }

    #[test]
    fn a_detail_larger_than_its_total_is_capped() {
        let value = json!({"prompt_tokens": 10, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 50},
            "completion_tokens_details": {"reasoning_tokens": 9}});
        assert_eq!(
            usage(&value),
            Usage {
                input_tokens: 10,
                output_tokens: 4,
                cached_input_tokens: 10,
                reasoning_tokens: 4,
            }
        );
    }
}
