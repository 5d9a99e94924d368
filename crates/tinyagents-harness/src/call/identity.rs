//! A call's arguments hash: one rule for every origin.
//!
//! The hash is the ledger row's idempotency key, the tool's
//! `IdempotencyKey::args_hash`, and what a recovery compares a call met
//! again with. It is taken of the arguments as the tool receives them
//! (prepared), so two calls that would act differently never share a row.
//!
//! Where the run's redaction changes those arguments (they hold a secret),
//! a plain hash would let whoever reads the ledger test guesses of the
//! secret (a PIN, a card number), so the hash is keyed instead:
//! `keyed:` and HMAC-SHA-256 under a key this process draws once. Such a
//! call is never matched by another process: a model-issued one is not
//! replayed from its redacted copy anyway (it is answered from its row or
//! its tool, `replay_blocked`), and a nested one met again by a recovery
//! in another process is refused as recorded for another call, never
//! answered from a row it cannot be shown to match. Arguments redaction
//! leaves alone hash as they always have (`tinyagents_core::args_hash`),
//! so rows written before still match.

use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tinyagents_core::{args_hash, canonical_json};

use super::redact::Redaction;

/// The prefix of a keyed hash.
pub(crate) const KEYED: &str = "keyed:";

/// The hash of `arguments` (prepared, unredacted) under `redaction`.
pub(crate) fn call_hash(redaction: &Redaction, arguments: &Value) -> String {
    if redaction.is_active() && redaction.copy(arguments) != *arguments {
        return keyed_hash(arguments);
    }
    args_hash(arguments)
}

/// HMAC-SHA-256 of the canonical text under the process's key.
fn keyed_hash(arguments: &Value) -> String {
    let key = process_key();
    // Invariant: HMAC takes a key of any length, so this never fails.
    #[allow(clippy::expect_used)]
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(canonical_json(arguments).as_bytes());
    let digest = mac.finalize().into_bytes();
    format!("{KEYED}{}", tinyagents_core::hex::encode(&digest))
}

/// 32 bytes drawn once per process from the system's random source; if
/// that fails, from the standard library's per-process hash keys (also
/// drawn from the system), so the key is never a constant.
fn process_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            use std::hash::{BuildHasher, Hasher};
            for (i, chunk) in key.chunks_mut(8).enumerate() {
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write_usize(i);
                chunk.copy_from_slice(&hasher.finish().to_le_bytes());
            }
        }
        key
    })
}
