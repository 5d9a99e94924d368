//! The `usage` object of a Messages response, of `message_start` and of
//! `message_delta`, normalised to [`Usage`].
//!
//! Anthropic's `input_tokens` counts only the prompt tokens that were
//! neither read from nor written to the cache; ours counts them all, so
//! `input_tokens = input_tokens + cache_creation_input_tokens +
//! cache_read_input_tokens`, and the cache reads are `cached_input_tokens`.
//! Reasoning (thinking) tokens are not reported apart from `output_tokens`,
//! so `reasoning_tokens` stays 0.
//!
//! A count that is absent, `null` or not a non-negative integer is not
//! reported. Usage is bookkeeping beside the answer: a bad count is
//! ignored rather than failing a response whose content is fine (failing
//! it would throw away a paid-for answer, and `Malformed` is not retried).

use serde_json::Value;
use tinyagents_core::Usage;

/// The counts reported so far, each `None` until a report carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Prompt tokens neither read from nor written to the cache.
    fresh: Option<u64>,
    /// `cache_creation_input_tokens`.
    cache_write: Option<u64>,
    /// `cache_read_input_tokens`.
    cache_read: Option<u64>,
    output: Option<u64>,
}

impl Counts {
    /// Counts of one `usage` object.
    pub(super) fn of(usage: &Value) -> Self {
        let mut counts = Self::default();
        counts.read(usage);
        counts
    }

    /// Takes the counts `usage` reports. They are cumulative, so each one
    /// replaces an earlier report of the same count; a count left out (as
    /// `message_delta` leaves out the input counts) keeps its earlier value.
    pub(super) fn read(&mut self, usage: &Value) {
        let slots = [
            (&mut self.fresh, "input_tokens"),
            (&mut self.cache_write, "cache_creation_input_tokens"),
            (&mut self.cache_read, "cache_read_input_tokens"),
            (&mut self.output, "output_tokens"),
        ];
        for (slot, name) in slots {
            if let Some(count) = usage.get(name).and_then(Value::as_u64) {
                *slot = Some(count);
            }
        }
    }

    /// The normalised [`Usage`]; counts never reported are 0.
    pub(super) fn usage(&self) -> Usage {
        let cached = self.cache_read.unwrap_or(0);
        let input = [self.fresh, self.cache_write, self.cache_read]
            .into_iter()
            .flatten()
            .fold(0u64, u64::saturating_add);
        Usage {
            input_tokens: input,
            output_tokens: self.output.unwrap_or(0),
            cached_input_tokens: cached.min(input),
            reasoning_tokens: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cache_reads_and_writes_are_counted_as_input_and_reads_as_cached() {
        let usage = Counts::of(
            &json!({"input_tokens": 20, "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 5, "output_tokens": 9,
            "cache_creation": {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 0}}),
        )
        .usage();
        assert_eq!(
            usage,
            Usage {
                input_tokens: 28,
                output_tokens: 9,
                cached_input_tokens: 5,
                reasoning_tokens: 0,
            }
        );
    }

    #[test]
    fn absent_or_null_cache_counts_are_zero() {
        for value in [
            json!({"input_tokens": 20, "output_tokens": 9}),
            json!({"input_tokens": 20, "output_tokens": 9,
                "cache_creation_input_tokens": null, "cache_read_input_tokens": null}),
        ] {
            assert_eq!(Counts::of(&value).usage(), Usage::new(20, 9), "{value}");
        }
        assert_eq!(Counts::default().usage(), Usage::default());
    }

    #[test]
    fn malformed_cache_counts_are_ignored() {
        let value = json!({"input_tokens": 20, "output_tokens": 9,
            "cache_creation_input_tokens": "3", "cache_read_input_tokens": -5});
        assert_eq!(Counts::of(&value).usage(), Usage::new(20, 9));
    }

    #[test]
    fn a_later_report_replaces_only_the_counts_it_carries() {
        let mut counts = Counts::of(&json!({"input_tokens": 20,
            "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5, "output_tokens": 1}));
        counts.read(&json!({"output_tokens": 15}));
        assert_eq!(
            counts.usage(),
            Usage {
                input_tokens: 28,
                output_tokens: 15,
                cached_input_tokens: 5,
                reasoning_tokens: 0,
            }
        );
        counts.read(&json!({"input_tokens": 21, "cache_read_input_tokens": null}));
        assert_eq!(counts.usage().input_tokens, 29);
        assert_eq!(counts.usage().cached_input_tokens, 5);
    }
}
