//! How tokens and money read, wherever a run's spend is printed (the tree,
//! `show`, the line a run ends with): `7 tokens (5 in, 2 out; 3 cached,
//! 1 reasoning)`, `cost 0.018 USD`. Amounts are in the smallest unit of the
//! price table's currency (cents for `USD`), printed exactly, followed by
//! the code the table names; without a price table nothing is priced and
//! no money is printed.

use tinyagents::core::{Cost, Spent};
use tinyagents::prelude::Usage;

/// `7 tokens (5 in, 2 out)`, with the cached and reasoning tokens (parts
/// of the input and of the output) when there are any.
pub(crate) fn tokens(usage: &Usage) -> String {
    let mut text = format!(
        "{} tokens ({} in, {} out",
        usage.total(),
        usage.input_tokens,
        usage.output_tokens
    );
    let mut parts = Vec::new();
    if usage.cached_input_tokens > 0 {
        parts.push(format!("{} cached", usage.cached_input_tokens));
    }
    if usage.reasoning_tokens > 0 {
        parts.push(format!("{} reasoning", usage.reasoning_tokens));
    }
    if !parts.is_empty() {
        text.push_str("; ");
        text.push_str(&parts.join(", "));
    }
    text.push(')');
    text
}

/// `0.018 USD`: the amount in the smallest unit, and the currency's code
/// when the table names one.
pub(crate) fn money(cost: Cost, currency: &str) -> String {
    if currency.is_empty() {
        cost.to_string()
    } else {
        format!("{cost} {currency}")
    }
}

/// `3 calls unpriced`.
pub(crate) fn unpriced(calls: u32) -> String {
    format!("{calls} call{} unpriced", if calls == 1 { "" } else { "s" })
}

/// What a model turn spent, as ` · …` parts: its tokens, and its cost or
/// `unpriced` when prices are set (`currency`).
pub(crate) fn turn(usage: &Usage, cost: Option<Cost>, currency: Option<&str>) -> String {
    let mut text = String::new();
    if usage.total() > 0 {
        text.push_str(&format!(" · {}", tokens(usage)));
    }
    if let Some(currency) = currency {
        match cost {
            Some(cost) => text.push_str(&format!(" · cost {}", money(cost, currency))),
            None => text.push_str(" · unpriced"),
        }
    }
    text
}

/// What a run spent, as ` · …` parts: its own model calls' tokens and
/// cost; then, when the runs it delegated to spent too, the whole tree's
/// (`total`: the run and every run under it) marked `tree`; then the calls
/// whose model has no price.
pub(crate) fn run(own: &Spent, total: Option<&Spent>, currency: Option<&str>) -> String {
    let mut text = String::new();
    if own.usage.total() > 0 {
        text.push_str(&format!(" · {}", tokens(&own.usage)));
    }
    if let Some(currency) = currency
        && own.model_calls > own.unpriced_calls
    {
        text.push_str(&format!(" · cost {}", money(own.cost, currency)));
    }
    // A total of nothing is an event written before totals were (or a
    // run that spent nothing): only the run's own is known.
    let total = total.filter(|total| **total != Spent::default());
    let delegated = total.filter(|total| {
        total.usage != own.usage || total.cost != own.cost || total.model_calls > own.model_calls
    });
    if let Some(total) = delegated {
        text.push_str(&format!(" · tree {}", tokens(&total.usage)));
        if let Some(currency) = currency
            && total.model_calls > total.unpriced_calls
        {
            text.push_str(&format!(", cost {}", money(total.cost, currency)));
        }
    }
    let unpriced_calls = total.map_or(own.unpriced_calls, |total| total.unpriced_calls);
    if currency.is_some() && unpriced_calls > 0 {
        text.push_str(&format!(" · {}", unpriced(unpriced_calls)));
    }
    text
}
