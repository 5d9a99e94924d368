//! `#[tinyagents::json_schema]`: derives `Deserialize`, `Serialize` and
//! `JsonSchema` on a tool's argument type (or a typed answer) through the
//! facade's re-exports, so a program that depends only on `tinyagents`
//! needs neither `serde` nor `schemars` in its own manifest.
//!
//! It is not a tool macro: tools stay plain `FnTool`s. It writes no code
//! of its own; it only puts the three derives and their `crate` paths in
//! front of the item, with no dependency of its own (no `syn`).

use proc_macro::TokenStream;

/// Derives `serde::Deserialize`, `serde::Serialize` and
/// `schemars::JsonSchema` through `tinyagents::serde` and
/// `tinyagents::schemars`. Other `#[serde(...)]` and `#[schemars(...)]`
/// attributes on the item keep working; doc comments become the schema's
/// descriptions.
///
/// ```ignore
/// #[tinyagents::json_schema]
/// struct Refund {
///     /// The invoice to refund.
///     invoice: String,
///     cents: u64,
/// }
/// ```
#[proc_macro_attribute]
pub fn json_schema(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return compile_error("#[tinyagents::json_schema] takes no arguments");
    }
    let derives = "#[derive(::tinyagents::serde::Deserialize, ::tinyagents::serde::Serialize, \
                   ::tinyagents::schemars::JsonSchema)] \
                   #[serde(crate = \"::tinyagents::serde\")] \
                   #[schemars(crate = \"::tinyagents::schemars\")]";
    match derives.parse::<TokenStream>() {
        Ok(mut out) => {
            out.extend(item);
            out
        }
        Err(_) => compile_error("#[tinyagents::json_schema] could not write its derives"),
    }
}

fn compile_error(message: &str) -> TokenStream {
    format!("::core::compile_error!({message:?});")
        .parse()
        .unwrap_or_default()
}
