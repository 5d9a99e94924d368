//! Function names of agents: the display name, normalised.

/// The longest function name providers accept; a longer normalised name is
/// cut here (the collision check compares the cut names).
pub const MAX_FUNCTION_NAME_LEN: usize = 64;

/// The function name of a display name: each run of characters outside
/// ASCII letters and digits becomes one `_`, so `Release Notes` and
/// `Release-Notes` both become `Release_Notes`. Cut to
/// [`MAX_FUNCTION_NAME_LEN`] characters.
pub fn normalize_function_name(display_name: &str) -> String {
    let mut out = String::with_capacity(display_name.len().min(MAX_FUNCTION_NAME_LEN));
    let mut in_run = false;
    for c in display_name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
        if out.len() >= MAX_FUNCTION_NAME_LEN {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_collapse_to_one_underscore() {
        assert_eq!(normalize_function_name("Release Notes"), "Release_Notes");
        assert_eq!(normalize_function_name("Release-Notes"), "Release_Notes");
        assert_eq!(normalize_function_name("a -- b"), "a_b");
        assert_eq!(normalize_function_name(" Ünïcode name!"), "_n_code_name_");
        assert_eq!(normalize_function_name("x".repeat(80).as_str()).len(), 64);
    }
}
