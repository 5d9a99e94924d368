//! Sealing a suspended run: an HMAC-SHA256 over its exact JSON text, so a
//! host that keeps suspended runs outside its trust boundary detects any
//! edit before the harness reads a byte of them.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tinyagents_core::{TinyAgentsError, hex};

use crate::run::SuspendedRun;

/// The version of [`SealedRun`]'s serialised form.
pub const SEALED_RUN_FORMAT: u32 = 1;

/// The shortest key [`SuspendedRun::seal`] and [`SealedRun::open`] accept,
/// in bytes: HMAC-SHA256's output length, so the key is no weaker than
/// the tag.
pub const SEAL_KEY_MIN_BYTES: usize = 32;

/// What the MAC covers before the format and the payload, so a tag made
/// for another purpose with the same key never opens a sealed run.
const CONTEXT: &[u8] = b"tinyagents sealed suspended run\0";

type HmacSha256 = Hmac<Sha256>;

/// A [`SuspendedRun`] with a MAC, as a host keeps it where others can edit
/// it (serialises with serde).
///
/// Use it when suspended runs leave the host's trust boundary: a database
/// or a queue other parties can write to, a browser, a ticket system. Seal
/// with [`SuspendedRun::seal`] when the run suspends, store the
/// `SealedRun`, and [`open`](SealedRun::open) it with the same key before
/// [`resume`](crate::AgentHarness::resume): any edit of the payload, the
/// format or the MAC, or another key, is refused and nothing of the
/// payload is parsed.
///
/// What it does not do: it does not encrypt (the payload is the run's
/// plain JSON text, readable by whoever holds the `SealedRun`), and it
/// does not stop the same sealed state from being opened and resumed
/// twice: single use of an approval is the harness's and the ledger's job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedRun {
    /// [`SEALED_RUN_FORMAT`] when sealed.
    pub format: u32,
    /// The exact JSON text of the [`SuspendedRun`] (a string, so the MAC
    /// covers the very bytes that are read back and adds no nesting).
    pub payload: String,
    /// HMAC-SHA256 over a fixed context, the format (4 bytes, big-endian)
    /// and the payload's bytes, in lowercase hex (64 characters).
    pub mac: String,
}

impl SuspendedRun {
    /// Seals this run with `key` (at least [`SEAL_KEY_MIN_BYTES`] bytes).
    /// See [`SealedRun`] for when to and what it does not do.
    pub fn seal(&self, key: &[u8]) -> Result<SealedRun, TinyAgentsError> {
        let mut mac = keyed(key)?;
        let payload = serde_json::to_string(self).map_err(|e| TinyAgentsError::SealEncode {
            run: self.run_id.clone(),
            source: e.into(),
        })?;
        feed(&mut mac, SEALED_RUN_FORMAT, &payload);
        Ok(SealedRun {
            format: SEALED_RUN_FORMAT,
            payload,
            mac: hex::encode(&mac.finalize().into_bytes()),
        })
    }
}

impl SealedRun {
    /// Checks the MAC with `key`, in constant time, and only then reads the
    /// suspended run. Refuses a short key, and a sealed run whose payload,
    /// format or MAC was edited or that another key sealed.
    pub fn open(&self, key: &[u8]) -> Result<SuspendedRun, TinyAgentsError> {
        let mut mac = keyed(key)?;
        feed(&mut mac, self.format, &self.payload);
        let tag = hex::decode(&self.mac).ok_or_else(altered)?;
        mac.verify_slice(&tag).map_err(|_| altered())?;
        if self.format != SEALED_RUN_FORMAT {
            return Err(TinyAgentsError::State(format!(
                "sealed run has format {}, this version opens format {SEALED_RUN_FORMAT}",
                self.format
            )));
        }
        serde_json::from_str(&self.payload)
            .map_err(|e| TinyAgentsError::SealedPayload { source: e.into() })
    }
}

/// An HMAC keyed with `key`, refusing keys shorter than the minimum.
fn keyed(key: &[u8]) -> Result<HmacSha256, TinyAgentsError> {
    if key.len() < SEAL_KEY_MIN_BYTES {
        return Err(TinyAgentsError::Config(format!(
            "a sealing key must be at least {SEAL_KEY_MIN_BYTES} bytes; this one has {}",
            key.len()
        )));
    }
    // HMAC takes keys of any length; the error is unreachable, and mapped
    // rather than unwrapped.
    HmacSha256::new_from_slice(key).map_err(|e| {
        TinyAgentsError::Config(format!("the sealing key was refused by HMAC-SHA256: {e}"))
    })
}

/// The message the MAC covers: the context, the format, the payload. The
/// first two have fixed lengths, so no two inputs give the same message.
fn feed(mac: &mut HmacSha256, format: u32, payload: &str) {
    mac.update(CONTEXT);
    mac.update(&format.to_be_bytes());
    mac.update(payload.as_bytes());
}

fn altered() -> TinyAgentsError {
    TinyAgentsError::State(
        "sealed run was altered or sealed with another key: its MAC does not match, \
         and nothing of it was read"
            .to_owned(),
    )
}
