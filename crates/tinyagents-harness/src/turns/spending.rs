//! A model call's tokens and money: priced, reserved before the call on the
//! run's node of its tree ([`Spend`]), settled after it.
//!
//! The worst case of a call is its prompt's estimate plus the most it may
//! answer (`ModelOptions::max_output_tokens`, or
//! [`DEFAULT_OUTPUT_RESERVE`]); it is priced at the model's input and
//! output rates. A call the tree cannot afford is not made. A tree with no
//! cap anywhere reserves nothing and estimates nothing: its calls are only
//! counted and priced.

use std::panic::AssertUnwindSafe;

use tinyagents_core::{
    ChatRequest, Cost, Message, ModelPrice, Reservation, Spend, Spent, TinyAgentsError, Usage,
};

use super::Run;
use crate::call::panicked;
use crate::pricing::{DEFAULT_OUTPUT_RESERVE, json_bytes, len};

/// The default estimate's running count of the transcript: messages are
/// appended, so each is measured once.
#[derive(Debug, Default)]
pub(crate) struct PromptTally {
    counted: usize,
    bytes: u64,
}

/// What a model call holds of its tree until it is settled.
pub(crate) enum HeldCall {
    /// The model is not metered (`ChatModel::metered`): nothing is held,
    /// priced or recorded.
    Unmetered,
    /// Nothing caps the tree: nothing is held; what the call spent is
    /// recorded when it is settled.
    Unheld,
    /// The call's worst case, held on every node to the root.
    Held(Reservation),
}

impl Run<'_> {
    /// Reserves the next model call's worst case, or refuses it with the
    /// cap it would pass. A capped tree that prices money refuses a model
    /// without a price: its cost could not be bounded.
    pub(crate) fn reserve_model_call(&mut self) -> Result<HeldCall, TinyAgentsError> {
        if !self.harness.model.metered() {
            return Ok(HeldCall::Unmetered);
        }
        let spend = self.ctx.spend();
        if !spend.is_capped() {
            return Ok(HeldCall::Unheld);
        }
        let price = self.model_price();
        if price.is_none() && spend.caps_cost() {
            return Err(TinyAgentsError::ModelUnpriced {
                model: self.model_name().to_owned(),
            });
        }
        let output = u64::from(
            self.request_options()
                .max_output_tokens
                .unwrap_or(DEFAULT_OUTPUT_RESERVE),
        );
        let input = self.prompt_estimate()?;
        let cost = price.map_or(Cost::ZERO, |p| p.worst_case(input, output));
        let reservation = self
            .ctx
            .spend()
            .reserve(input.saturating_add(output), cost)?;
        Ok(HeldCall::Held(reservation))
    }

    /// The price of this run's model: the harness's table, else its tree's.
    /// The model's name is looked up only when there is a table to look it
    /// up in. Looked up again when a call is settled, so that nothing of it
    /// is held across the call.
    pub(crate) fn model_price(&self) -> Option<ModelPrice> {
        self.harness
            .pricing
            .prices
            .as_ref()
            .or(self.ctx.spend().prices())
            .and_then(|table| table.price(self.model_name()))
            .copied()
    }

    /// The model name prices are looked up by: the options' override, or
    /// the model's own.
    fn model_name(&self) -> &str {
        self.request_options()
            .model
            .as_deref()
            .unwrap_or_else(|| self.harness.model.name())
    }

    /// The prompt's tokens by the host's estimator, or by the default
    /// one: a token per three bytes of text (rounded up), plus four per
    /// message, which over-counts most tokenizers on most text.
    ///
    /// The host's estimator is host code: a panic in it refuses the call
    /// (fails closed), naming the estimator.
    fn prompt_estimate(&mut self) -> Result<u64, TinyAgentsError> {
        let messages = &self.state.messages;
        if let Some(estimator) = &self.harness.pricing.estimator {
            let request = ChatRequest {
                messages,
                tools: &self.harness.calls.model_tools,
                options: self.options.as_ref().unwrap_or(&self.harness.options),
                deltas: None,
            };
            return std::panic::catch_unwind(AssertUnwindSafe(|| estimator(&request)))
                .map_err(|panic| panicked("the prompt estimator", panic.as_ref()));
        }
        let tally = &mut self.prompt;
        if tally.counted > messages.len() {
            // The transcript was cut (a middleware compacted it).
            *tally = PromptTally::default();
        }
        for message in &messages[tally.counted..] {
            tally.bytes = tally.bytes.saturating_add(message_bytes(message));
        }
        tally.counted = messages.len();
        let bytes = tally.bytes.saturating_add(self.harness.pricing.tool_bytes);
        let per_message = u64::try_from(messages.len())
            .unwrap_or(u64::MAX)
            .saturating_mul(4);
        Ok(bytes.div_ceil(3).saturating_add(per_message))
    }
}

impl HeldCall {
    /// Spends what the call used, at its price, and gives back the rest of
    /// the reservation; returns the call's cost (`None`: unpriced, or not
    /// metered).
    /// `price` is looked up only for a metered call.
    pub(crate) fn settle(
        self,
        spend: &Spend,
        price: impl FnOnce() -> Option<ModelPrice>,
        usage: Usage,
    ) -> Option<Cost> {
        if matches!(self, HeldCall::Unmetered) {
            return None;
        }
        let cost = price().map(|price| price.cost(&usage));
        let spent = Spent::call(usage, cost);
        match self {
            HeldCall::Held(reservation) => reservation.settle(&spent),
            HeldCall::Unheld | HeldCall::Unmetered => spend.record(&spent),
        }
        cost
    }
}

fn message_bytes(message: &Message) -> u64 {
    match message {
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => tool_calls.iter().fold(
            len(content).saturating_add(reasoning.as_deref().map_or(0, len)),
            |sum, call| {
                sum.saturating_add(len(&call.name))
                    .saturating_add(json_bytes(&call.arguments))
                    .saturating_add(call.raw_arguments.as_deref().map_or(0, len))
            },
        ),
        other => len(other.text()),
    }
}
