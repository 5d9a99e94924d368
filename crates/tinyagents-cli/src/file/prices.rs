//! The prices of an agents file: `[prices]` (a currency, and each model's
//! price per million tokens in the currency's smallest unit) and
//! `prices_file` (a table in a JSON or TOML file beside it), read into one
//! [`PriceTable`]; and the amounts themselves, as `max_cost` also writes
//! them. An amount is a decimal string (`"7.5"`) or a whole number: a
//! float is refused, since it may already have drifted, and so is a
//! negative or malformed one.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::str::FromStr;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use tinyagents::core::{ModelPrice, PriceError, PriceTable, Rate};
use toml::Spanned;

use super::error::{FileError, Source};
use super::schema::AgentsFile;

/// An amount as a file writes it, read into `T` (a [`Rate`] or a
/// [`Cost`](tinyagents::core::Cost)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Amount<T>(pub(crate) T);

impl<'de, T: FromStr<Err = PriceError>> Deserialize<'de> for Amount<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AmountVisitor(PhantomData))
    }
}

struct AmountVisitor<T>(PhantomData<T>);

impl<T: FromStr<Err = PriceError>> Visitor<'_> for AmountVisitor<T> {
    type Value = Amount<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an amount: a decimal string such as \"7.5\", or a whole number")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        text.parse().map(Amount).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        if n < 0 {
            return Err(E::custom(negative(n)));
        }
        self.visit_str(&n.to_string())
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        if x < 0.0 {
            return Err(E::custom(negative(x)));
        }
        Err(E::custom(format!(
            "{x} is a floating-point number: write it as a string (\"{x}\") so it is exact"
        )))
    }
}

fn negative(n: impl fmt::Display) -> String {
    format!("{n} is negative: expected an amount of 0 or more")
}

/// `[prices]`, or a prices file: what one model costs, by its name as the
/// provider is asked for it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PricesSection {
    /// The currency's code (`USD`), shown beside amounts, which are in its
    /// smallest unit.
    #[serde(default)]
    pub(crate) currency: Option<String>,
    /// Prices by model name.
    #[serde(default)]
    pub(crate) models: BTreeMap<String, ModelPriceSection>,
}

/// `[prices.models."NAME"]`: the smallest unit per million tokens.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelPriceSection {
    /// Input tokens not read from the provider's cache.
    pub(crate) input: Amount<Rate>,
    /// Output tokens, reasoning tokens included.
    pub(crate) output: Amount<Rate>,
    /// Input tokens read from the cache (`input` when absent).
    #[serde(default)]
    pub(crate) cached_input: Option<Amount<Rate>>,
}

impl ModelPriceSection {
    fn price(self) -> ModelPrice {
        ModelPrice {
            input: self.input.0,
            output: self.output.0,
            cached_input: self.cached_input.map(|rate| rate.0),
        }
    }
}

/// The file's price table: `prices_file` read (relative to `dir`), then
/// `[prices]` over it (its models added or replacing the file's); `None`
/// when the file names no prices. Every agent that sets `max_cost` needs
/// one.
pub(crate) fn price_table(
    source: &Source,
    file: &AgentsFile,
    dir: &Path,
) -> Result<Option<PriceTable>, FileError> {
    let from_file = match &file.prices_file {
        Some(path) => Some(read_prices_file(source, path, dir)?),
        None => None,
    };
    let table = match (from_file, &file.prices) {
        (None, None) => None,
        (Some(table), None) => Some(table),
        (base, Some(section)) => Some(merge(source, base, section)?),
    };
    if table.is_none() {
        for (id, agent) in &file.agents {
            if let Some(max_cost) = &agent.get_ref().limits.max_cost {
                return Err(source.error(
                    Some(max_cost.span()),
                    format!("agents.{id}.limits.max_cost"),
                    "a cap on money needs prices: expected a [prices] table (or \
                     `prices_file = \"FILE\"`) pricing the agents' models",
                ));
            }
        }
    }
    Ok(table)
}

/// `section` over `base`: its currency must be the same when both say one.
fn merge(
    source: &Source,
    base: Option<PriceTable>,
    section: &Spanned<PricesSection>,
) -> Result<PriceTable, FileError> {
    let mut table = base.unwrap_or_default();
    let prices = section.get_ref();
    if let Some(currency) = &prices.currency {
        if !table.currency.is_empty() && table.currency != *currency {
            return Err(source.error(
                Some(section.span()),
                "prices.currency",
                format!(
                    "'{currency}' is not the currency of the prices file ('{}'): expected the same, or none here",
                    table.currency
                ),
            ));
        }
        table.currency.clone_from(currency);
    }
    for (model, price) in &prices.models {
        table.models.insert(model.clone(), price.price());
    }
    Ok(table)
}

/// Reads `prices_file`: JSON or TOML (by its extension), in the shape of
/// `[prices]`; an error names that file's line and key.
fn read_prices_file(
    source: &Source,
    path: &Spanned<String>,
    dir: &Path,
) -> Result<PriceTable, FileError> {
    let full = dir.join(path.get_ref());
    let extension = full.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(extension, "json" | "toml") {
        return Err(source.error(
            Some(path.span()),
            "prices_file",
            format!(
                "'{}' is neither a .json nor a .toml file: expected one of those",
                path.get_ref()
            ),
        ));
    }
    let text = std::fs::read_to_string(&full).map_err(|error| {
        source.error(
            Some(path.span()),
            "prices_file",
            format!("cannot read {}: {error}", full.display()),
        )
    })?;
    let prices_source = Source::new(&full, text);
    let section: PricesSection = if extension == "json" {
        parse_json(&prices_source)?
    } else {
        super::parse(&prices_source)?
    };
    let mut table = PriceTable::new(section.currency.unwrap_or_default());
    for (model, price) in section.models {
        table.models.insert(model, price.price());
    }
    Ok(table)
}

/// Parses `source` as JSON; an error names the key path, the line and
/// the column, like the agents file's own.
fn parse_json(source: &Source) -> Result<PricesSection, FileError> {
    let mut deserializer = serde_json::Deserializer::from_str(source.text());
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let key = super::key_path(e.path());
        let inner = e.into_inner();
        let at = format!(" at line {} column {}", inner.line(), inner.column());
        let message = inner.to_string();
        let problem = message.strip_suffix(&at).unwrap_or(&message).to_owned();
        let offset = offset_of(source.text(), inner.line(), inner.column());
        source.error(Some(offset..offset), key, problem)
    })
}

/// The byte offset of 1-based `line` and `column` (serde_json's, which
/// points just past the value) in `text`.
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let line_text = text.get(start..).unwrap_or("");
    let end = line_text.find('\n').unwrap_or(line_text.len());
    start + column.saturating_sub(1).min(end)
}
