//! What a harness prices and estimates its model calls with: its price
//! table and the host's prompt estimator (configuration; the loop's
//! `turns/spending.rs` reserves and settles with it).

use std::sync::Arc;

use serde_json::Value;
use tinyagents_core::{ChatRequest, PriceTable, ToolDefinition};

/// The output a call reserves when its options set no
/// `max_output_tokens`: the default cap of the providers that require one.
pub const DEFAULT_OUTPUT_RESERVE: u32 = 4096;

/// A host's estimate of a request's prompt tokens (a tokenizer's count).
pub type PromptEstimator = Arc<dyn Fn(&ChatRequest<'_>) -> u64 + Send + Sync>;

/// What a harness prices its model calls with.
#[derive(Clone, Default)]
pub(crate) struct Pricing {
    /// The harness's prices; the tree's root's when `None`.
    pub(crate) prices: Option<Arc<PriceTable>>,
    /// The host's estimator; the default one when `None`.
    pub(crate) estimator: Option<PromptEstimator>,
    /// The default estimate's bytes of the tool definitions, once.
    pub(crate) tool_bytes: u64,
}

impl Pricing {
    pub(crate) fn new(
        prices: Option<Arc<PriceTable>>,
        estimator: Option<PromptEstimator>,
        tools: &[ToolDefinition],
    ) -> Self {
        let tool_bytes = tools
            .iter()
            .map(|tool| len(&tool.name) + len(&tool.description) + json_bytes(&tool.parameters))
            .sum();
        Self {
            prices,
            estimator,
            tool_bytes,
        }
    }
}

/// A text's bytes, as a count.
pub(crate) fn len(text: &str) -> u64 {
    u64::try_from(text.len()).unwrap_or(u64::MAX)
}

/// About the bytes of `value` as JSON text, without writing it: a number
/// counts as 20 (the most an integer takes), a string its bytes and quotes.
pub(crate) fn json_bytes(value: &Value) -> u64 {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(text) => len(text).saturating_add(2),
        Value::Array(items) => items
            .iter()
            .fold(2, |sum, item| sum.saturating_add(json_bytes(item) + 1)),
        Value::Object(fields) => fields.iter().fold(2, |sum, (key, item)| {
            sum.saturating_add(len(key) + 4)
                .saturating_add(json_bytes(item))
        }),
    }
}
