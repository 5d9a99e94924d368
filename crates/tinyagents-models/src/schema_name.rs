//! The name providers accept for an output schema (OpenAI's
//! `response_format`) or a tool (Anthropic's forced output tool).

/// The longest schema (and Anthropic tool) name the providers accept.
pub(crate) const MAX_SCHEMA_NAME: usize = 64;

/// `name` as providers accept a schema or tool name
/// (`^[a-zA-Z0-9_-]{1,64}$`): every other character becomes `_`, the result
/// is cut to `max` characters, and an empty name becomes `output`.
pub(crate) fn schema_name(name: &str, max: usize) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if safe.is_empty() {
        safe.push_str("output");
        safe.truncate(max);
    }
    safe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_sanitised_and_cut() {
        assert_eq!(schema_name("Answer", MAX_SCHEMA_NAME), "Answer");
        assert_eq!(schema_name("a.b c/é-d_e", MAX_SCHEMA_NAME), "a_b_c__-d_e");
        assert_eq!(schema_name("", MAX_SCHEMA_NAME), "output");
        let long = "x".repeat(100);
        assert_eq!(schema_name(&long, MAX_SCHEMA_NAME).len(), 64);
        assert_eq!(schema_name(&long, 56).len(), 56);
    }
}
