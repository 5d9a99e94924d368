//! Sealing: `SuspendedRun::seal(key)` and `SealedRun::open(key)`, an
//! HMAC-SHA256 over the run's exact JSON text.

use proptest::prelude::*;
use tinyagents::prelude::*;
use tinyagents::{
    harness::SEAL_KEY_MIN_BYTES, harness::SEALED_RUN_FORMAT, harness::SealedRun,
    harness::SuspendedRun,
};
use tinyagents_tests::resume_collecting;

use crate::{answer, suspended_deploy};

const KEY: [u8; 32] = [7; 32];

const ALTERED: &str = "state error: sealed run was altered or sealed with another key: \
                       its MAC does not match, and nothing of it was read";

fn assert_altered(sealed: &SealedRun, key: &[u8], what: &str) {
    match sealed.open(key) {
        Err(error @ TinyAgentsError::State(_)) => {
            assert_eq!(error.to_string(), ALTERED, "{what}");
        }
        other => panic!("{what}: expected the altered error, got {other:?}"),
    }
}

/// A sealed run survives JSON unchanged: opened with its key, it is the run
/// that was sealed, and that run resumes.
#[tokio::test]
async fn i11_seal_round_trips_through_json_to_an_equal_suspended_run_that_resumes() {
    let (harness, deploy, suspended) = suspended_deploy().await;
    let sealed = suspended.seal(&KEY).unwrap();
    assert_eq!(sealed.format, SEALED_RUN_FORMAT);
    assert_eq!(sealed.payload, serde_json::to_string(&suspended).unwrap());
    assert_eq!(sealed.mac.len(), 64);
    assert!(
        sealed
            .mac
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{}",
        sealed.mac
    );

    let stored = serde_json::to_string(&sealed).unwrap();
    let read: SealedRun = serde_json::from_str(&stored).unwrap();
    assert_eq!(read, sealed);
    let opened = read.open(&KEY).unwrap();
    assert_eq!(opened, suspended);

    let decision = opened.pending().next().unwrap().approve();
    let (resumed, _) = resume_collecting(&harness, opened, &[decision]).await;
    let resumed = resumed.unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(deploy.seen(), [serde_json::json!({"env": "prod"})]);
    assert_eq!(
        answer(&resumed.messages, "p1"),
        Some(("ran deploy".into(), false))
    );
}

/// Every single-byte edit of the payload, and of the MAC (another hex
/// digit, or the same digit in upper case), is refused as altered.
#[tokio::test]
async fn i11_seal_any_single_edited_byte_of_the_payload_or_the_mac_is_refused_as_altered() {
    let (_, _, suspended) = suspended_deploy().await;
    let sealed = suspended.seal(&KEY).unwrap();
    assert!(sealed.payload.is_ascii());
    for at in 0..sealed.payload.len() {
        let mut edited = sealed.clone();
        let mut bytes = edited.payload.into_bytes();
        bytes[at] = if bytes[at] == b'x' { b'y' } else { b'x' };
        edited.payload = String::from_utf8(bytes).unwrap();
        assert_altered(&edited, &KEY, &format!("payload byte {at}"));
    }
    for at in 0..sealed.mac.len() {
        let digit = sealed.mac.as_bytes()[at];
        let others = b"0123456789abcdefABCDEF"
            .iter()
            .filter(|&&d| d != digit)
            .copied();
        for other in others {
            let mut edited = sealed.clone();
            let mut bytes = edited.mac.into_bytes();
            bytes[at] = other;
            edited.mac = String::from_utf8(bytes).unwrap();
            assert_altered(
                &edited,
                &KEY,
                &format!("MAC byte {at} as {}", other as char),
            );
        }
    }
    assert_eq!(sealed.open(&KEY).unwrap(), suspended, "the original opens");
}

/// A changed format, another key, and a MAC cut short (or made longer) are
/// each refused as altered.
#[tokio::test]
async fn i11_seal_a_changed_format_another_key_or_a_truncated_mac_is_refused_as_altered() {
    let (_, _, suspended) = suspended_deploy().await;
    let sealed = suspended.seal(&KEY).unwrap();
    for format in [0, 2, u32::MAX] {
        let edited = SealedRun {
            format,
            ..sealed.clone()
        };
        assert_altered(&edited, &KEY, &format!("format {format}"));
    }
    assert_altered(&sealed, &[8; 32], "another key of the same length");
    assert_altered(&sealed, &[7; 33], "the key with one more byte");
    for keep in [0, 2, 32, 62, 63] {
        let edited = SealedRun {
            mac: sealed.mac[..keep].to_owned(),
            ..sealed.clone()
        };
        assert_altered(&edited, &KEY, &format!("MAC cut to {keep} digits"));
    }
    let longer = SealedRun {
        mac: format!("{}00", sealed.mac),
        ..sealed.clone()
    };
    assert_altered(&longer, &KEY, "MAC with a byte more");
}

/// Keys shorter than 32 bytes are refused, naming the key's length, when
/// sealing and when opening; 32 bytes are enough.
#[tokio::test]
async fn i11_seal_a_key_shorter_than_32_bytes_is_refused_naming_its_length() {
    let (_, _, suspended) = suspended_deploy().await;
    assert_eq!(SEAL_KEY_MIN_BYTES, 32);
    let sealed = suspended.seal(&KEY).unwrap();
    for len in [0, 16, 31] {
        let key = vec![7; len];
        let text = format!(
            "configuration error: a sealing key must be at least 32 bytes; this one has {len}"
        );
        match suspended.seal(&key) {
            Err(error @ TinyAgentsError::Config(_)) => assert_eq!(error.to_string(), text),
            other => panic!("sealing with {len} bytes: {other:?}"),
        }
        match sealed.open(&key) {
            Err(error @ TinyAgentsError::Config(_)) => assert_eq!(error.to_string(), text),
            other => panic!("opening with {len} bytes: {other:?}"),
        }
    }
    assert_eq!(sealed.open(&KEY).unwrap(), suspended);
}

/// A fixed suspended run, sealed, for the property test (built once).
fn sealed_json() -> &'static (SuspendedRun, String) {
    static SEALED: std::sync::OnceLock<(SuspendedRun, String)> = std::sync::OnceLock::new();
    SEALED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (_, _, suspended) = runtime.block_on(suspended_deploy());
        let text = serde_json::to_string(&suspended.seal(&KEY).unwrap()).unwrap();
        (suspended, text)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Flipping bits of any one byte of a stored sealed run never opens to
    /// another state: it does not parse, does not open, or opens to the
    /// very state that was sealed.
    #[test]
    fn i11_seal_flipping_any_byte_of_a_sealed_runs_json_never_opens_to_a_different_state(
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let (suspended, text) = sealed_json();
        let mut bytes = text.clone().into_bytes();
        let at = at.index(bytes.len());
        bytes[at] ^= mask;
        let Ok(sealed) = serde_json::from_slice::<SealedRun>(&bytes) else {
            return Ok(());
        };
        match sealed.open(&KEY) {
            Ok(opened) => prop_assert_eq!(&opened, suspended),
            Err(error) => prop_assert_eq!(error.to_string(), ALTERED),
        }
    }
}
