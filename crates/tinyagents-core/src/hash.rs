//! A stable hash of tool arguments: the idempotency key of a call and what
//! an approval binds to.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` as JSON with object keys sorted, so equal values always
/// give equal text whatever order their keys were built in.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Invariant: serde_json writes UTF-8, and the rest is ASCII punctuation.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes a string or scalar as compact JSON (writing to a `Vec` cannot
/// fail, nor can serialising a `Value` or a `str`).
fn write_json<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, value);
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(object) => {
            out.push(b'{');
            // Without serde_json's `preserve_order` (which another crate of
            // the build may turn on) the keys already come sorted; the
            // text must not depend on it.
            let sorted = object
                .keys()
                .zip(object.keys().skip(1))
                .all(|(a, b)| a <= b);
            if sorted {
                write_members(object.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = object.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_members(entries.into_iter(), out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_json(scalar, out),
    }
}

/// An object's members, in the order given, as `"key":value,...`.
fn write_members<'a>(members: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    for (i, (key, inner)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(key.as_str(), out);
        out.push(b':');
        write_canonical(inner, out);
    }
}

/// SHA-256 of the canonical JSON of `args`, as 64 lowercase hex digits.
pub fn args_hash(args: &Value) -> String {
    // Most arguments fit: one allocation, not a doubling series.
    let mut text = Vec::with_capacity(256);
    write_canonical(args, &mut text);
    crate::hex::encode(&Sha256::digest(&text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":null,"y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":null,"y":[1,2]},"b":1}"#);
        assert_eq!(args_hash(&a), args_hash(&b));
        assert_ne!(args_hash(&a), args_hash(&json!({"b": 2})));
        assert_eq!(args_hash(&a).len(), 64);
    }

    #[test]
    fn the_text_and_the_hash_are_the_ones_stored_before() {
        // Hashes persist in ledgers and approvals: the canonical text of a
        // value must never change. Escapes, unicode, numbers and nesting.
        let value = json!({"z": [1.5, -2, null, true], "a\"b": "\u{e9}\n", "m": {"k": {}}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a\"b":"é\n","m":{"k":{}},"z":[1.5,-2,null,true]}"#
        );
        assert_eq!(
            args_hash(&json!({"amount": 5})),
            "7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf"
        );
    }
}
