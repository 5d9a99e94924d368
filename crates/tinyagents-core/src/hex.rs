//! Lowercase hex, as every hash and seal of tinyagents is written: one
//! spelling per value, so a stored tag compares by its text.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex.
pub fn encode(bytes: &[u8]) -> String {
    // Two digits written in place per byte: pushing a `char` at a time
    // costs a capacity check and a UTF-8 encoding for each.
    let mut digits = vec![0; bytes.len() * 2];
    for (pair, byte) in digits.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    // Invariant: every byte is an ASCII digit of `DIGITS`, so this is UTF-8.
    String::from_utf8(digits).unwrap_or_default()
}

/// Lowercase hex back to bytes; `None` for an odd length or a character
/// that is not a lowercase hex digit, so each value has one spelling and an
/// edited character is never read as another value.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    digits
        .chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_all_but_lowercase_hex() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&bytes)), Some(bytes));
        assert_eq!(decode("0a"), Some(vec![10]));
        assert_eq!(decode("0A"), None, "one spelling per value");
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("zz"), None);
        assert_eq!(decode(""), Some(Vec::new()));
    }
}
