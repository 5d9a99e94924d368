//! The scanners behind [`Redactor`](super::Redactor): spans of text to
//! replace, found by key name, by bearer scheme and by prefix body, and the
//! splitting of key names into words.

use super::REDACTED;

/// The characters a prefixed key's body may hold.
#[derive(Debug, Clone, Copy)]
pub(super) enum Body {
    /// ASCII letters, digits, `_` and `-`.
    Token,
    /// Upper-case ASCII letters and digits.
    UpperAlnum,
}

impl Body {
    pub(super) fn accepts(self, b: u8) -> bool {
        match self {
            Self::Token => b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
            Self::UpperAlnum => b.is_ascii_uppercase() || b.is_ascii_digit(),
        }
    }
}

/// Authorisation schemes whose credential follows a space.
const SCHEMES: &[&str] = &["bearer", "basic", "token", "digest"];

/// Words of a key compared against key rules (the last ones count).
const MAX_KEY_WORDS: usize = 4;

/// A range to replace; `quote` asks for `"[REDACTED]"` (an unquoted JSON
/// value, so the text stays JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    start: usize,
    end: usize,
    quote: bool,
}

impl Span {
    pub(super) fn plain(start: usize, end: usize) -> Self {
        Self {
            start,
            end,
            quote: false,
        }
    }
}

pub(super) fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn is_value_end(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'&' | b',' | b';' | b'"' | b'\'' | b'<' | b'>' | b')' | b']' | b'}'
        )
}

fn skip_blanks(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
        i += 1;
    }
    i
}

fn token_end(bytes: &[u8], start: usize) -> usize {
    start
        + bytes[start..]
            .iter()
            .take_while(|b| !is_value_end(**b))
            .count()
}

/// The value after a sensitive key that ends at `key_end`, if one follows.
pub(super) fn keyed_value(text: &str, key_end: usize) -> Option<Span> {
    let bytes = text.as_bytes();
    let mut j = key_end;
    let key_quoted = matches!(bytes.get(j), Some(b'"' | b'\''));
    if key_quoted {
        j += 1;
    }
    j = skip_blanks(bytes, j);
    let separator = *bytes.get(j).filter(|b| matches!(b, b'=' | b':'))?;
    j += 1;
    if bytes.get(j) == Some(&b'=') {
        j += 1;
    }
    j = skip_blanks(bytes, j);
    let first = *bytes.get(j)?;
    if text[j..].starts_with(REDACTED) || matches!(first, b'{' | b'[') {
        return None;
    }
    if first == b'"' || first == b'\'' {
        let mut k = j + 1;
        while k < bytes.len() && bytes[k] != first {
            k += if bytes[k] == b'\\' { 2 } else { 1 };
        }
        let end = k.min(bytes.len());
        let value = text.get(j + 1..end)?;
        return (!value.is_empty() && value != REDACTED).then(|| Span::plain(j + 1, end));
    }
    let end = token_end(bytes, j);
    let value = &text[j..end];
    if value.is_empty() || matches!(value, "null" | "true" | "false") {
        return None;
    }
    // `Authorization: Bearer abc`: keep the scheme, redact the credential.
    if SCHEMES.iter().any(|s| value.eq_ignore_ascii_case(s)) {
        let credential = skip_blanks(bytes, end);
        let credential_end = token_end(bytes, credential);
        if credential > end && credential_end > credential {
            return Some(Span::plain(credential, credential_end));
        }
    }
    Some(Span {
        start: j,
        end,
        quote: key_quoted && separator == b':',
    })
}

/// `Bearer <token>`, any case; the token must look like one (8 or more
/// characters, with a digit or punctuation unless it has 16 or more).
pub(super) fn find_bearer(text: &str, spans: &mut Vec<Span>) {
    const WORD: &[u8] = b"bearer";
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + WORD.len() < bytes.len() {
        let at_word = bytes[i..i + WORD.len()].eq_ignore_ascii_case(WORD)
            && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric());
        if !at_word {
            i += 1;
            continue;
        }
        let gap = i + WORD.len();
        let start = skip_blanks(bytes, gap);
        let len = bytes[start..]
            .iter()
            .take_while(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
            })
            .count();
        let token = &bytes[start..start + len];
        let shaped = len >= 16 || token.iter().any(|b| !b.is_ascii_alphabetic());
        if start > gap && len >= 8 && shaped {
            spans.push(Span::plain(start, start + len));
        }
        i = start + len.max(1);
    }
}

/// Sorted, with overlapping and touching spans merged.
pub(super) fn merge(mut spans: Vec<Span>) -> Vec<Span> {
    if spans.len() < 2 {
        return spans;
    }
    spans.sort_unstable_by_key(|s| (s.start, s.end));
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => {
                last.end = last.end.max(span.end);
                last.quote |= span.quote;
            }
            _ => merged.push(span),
        }
    }
    merged
}

pub(super) fn apply(text: &str, spans: &[Span]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        out.push_str(&text[at..span.start]);
        if span.quote {
            out.push('"');
            out.push_str(REDACTED);
            out.push('"');
        } else {
            out.push_str(REDACTED);
        }
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// The last words of a key.
#[derive(Default)]
pub(super) struct KeyTail<'a> {
    words: [&'a str; MAX_KEY_WORDS],
    len: usize,
}

impl<'a> KeyTail<'a> {
    fn push(&mut self, word: &'a str) {
        if self.len == MAX_KEY_WORDS {
            self.words.rotate_left(1);
            self.words[MAX_KEY_WORDS - 1] = word;
        } else {
            self.words[self.len] = word;
            self.len += 1;
        }
    }

    /// The words kept, first to last.
    pub(super) fn words(&self) -> &[&'a str] {
        &self.words[..self.len]
    }

    pub(super) fn ends_with(&self, rule: &[String]) -> bool {
        !rule.is_empty()
            && rule.len() <= self.len
            && rule
                .iter()
                .rev()
                .zip(self.words[..self.len].iter().rev())
                .all(|(r, w)| w.eq_ignore_ascii_case(r))
    }
}

/// Splits `key` into words at characters other than ASCII letters and
/// digits and at camel-case humps (`apiKey`, `APIKey`), keeping the last
/// few.
pub(super) fn key_tail(key: &str) -> KeyTail<'_> {
    let bytes = key.as_bytes();
    let mut tail = KeyTail::default();
    let mut start: Option<usize> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if !b.is_ascii_alphanumeric() {
            if let Some(s) = start.take() {
                tail.push(&key[s..i]);
            }
            continue;
        }
        match start {
            None => start = Some(i),
            Some(s) => {
                let prev = bytes[i - 1];
                let hump = b.is_ascii_uppercase()
                    && (prev.is_ascii_lowercase()
                        || prev.is_ascii_digit()
                        || (prev.is_ascii_uppercase()
                            && bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase)));
                if hump {
                    tail.push(&key[s..i]);
                    start = Some(i);
                }
            }
        }
    }
    if let Some(s) = start {
        tail.push(&key[s..]);
    }
    tail
}
