//! What model calls cost: a price table per model and exact amounts.
//!
//! Money is counted in whole billionths of the currency's smallest unit
//! (nano-cents for a currency of cents), in integers: a price per million
//! tokens with up to three decimals of the smallest unit (7.5 cents per
//! million, 0.075 dollars) is a whole number of billionths per token, so a
//! call's cost and any sum of costs are exact, with no floating-point
//! drift. A model the table does not name has no price: its calls are
//! reported as unpriced, never guessed.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::limits::Usage;

/// Billionths of the smallest unit in one smallest unit.
const NANOS_PER_UNIT: u64 = 1_000_000_000;

/// An amount of money, in billionths of the currency's smallest unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost {
    nanos: u64,
}

impl Cost {
    /// Nothing.
    pub const ZERO: Self = Self { nanos: 0 };

    /// `units` of the smallest unit (cents for dollars).
    pub const fn from_units(units: u64) -> Self {
        Self {
            nanos: units.saturating_mul(NANOS_PER_UNIT),
        }
    }

    /// `nanos` billionths of the smallest unit.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    /// The amount in billionths of the smallest unit.
    pub const fn nanos(self) -> u64 {
        self.nanos
    }

    /// Whole smallest units, rounded up (what a bill would charge).
    pub const fn units_ceil(self) -> u64 {
        self.nanos.div_ceil(NANOS_PER_UNIT)
    }

    /// The sum, saturating at the largest amount.
    #[must_use]
    pub const fn saturating_add(self, other: Self) -> Self {
        Self {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    /// The difference, zero when `other` is larger.
    #[must_use]
    pub const fn saturating_sub(self, other: Self) -> Self {
        Self {
            nanos: self.nanos.saturating_sub(other.nanos),
        }
    }
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, rhs: Self) {
        *self = self.saturating_add(rhs);
    }
}

/// Smallest units with the fraction's significant digits: `1.5` (one and a
/// half cents), `0.000002`, `12`.
impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_scaled(f, self.nanos, 9)
    }
}

/// `value` in units of `10^-decimals`, as a decimal with the fraction's
/// significant digits only (`1.5`, `12`).
fn write_scaled(f: &mut fmt::Formatter<'_>, value: u64, decimals: usize) -> fmt::Result {
    let unit = (0..decimals).fold(1u64, |unit, _| unit * 10);
    let (whole, fraction) = (value / unit, value % unit);
    if fraction == 0 {
        return write!(f, "{whole}");
    }
    let digits = format!("{fraction:0decimals$}");
    write!(f, "{whole}.{}", digits.trim_end_matches('0'))
}

/// Why a price or an amount could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// Not a non-negative decimal number.
    #[error("'{text}' is not an amount: expected a non-negative decimal such as 150 or 7.5")]
    NotAnAmount {
        /// The text read.
        text: String,
    },
    /// More decimals than the unit can hold exactly.
    #[error("'{text}' has {decimals} decimals; at most {max} are exact here")]
    TooPrecise {
        /// The text read.
        text: String,
        /// Its decimals.
        decimals: usize,
        /// The most allowed.
        max: usize,
    },
    /// Too large to count.
    #[error("'{text}' is too large")]
    TooLarge {
        /// The text read.
        text: String,
    },
}

/// Reads a decimal text as a whole number of `10^-scale` units.
fn parse_scaled(text: &str, scale: usize) -> Result<u64, PriceError> {
    let not_an_amount = || PriceError::NotAnAmount {
        text: text.to_owned(),
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (text.ends_with('.')) {
        return Err(not_an_amount());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > scale {
        return Err(PriceError::TooPrecise {
            text: text.to_owned(),
            decimals: fraction.len(),
            max: scale,
        });
    }
    let too_large = || PriceError::TooLarge {
        text: text.to_owned(),
    };
    let mut value: u64 = whole.parse().map_err(|_| too_large())?;
    for _ in 0..scale {
        value = value.checked_mul(10).ok_or_else(too_large)?;
    }
    if !fraction.is_empty() {
        let padded = format!("{fraction:0<scale$}");
        let part: u64 = padded.parse().map_err(|_| not_an_amount())?;
        value = value.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(value)
}

impl FromStr for Cost {
    type Err = PriceError;

    /// Smallest units, with up to nine decimals (`"150"`, `"0.5"`).
    fn from_str(text: &str) -> Result<Self, PriceError> {
        parse_scaled(text.trim(), 9).map(Self::from_nanos)
    }
}

/// An amount is written as its decimal text (`"1.5"`), so it round-trips
/// through JSON and TOML without a float; a whole number is read too.
impl Serialize for Cost {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        AmountText::deserialize(deserializer)?
            .parse(9)
            .map(Self::from_nanos)
    }
}

/// A price per million tokens, in the smallest unit with up to three
/// decimals (`"7.5"` cents): held as billionths of the unit per token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    nanos_per_token: u64,
}

impl Rate {
    /// `units` smallest units per million tokens.
    pub const fn per_million_units(units: u64) -> Self {
        Self {
            nanos_per_token: units.saturating_mul(1_000),
        }
    }

    /// What `tokens` tokens cost at this rate.
    pub const fn cost(self, tokens: u64) -> Cost {
        Cost::from_nanos(tokens.saturating_mul(self.nanos_per_token))
    }
}

impl FromStr for Rate {
    type Err = PriceError;

    /// Smallest units per million tokens, up to three decimals (`"15"`,
    /// `"7.5"`).
    fn from_str(text: &str) -> Result<Self, PriceError> {
        parse_scaled(text.trim(), 3).map(|nanos_per_token| Self { nanos_per_token })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Billionths per token are thousandths per million tokens.
        write_scaled(f, self.nanos_per_token, 3)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        AmountText::deserialize(deserializer)?
            .parse(3)
            .map(|nanos_per_token| Self { nanos_per_token })
    }
}

/// An amount as a file writes it: a decimal string or a whole number; a
/// float is refused, since it may already have drifted.
#[derive(Deserialize)]
#[serde(untagged)]
enum AmountText {
    Text(String),
    Whole(u64),
    Float(f64),
}

impl AmountText {
    fn parse<E: serde::de::Error>(self, scale: usize) -> Result<u64, E> {
        match self {
            Self::Text(text) => parse_scaled(text.trim(), scale).map_err(E::custom),
            Self::Whole(n) => parse_scaled(&n.to_string(), scale).map_err(E::custom),
            Self::Float(x) => Err(E::custom(format!(
                "{x} is a floating-point number; write the amount as a string (\"{x}\") so it is exact"
            ))),
        }
    }
}

/// What one model costs per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens not read from the provider's cache.
    pub input: Rate,
    /// Output tokens (reasoning tokens included).
    pub output: Rate,
    /// Input tokens read from the provider's cache; `input` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<Rate>,
}

impl ModelPrice {
    /// What `usage` costs at this price.
    pub fn cost(&self, usage: &Usage) -> Cost {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let uncached = usage.input_tokens - cached;
        self.input
            .cost(uncached)
            .saturating_add(self.cached_input.unwrap_or(self.input).cost(cached))
            .saturating_add(self.output.cost(usage.output_tokens))
    }

    /// The most `input` prompt tokens and `output` completion tokens can
    /// cost (no cache discount assumed).
    pub fn worst_case(&self, input: u64, output: u64) -> Cost {
        let input_rate = self.input.max(self.cached_input.unwrap_or(self.input));
        input_rate
            .cost(input)
            .saturating_add(self.output.cost(output))
    }
}

/// Prices per model, in one currency. The host sets it, or loads it from a
/// file (`serde`: `{"currency": "USD", "models": {"gpt-4o": {"input":
/// "250", "output": "1000"}}}`, cents per million tokens).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// The currency's code, for display (`USD`); amounts are in its
    /// smallest unit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub currency: String,
    /// Prices by model name, as the provider is asked for it.
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table in `currency`.
    pub fn new(currency: impl Into<String>) -> Self {
        Self {
            currency: currency.into(),
            models: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) `model`'s price.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.models.insert(model.into(), price);
        self
    }

    /// `model`'s price; `None` for a model the table does not name.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.models.get(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Rate {
        text.parse().unwrap()
    }

    #[test]
    fn amounts_read_exactly_and_print_back() {
        assert_eq!("150".parse::<Cost>().unwrap(), Cost::from_units(150));
        assert_eq!("0.5".parse::<Cost>().unwrap().nanos(), 500_000_000);
        assert_eq!(
            "1.000000001".parse::<Cost>().unwrap().nanos(),
            1_000_000_001
        );
        assert_eq!(Cost::from_nanos(1_500_000_000).to_string(), "1.5");
        assert_eq!(Cost::from_nanos(2).to_string(), "0.000000002");
        assert_eq!(Cost::from_units(12).to_string(), "12");
        assert_eq!(rate("7.5").to_string(), "7.5");
        assert_eq!(rate("250").to_string(), "250");
        assert_eq!(rate("0.125").cost(8), Cost::from_nanos(1_000));
    }

    #[test]
    fn bad_amounts_are_named() {
        for text in ["", "-1", "1e3", "1.", ".5", "abc", "1.2.3"] {
            assert!(
                matches!(text.parse::<Rate>(), Err(PriceError::NotAnAmount { .. })),
                "{text}"
            );
        }
        assert_eq!(
            "0.0001".parse::<Rate>().unwrap_err(),
            PriceError::TooPrecise {
                text: "0.0001".into(),
                decimals: 4,
                max: 3
            }
        );
        assert!(matches!(
            "99999999999999999999".parse::<Cost>(),
            Err(PriceError::TooLarge { .. })
        ));
        let float = serde_json::from_str::<Rate>("7.5").unwrap_err().to_string();
        assert!(float.contains("write the amount as a string"), "{float}");
        assert_eq!(
            serde_json::from_str::<Rate>("\"7.5\"").unwrap(),
            rate("7.5")
        );
        assert_eq!(serde_json::from_str::<Rate>("15").unwrap(), rate("15"));
    }

    #[test]
    fn a_call_costs_its_tokens_at_their_rates_without_drift() {
        let price = ModelPrice {
            input: rate("15"),
            output: rate("60"),
            cached_input: Some(rate("7.5")),
        };
        let usage = Usage {
            input_tokens: 1_000,
            output_tokens: 100,
            cached_input_tokens: 400,
            reasoning_tokens: 0,
        };
        // 600 × 15 + 400 × 7.5 + 100 × 60 = 18,000 cents per million
        // tokens: 0.018 cents.
        assert_eq!(price.cost(&usage), "0.018".parse().unwrap());
        // A million calls sum to exactly 18,000 cents.
        let mut total = Cost::ZERO;
        for _ in 0..1_000_000 {
            total += price.cost(&usage);
        }
        assert_eq!(total, Cost::from_units(18_000));
        assert_eq!(price.worst_case(1_000, 100), "0.021".parse().unwrap());
    }

    #[test]
    fn a_table_names_its_models_and_refuses_unknown_fields() {
        let table: PriceTable =
            serde_json::from_str(r#"{"currency":"USD","models":{"m":{"input":"1","output":"2"}}}"#)
                .unwrap();
        assert_eq!(table.price("m").unwrap().output, rate("2"));
        assert!(table.price("other").is_none());
        let typo =
            serde_json::from_str::<PriceTable>(r#"{"models":{"m":{"input":"1","ouput":"2"}}}"#)
                .unwrap_err()
                .to_string();
        assert!(typo.contains("ouput"), "{typo}");
    }
}
