//! Identifiers: runs, calls, agents and sessions.
//!
//! A [`CallId`] is a path. The harness gives every model-issued call its own
//! id `p1`, `p2`, … (unique in the run), and a nested call extends its
//! parent's id: `p1/1`, `p1/1/1`. The provider's own id is kept beside it on
//! the [`ToolCall`](crate::ToolCall), so providers that repeat or omit ids
//! never collide.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps an existing identifier.
            pub fn new(id: impl AsRef<str>) -> Self {
                Self(Arc::from(id.as_ref()))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self::new(id)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(Arc::from(id))
            }
        }
    };
}

string_id!(
    /// Identifies one run of an agent. Unique per process unless the host
    /// supplies its own (for example to resume a persisted run).
    RunId
);
string_id!(
    /// Identifies an agent definition.
    AgentId
);
string_id!(
    /// Identifies a conversation session.
    SessionId
);

static RUN_COUNTER: AtomicU64 = AtomicU64::new(1);

impl RunId {
    /// A fresh run id, unique in this process and unlikely to collide across
    /// processes (it mixes the wall-clock time and the process id).
    pub fn generate() -> Self {
        let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self::from(format!("run-{:x}-{:x}-{n}", nanos, std::process::id()))
    }
}

/// The id of one tool call inside a run: `p<k>` for the k-th call the model
/// issued, and `<parent>/<n>` for the n-th nested call of a parent.
///
/// Ids of up to 22 bytes (every `p<k>`, and nested ids a few levels deep)
/// are kept inline: making, cloning and dropping one allocates nothing and
/// touches no reference count. Longer ids are shared (`Arc<str>`).
#[derive(Clone)]
pub struct CallId(Repr);

/// The longest id kept inline.
const INLINE: usize = 22;

/// A call id's text. Canonical: an id of at most [`INLINE`] bytes is always
/// `Inline`, so equal ids have equal representations. `Inline` bytes are
/// always UTF-8: they are copied from a `str`, cut from one at an ASCII
/// `/`, or written as `p`, `/` and ASCII digits.
#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<str>),
}

/// How many decimal digits `n` has (1 for 0, at most 20).
fn digit_count(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Writes the decimal digits of `n` into `out`, right-aligned: `out` is
/// [`digit_count`]`(n)` bytes long.
fn write_digits(out: &mut [u8], mut n: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

impl CallId {
    /// An id of at most [`INLINE`] bytes made of `parts`, one after another.
    fn inline(parts: &[&[u8]]) -> Self {
        let mut bytes = [0u8; INLINE];
        let mut len = 0;
        for part in parts {
            bytes[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        Self(Repr::Inline {
            len: len as u8,
            bytes,
        })
    }

    /// The id whose text is `id`.
    fn from_text(id: &str) -> Self {
        if id.len() <= INLINE {
            Self::inline(&[id.as_bytes()])
        } else {
            Self(Repr::Shared(Arc::from(id)))
        }
    }

    /// The id's text as bytes.
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(text) => text.as_bytes(),
        }
    }

    /// The id of the `index`-th model-issued call of a run (1-based): `p<index>`.
    pub fn model(index: u64) -> Self {
        // `p` and at most 20 digits: always inline, the digits written in
        // place.
        let len = 1 + digit_count(index);
        let mut bytes = [0u8; INLINE];
        bytes[0] = b'p';
        write_digits(&mut bytes[1..len], index);
        Self(Repr::Inline {
            len: len as u8,
            bytes,
        })
    }

    /// Wraps an id read back from storage or written by hand.
    pub fn new(id: impl AsRef<str>) -> Self {
        Self::from_text(id.as_ref())
    }

    /// The id of this call's `n`-th nested call (n counts from 1): `<self>/<n>`.
    pub fn child(&self, n: u32) -> Self {
        let count = digit_count(u64::from(n));
        if let Repr::Inline { len, bytes } = &self.0 {
            let at = usize::from(*len);
            let end = at + 1 + count;
            if end <= INLINE {
                // The parent's array, zero past its text, gets `/` and the
                // digits in place.
                let mut bytes = *bytes;
                bytes[at] = b'/';
                write_digits(&mut bytes[at + 1..end], u64::from(n));
                return Self(Repr::Inline {
                    len: end as u8,
                    bytes,
                });
            }
        }
        let mut digits = [0u8; 10];
        write_digits(&mut digits[..count], u64::from(n));
        let mut text = String::with_capacity(self.bytes().len() + 1 + count);
        text.push_str(self.as_str());
        text.push('/');
        // ASCII digits.
        text.extend(digits[..count].iter().map(|d| char::from(*d)));
        Self(Repr::Shared(Arc::from(text)))
    }

    /// The immediate parent of a nested call, `None` for a model-issued call.
    pub fn parent(&self) -> Option<Self> {
        let bytes = self.bytes();
        let slash = bytes.iter().rposition(|b| *b == b'/')?;
        Some(if slash <= INLINE {
            // A prefix cut at an ASCII byte is UTF-8.
            Self::inline(&[&bytes[..slash]])
        } else {
            Self(Repr::Shared(Arc::from(&self.as_str()[..slash])))
        })
    }

    /// The nesting level: 0 for a call the model issued, 1 for what its tool
    /// calls, and so on.
    pub fn depth(&self) -> u32 {
        // A call id is a short path; its segment count always fits in u32.
        u32::try_from(self.bytes().iter().filter(|b| **b == b'/').count()).unwrap_or(u32::MAX)
    }

    /// Whether this id names a nested call.
    pub fn is_nested(&self) -> bool {
        match &self.0 {
            // The whole array: zero past the text (see `Hash`), and a fixed
            // length the compiler unrolls (`contains` would call `memchr`).
            #[allow(clippy::manual_contains)]
            Repr::Inline { bytes, .. } => bytes.iter().any(|b| *b == b'/'),
            Repr::Shared(text) => text.as_bytes().contains(&b'/'),
        }
    }

    /// Whether this id names a call nested, at any depth, under `ancestor`
    /// (`p1/2` and `p1/2/1` under `p1`; not `p1` itself, nor `p10/1`).
    pub fn is_descendant_of(&self, ancestor: &CallId) -> bool {
        self.bytes()
            .strip_prefix(ancestor.bytes())
            .is_some_and(|rest| rest.first() == Some(&b'/'))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Inline bytes are UTF-8 (see `Repr`): the fallback is never taken.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Shared(text) => text,
        }
    }
}

impl PartialEq for CallId {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // Inline bytes are zero past the text (see `Hash`): the whole
            // arrays compare, without a call to `memcmp`.
            (Repr::Inline { len, bytes }, Repr::Inline { len: l, bytes: b }) => {
                len == l && bytes == b
            }
            _ => self.bytes() == other.bytes(),
        }
    }
}

impl Eq for CallId {}

impl std::hash::Hash for CallId {
    // Always inlined: a few instructions, called in every map lookup.
    #[inline(always)]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match &self.0 {
            // A short id (`p12/3`, most of them) is one word: its first 16
            // inline bytes, zero past its text (every `Repr::Inline` is
            // built zeroed), its length in the last byte. A text short
            // enough is always inline (`Repr::Shared` holds only texts
            // longer than `INLINE`), so equal ids make equal words.
            Repr::Inline { len, bytes } if *len < 16 => {
                let mut word = [0u8; 16];
                word.copy_from_slice(&bytes[..16]);
                word[15] = *len;
                state.write_u128(u128::from_le_bytes(word));
            }
            // As `str` hashes its text.
            _ => {
                state.write(self.bytes());
                state.write_u8(0xff);
            }
        }
    }
}

impl PartialOrd for CallId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CallId {
    /// The order of the ids' text (bytewise, as `str` orders).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl Serialize for CallId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CallId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;

        impl serde::de::Visitor<'_> for Text {
            type Value = CallId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a call id")
            }

            fn visit_str<E: serde::de::Error>(self, id: &str) -> Result<CallId, E> {
                Ok(CallId::from_text(id))
            }
        }

        deserializer.deserialize_str(Text)
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallId({:?})", self.as_str())
    }
}

impl From<&str> for CallId {
    fn from(id: &str) -> Self {
        Self::new(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_id_paths() {
        let p1 = CallId::model(1);
        assert_eq!(p1.as_str(), "p1");
        assert_eq!(p1.depth(), 0);
        assert_eq!(p1.parent(), None);
        let nested = p1.child(1).child(2);
        assert_eq!(nested.as_str(), "p1/1/2");
        assert_eq!(nested.depth(), 2);
        assert_eq!(nested.parent(), Some(CallId::new("p1/1")));
        assert!(nested.is_nested());
        assert!(!p1.is_nested());
        assert!(nested.is_descendant_of(&p1));
        assert!(nested.is_descendant_of(&p1.child(1)));
        assert!(!nested.is_descendant_of(&nested));
        assert!(!p1.is_descendant_of(&p1));
        assert!(!CallId::model(10).child(1).is_descendant_of(&p1));
        assert!(!p1.is_descendant_of(&nested));
    }

    #[test]
    fn call_ids_are_the_same_however_made() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |id: &CallId| {
            let mut h = DefaultHasher::new();
            id.hash(&mut h);
            h.finish()
        };
        let made = CallId::model(12).child(3);
        let parsed = CallId::new("p12/3");
        assert_eq!(made, parsed);
        assert_eq!(hash(&made), hash(&parsed));
        assert_eq!(CallId::model(u64::MAX).as_str(), "p18446744073709551615");
        assert_eq!(CallId::model(0).as_str(), "p0");
        // Past the inline length: shared, and still equal to a parsed copy.
        let mut long = CallId::model(123_456_789);
        let mut text = String::from("p123456789");
        for n in [4_000_000_000u32, 7, 1, 99] {
            long = long.child(n);
            text.push_str(&format!("/{n}"));
            assert_eq!(long.as_str(), text);
            assert_eq!(long, CallId::new(&text));
            assert_eq!(hash(&long), hash(&CallId::new(&text)));
        }
        assert_eq!(long.depth(), 4);
        let parent = long.parent();
        assert_eq!(
            parent.as_ref().map(CallId::as_str),
            Some("p123456789/4000000000/7/1")
        );
        assert_eq!(
            parent.as_ref().and_then(CallId::parent),
            Some(CallId::new("p123456789/4000000000/7"))
        );
        // Non-ASCII text written by hand survives both representations.
        for text in ["é/1", "ééééééééééééééééééééé/2"] {
            let id = CallId::new(text);
            assert_eq!(id.as_str(), text);
            assert_eq!(id.depth(), 1);
            assert_eq!(id.parent().map(|p| p.as_str().len()), text.find('/'));
        }
    }

    #[test]
    fn call_ids_order_and_serialize_as_text() {
        let mut ids = vec![
            CallId::new("p2"),
            CallId::model(10),
            CallId::model(1).child(1),
            CallId::new("p1"),
            CallId::new("p1/1/1/1/1/1/1/1/1/1/1/1/1"),
        ];
        ids.sort();
        let texts: Vec<&str> = ids.iter().map(CallId::as_str).collect();
        let mut expected = texts.clone();
        expected.sort_unstable();
        assert_eq!(texts, expected);
        for id in &ids {
            let json = serde_json::to_string(id).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", id.as_str()));
            let back: CallId = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&back, id);
            let from_value: CallId = serde_json::from_value(serde_json::json!(id.as_str()))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&from_value, id);
            assert_eq!(format!("{id:?}"), format!("CallId({:?})", id.as_str()));
        }
        let keyed: std::collections::HashMap<CallId, u8> =
            serde_json::from_str(r#"{"p1/2": 1}"#).unwrap_or_default();
        assert_eq!(keyed.get(&CallId::model(1).child(2)), Some(&1));
        assert!(serde_json::from_str::<CallId>("12").is_err());
    }

    proptest::proptest! {
        /// Equality, hashing and `is_nested` read the array of an inline
        /// id past its text (it is zero there): they must agree with the
        /// text however the id was made (a path built, parsed, cut to its
        /// parent, short or long enough to be shared).
        #[test]
        fn equality_hash_and_nesting_follow_the_text(
            root in 0u64..100_000_000_000,
            steps in proptest::collection::vec(0u32..5_000_000, 0..4),
            other in "[p0-9/]{1,30}",
        ) {
            use std::hash::BuildHasher;
            let hashers = (
                std::collections::hash_map::RandomState::new(),
                foldhash::fast::FixedState::default(),
            );
            let hash = |id: &CallId| (hashers.0.hash_one(id), hashers.1.hash_one(id));
            let mut built = CallId::model(root);
            for step in &steps {
                built = built.child(*step);
            }
            let text = built.as_str().to_owned();
            let parsed = CallId::new(&text);
            proptest::prop_assert_eq!(&built, &parsed);
            proptest::prop_assert_eq!(hash(&built), hash(&parsed));
            proptest::prop_assert_eq!(built.is_nested(), text.contains('/'));
            if let Some(parent) = built.parent() {
                let cut = &text[..text.rfind('/').unwrap_or_default()];
                proptest::prop_assert_eq!(&parent, &CallId::new(cut));
                proptest::prop_assert_eq!(hash(&parent), hash(&CallId::new(cut)));
                proptest::prop_assert_ne!(&parent, &built);
            }
            let other = CallId::new(&other);
            proptest::prop_assert_eq!(other == built, other.as_str() == text);
            proptest::prop_assert_eq!(other.is_nested(), other.as_str().contains('/'));
        }
    }

    #[test]
    fn run_ids_are_unique() {
        assert_ne!(RunId::generate(), RunId::generate());
    }
}
