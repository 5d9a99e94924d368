//! The transcript a run opens with: the standing instruction, the earlier
//! conversation, the input.
//!
//! A caller that hands back an earlier run's transcript
//! ([`RunRequest::with_transcript`](crate::RunRequest::with_transcript))
//! has its `Vec` reused, grown in place, so a conversation continued call
//! after call is not copied per call. The leading instruction is checked,
//! never trusted: only the harness's own system prompt stays first.

use tinyagents_core::Message;

/// The opening transcript of a run of a harness whose standing instruction
/// is `prompt`, continuing `history` (led by an instruction slot when
/// `leading_instruction`) with `input`, and how many tool calls the earlier
/// messages issued (this run's calls number on after them, so no id
/// repeats within the transcript).
pub(crate) fn opening(
    prompt: Option<&str>,
    mut history: Vec<Message>,
    leading_instruction: bool,
    input: String,
) -> (Vec<Message>, u64) {
    // Whether the history is led by an instruction, and whether that is
    // this harness's own.
    let leading = match history.first() {
        Some(Message::System { content }) if leading_instruction => {
            Some(prompt == Some(content.as_str()))
        }
        _ => None,
    };
    let mut messages = match (leading, prompt) {
        // The caller's instruction is this harness's: the transcript as it is.
        (Some(true), _) => history,
        // Another instruction: this harness's own takes its place.
        (Some(false), Some(prompt)) => {
            if let Some(first) = history.first_mut() {
                *first = Message::system(prompt);
            }
            history
        }
        // Another instruction, and this harness has none.
        (Some(false), None) => {
            history.drain(..1);
            history
        }
        // All conversation, and nothing to put before it.
        (None, None) => history,
        (None, Some(prompt)) => {
            let mut messages = Vec::with_capacity(history.len() + 2);
            messages.push(Message::system(prompt));
            messages.append(&mut history);
            messages
        }
    };
    // Calls of an earlier conversation keep their ids; this run's calls
    // number on from them.
    let earlier_calls = messages
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.len() as u64,
            _ => 0,
        })
        .sum();
    messages.push(Message::user(input));
    (messages, earlier_calls)
}
