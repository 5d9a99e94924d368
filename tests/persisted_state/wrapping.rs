//! How many levels each persisted form wraps around a model-issued call's
//! arguments, measured: the deepest arguments each form still reads back
//! with plain `serde_json::from_str`, against serde_json's own limit.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinyagents::{
    core::CallId, core::MAX_ARGUMENT_DEPTH, core::Message, core::SessionId, core::ToolCall,
    harness::SealedRun, harness::SuspendedRun, harness::TurnEntry, orchestrator::SessionRecord,
};

use crate::{nested_value, suspended_deploy};

/// The levels kept free above the deepest wrapping, for formats to grow.
const MARGIN: usize = 20;

/// The deepest argument nesting for which `form(arguments)` serialises and
/// reads back, equal, with plain serde_json (default recursion limit).
fn deepest_readable<T>(form: impl Fn(Value) -> T) -> usize
where
    T: Serialize + DeserializeOwned + PartialEq,
{
    (0..=140)
        .take_while(|&depth| {
            let value = form(nested_value(depth));
            let text = serde_json::to_string(&value).unwrap();
            serde_json::from_str::<T>(&text).is_ok_and(|back| back == value)
        })
        .last()
        .unwrap()
}

/// An assistant message issuing one call with `arguments`.
fn assistant(arguments: Value) -> Message {
    Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall::new(CallId::new("p1"), "echo", arguments)],
        reasoning: None,
    }
}

/// `suspended` with its pending call's arguments replaced.
fn with_pending(mut suspended: SuspendedRun, arguments: Value) -> SuspendedRun {
    for entry in &mut suspended.turn {
        if let TurnEntry::Pending { pending } = entry {
            pending.call.arguments = arguments.clone();
        }
    }
    suspended
}

/// `suspended` with one more transcript message issuing a call with
/// `arguments` (the form a ledger checkpoint has too: it is the same
/// struct).
fn with_transcript_call(mut suspended: SuspendedRun, arguments: Value) -> SuspendedRun {
    suspended.state.messages.push(assistant(arguments));
    suspended
}

/// Measured wrappings: serde_json reads 127 levels; a suspended run's
/// pending call wraps its arguments in 5, its transcript (and so a ledger
/// checkpoint, the same struct, and a sealed run, whose payload is a
/// string) in 6, a session record in 5 and a session's stored messages in
/// 4; the max plus the deepest wrapping leaves the margin free.
#[tokio::test]
async fn i11_5_every_persisted_form_wraps_arguments_at_most_6_levels_leaving_room_for_the_max() {
    let (_, _, suspended) = suspended_deploy().await;
    let limit = deepest_readable(|v| v);
    assert_eq!(limit, 127, "serde_json's default recursion limit");
    let wrapping = |deepest: usize| limit - deepest;

    let pending = deepest_readable(|v| with_pending(suspended.clone(), v));
    let transcript = deepest_readable(|v| with_transcript_call(suspended.clone(), v));
    let key = [1u8; 32];
    let sealed = (0..=140)
        .take_while(|&depth| {
            let run = with_transcript_call(suspended.clone(), nested_value(depth));
            let text = serde_json::to_string(&run.seal(&key).unwrap()).unwrap();
            serde_json::from_str::<SealedRun>(&text)
                .ok()
                .and_then(|sealed| sealed.open(&key).ok())
                .is_some_and(|opened| opened == run)
        })
        .last()
        .unwrap();
    let record = deepest_readable(|v| SessionRecord {
        messages: vec![assistant(v)],
        ..SessionRecord::new(SessionId::new("s"))
    });
    let messages = deepest_readable(|v| vec![assistant(v)]);

    let measured = [
        ("suspended run, pending call", wrapping(pending)),
        (
            "suspended run / checkpoint, transcript",
            wrapping(transcript),
        ),
        ("sealed run", wrapping(sealed)),
        ("session record", wrapping(record)),
        ("session's stored messages", wrapping(messages)),
    ];
    assert_eq!(
        measured.map(|(_, levels)| levels),
        [5, 6, 6, 5, 4],
        "{measured:?}"
    );
    let deepest = measured.iter().map(|(_, levels)| *levels).max().unwrap();
    assert!(
        MAX_ARGUMENT_DEPTH + deepest + MARGIN <= limit,
        "the max {MAX_ARGUMENT_DEPTH} + wrapping {deepest} + margin {MARGIN} fit in {limit}"
    );
}
