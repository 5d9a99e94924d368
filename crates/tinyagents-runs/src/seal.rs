//! The store's seals: an HMAC-SHA256 over each part of a run that decides
//! what may run (the record's identity, the suspended state, each waiting
//! call's binding and each decision), so an edit made outside the store is
//! refused before anything of it is used.
//!
//! The key is the host's ([`SealKey::from_bytes`], a key file with
//! [`SealKey::load_or_create`]), or, when the host gives none, one the
//! store generates and keeps in itself. With the store's own key, a seal
//! detects edits made without this code (a hand-edited row, a row copied
//! from another store); only a key kept outside the store also stops
//! someone who can write to it and read the key.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tinyagents_core::hex;
use tinyagents_harness::{SEAL_KEY_MIN_BYTES, SealedRun, SuspendedRun};

use crate::error::{RunStoreError, RunStoreResult};

type HmacSha256 = Hmac<Sha256>;

/// What every seal of the run store covers first, so a tag made for
/// another purpose with the same key never checks out here.
const CONTEXT: &[u8] = b"tinyagents run store\0";

/// The key a run store seals with (at least 32 bytes).
#[derive(Clone)]
pub struct SealKey(Vec<u8>);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl SealKey {
    /// A key of `bytes` (at least [`SEAL_KEY_MIN_BYTES`]).
    pub fn from_bytes(bytes: &[u8]) -> RunStoreResult<Self> {
        if bytes.len() < SEAL_KEY_MIN_BYTES {
            return Err(RunStoreError::Key {
                detail: format!(
                    "has {} bytes; a key needs at least {SEAL_KEY_MIN_BYTES}",
                    bytes.len()
                ),
                source: None,
            });
        }
        Ok(Self(bytes.to_vec()))
    }

    /// 32 random bytes from the operating system.
    pub fn generate() -> RunStoreResult<Self> {
        let mut bytes = vec![0_u8; SEAL_KEY_MIN_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| RunStoreError::Key {
            detail: format!("could not be generated: {e}"),
            source: Some(e.into()),
        })?;
        Ok(Self(bytes))
    }

    /// The key in the file at `path` (its bytes, at least 32), made with
    /// 32 random bytes (readable by its owner only) when it is missing.
    pub fn load_or_create(path: &Path) -> RunStoreResult<Self> {
        let shown = path.display();
        match std::fs::read(path) {
            Ok(bytes) => Self::from_bytes(&bytes).map_err(|e| RunStoreError::Key {
                detail: format!("in {shown}: {e}"),
                source: Some(e.into()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate()?;
                write_private(path, &key.0).map_err(|e| RunStoreError::Key {
                    detail: format!("could not be written to {shown}: {e}"),
                    source: Some(e.into()),
                })?;
                Ok(key)
            }
            Err(e) => Err(RunStoreError::Key {
                detail: format!("could not be read from {shown}: {e}"),
                source: Some(e.into()),
            }),
        }
    }

    /// The key's bytes, for a backend that keeps its own key.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The seal of `parts`, in order: lowercase hex. Each part is
    /// length-prefixed, so no two lists of parts give the same message.
    pub fn seal(&self, parts: &[&[u8]]) -> String {
        // An empty seal never verifies: fail closed.
        self.mac(parts)
            .map(|mac| hex::encode(&mac.finalize().into_bytes()))
            .unwrap_or_default()
    }

    /// Whether `tag` is the seal of `parts` (checked in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &str) -> bool {
        match (self.mac(parts), hex::decode(tag)) {
            (Some(mac), Some(tag)) => mac.verify_slice(&tag).is_ok(),
            _ => false,
        }
    }

    /// Seals a suspended state (the harness's [`SealedRun`]).
    pub fn seal_state(&self, state: &SuspendedRun) -> RunStoreResult<SealedRun> {
        state.seal(&self.0).map_err(|e| RunStoreError::Unreadable {
            run: state.run_id.clone(),
            what: "suspended state",
            detail: e.to_string(),
            source: Some(e.into()),
        })
    }

    /// Opens a sealed state of `run`: refused when edited, sealed with
    /// another key, or a state of another run.
    pub fn open_state(
        &self,
        run: &tinyagents_core::RunId,
        sealed: &SealedRun,
    ) -> RunStoreResult<SuspendedRun> {
        let state = sealed.open(&self.0).map_err(|_| RunStoreError::Tampered {
            run: run.clone(),
            what: "suspended state".to_owned(),
        })?;
        if state.run_id != *run {
            return Err(RunStoreError::Tampered {
                run: run.clone(),
                what: format!("suspended state (it is run {}'s)", state.run_id),
            });
        }
        state
            .check_format()
            .map_err(|e| RunStoreError::Unreadable {
                run: run.clone(),
                what: "suspended state",
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
        Ok(state)
    }

    /// HMAC-SHA256 keyed with this key over the context and the framed
    /// parts. `None` only if HMAC refused the key, which it never does for
    /// any length: callers then fail closed.
    fn mac(&self, parts: &[&[u8]]) -> Option<HmacSha256> {
        let mut mac = HmacSha256::new_from_slice(&self.0).ok()?;
        mac.update(CONTEXT);
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        Some(mac)
    }
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_checks_out_only_for_the_same_parts_and_key() {
        let key = SealKey::from_bytes(&[7; 32]).unwrap();
        let tag = key.seal(&[b"run", b"p1"]);
        assert!(key.verify(&[b"run", b"p1"], &tag));
        assert!(!key.verify(&[b"run", b"p2"], &tag));
        assert!(!key.verify(&[b"runp", b"1"], &tag), "parts are framed");
        assert!(!key.verify(&[b"run", b"p1"], &tag.to_uppercase()));
        let other = SealKey::from_bytes(&[8; 32]).unwrap();
        assert!(!other.verify(&[b"run", b"p1"], &tag));
        assert!(SealKey::from_bytes(&[1; 31]).is_err());
    }

    #[test]
    fn a_key_file_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seal.key");
        let made = SealKey::load_or_create(&path).unwrap();
        let read = SealKey::load_or_create(&path).unwrap();
        assert_eq!(made.as_bytes(), read.as_bytes());
        std::fs::write(&path, b"short").unwrap();
        let error = SealKey::load_or_create(&path).unwrap_err();
        assert!(error.to_string().contains("at least 32"), "{error}");
    }
}
