//! A session's conversation as the history of a run, and what the run
//! added to it.
//!
//! A run is given the stored conversation (without standing instructions,
//! compacted) and returns its transcript: the standing instruction, that
//! history, the run's input and what the run added. When that transcript
//! still starts with the history as given, and nothing in what was added
//! would be dropped or cut (no standing instruction, nothing the reducer
//! would shorten), the session is stored by appending what the run added;
//! otherwise it is rewritten whole, as [`BuiltAgent::kept_history`] makes it. A
//! middleware that changes the history in place, keeping its length, is
//! not told apart: the session keeps the messages as they were stored.
//!
//! A conversation the session manager kept comes as the transcript of the
//! run that wrote it ([`Transcript`]: its standing instruction first), and
//! the next run is given that transcript whole
//! (`RunRequest::leading_instruction`): the harness continues it in place
//! when the instruction is still its own, so no call copies the
//! conversation or removes anything from its front.

use tinyagents_core::Message;

use crate::agent::BuiltAgent;
use crate::compaction::HistoryReducer;
use crate::session::Transcript;

fn is_instruction(message: &Message) -> bool {
    matches!(message, Message::System { .. })
}

/// The conversation of `stored` as a run's history under `reducer`:
/// without standing instructions (skipped when `clean`: a conversation this
/// crate stored has none), compacted; `true` when that changed it. What
/// comes before the conversation in `stored` stays, unless compaction cuts
/// the conversation (then the result is the conversation alone).
pub(crate) fn run_history(
    reducer: Option<&dyn HistoryReducer>,
    mut stored: Transcript,
    clean: bool,
) -> (Transcript, bool) {
    let mut changed = false;
    if !clean {
        let (start, before) = (stored.start, stored.messages.len());
        let mut index = 0;
        stored.messages.retain(|m| {
            let keep = index < start || !is_instruction(m);
            index += 1;
            keep
        });
        changed = stored.messages.len() != before;
    }
    match reducer {
        Some(reducer) if !reducer.is_reduced(stored.conversation()) => {
            let reduced = reducer.reduce(stored.into_conversation());
            (Transcript::conversation_only(reduced), true)
        }
        _ => (stored, changed),
    }
}

/// The index in `messages` (a run's transcript) of the first message the
/// session does not hold yet, when the run was given `given` messages of
/// history, of which the first `stored` are the stored conversation, then
/// `input`, and storing the transcript means appending what follows the
/// stored part; `None` when it must be rewritten whole.
pub(crate) fn appended_from(
    reducer: Option<&dyn HistoryReducer>,
    messages: &[Message],
    stored: usize,
    given: usize,
    input: &str,
) -> Option<usize> {
    // A stored conversation holds no standing instruction, so a leading
    // one is the run's own.
    let instruction = usize::from(messages.first().is_some_and(is_instruction));
    match messages.get(instruction + given) {
        Some(Message::User { content }) if content == input => {}
        _ => return None,
    }
    let start = instruction + stored;
    let conversation = messages.get(instruction..)?;
    let added = messages.get(start..)?;
    let reduced = reducer.is_none_or(|r| r.is_reduced(conversation));
    (reduced && !added.iter().any(is_instruction)).then_some(start)
}

impl BuiltAgent {
    /// [`run_history`] under this agent's compaction.
    pub(crate) fn run_history(&self, stored: Transcript, clean: bool) -> (Transcript, bool) {
        run_history(self.reducer.as_deref(), stored, clean)
    }

    /// [`appended_from`] under this agent's compaction.
    pub(crate) fn appended_from(
        &self,
        messages: &[Message],
        stored: usize,
        given: usize,
        input: &str,
    ) -> Option<usize> {
        appended_from(self.reducer.as_deref(), messages, stored, given, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::KeepLastMessages;

    fn transcript(history: &[&str], input: &str, added: &[&str]) -> Vec<Message> {
        let mut messages = vec![Message::system("sys")];
        for (i, text) in history.iter().enumerate() {
            messages.push(if i % 2 == 0 {
                Message::user(*text)
            } else {
                Message::assistant(*text)
            });
        }
        messages.push(Message::user(input));
        messages.extend(added.iter().map(|t| Message::assistant(*t)));
        messages
    }

    #[test]
    fn an_intact_transcript_appends_after_the_stored_part() {
        let messages = transcript(&["q1", "a1"], "q2", &["a2"]);
        assert_eq!(appended_from(None, &messages, 2, 2, "q2"), Some(3));
        assert_eq!(appended_from(None, &messages[1..], 2, 2, "q2"), Some(2));
        // Host history given after the stored part is new too.
        assert_eq!(appended_from(None, &messages, 1, 2, "q2"), Some(2));
    }

    #[test]
    fn a_changed_shape_an_instruction_or_a_cut_rewrites_whole() {
        let messages = transcript(&["q1", "a1"], "q2", &["a2"]);
        assert_eq!(appended_from(None, &messages, 2, 2, "other"), None);
        assert_eq!(appended_from(None, &messages, 1, 1, "q2"), None);
        let mut injected = messages.clone();
        injected.push(Message::system("late"));
        assert_eq!(appended_from(None, &injected, 2, 2, "q2"), None);
        let keep4 = KeepLastMessages::new(4);
        let keep3 = KeepLastMessages::new(3);
        assert_eq!(appended_from(Some(&keep4), &messages, 2, 2, "q2"), Some(3));
        assert_eq!(appended_from(Some(&keep3), &messages, 2, 2, "q2"), None);
    }

    /// `run_history` on a conversation alone, as vectors.
    fn history(
        reducer: Option<&dyn HistoryReducer>,
        stored: Vec<Message>,
        clean: bool,
    ) -> (Vec<Message>, bool) {
        let (history, changed) = run_history(reducer, Transcript::conversation_only(stored), clean);
        assert_eq!(history.start, 0);
        (history.messages, changed)
    }

    #[test]
    fn run_history_filters_and_compacts_and_says_so() {
        let stored = vec![Message::user("q1"), Message::assistant("a1")];
        assert_eq!(
            history(None, stored.clone(), false),
            (stored.clone(), false)
        );
        let mut dirty = stored.clone();
        dirty.insert(0, Message::system("old"));
        assert_eq!(history(None, dirty.clone(), false), (stored.clone(), true));
        assert!(
            !history(None, dirty.clone(), true).1,
            "a clean conversation is not filtered"
        );
        let keep1 = KeepLastMessages::new(1);
        assert_eq!(
            history(Some(&keep1), stored.clone(), true),
            (vec![Message::assistant("a1")], true)
        );
        let keep2 = KeepLastMessages::new(2);
        assert_eq!(history(Some(&keep2), stored.clone(), true), (stored, false));
    }

    #[test]
    fn run_history_keeps_what_leads_the_conversation_unless_compaction_cuts() {
        let led = || Transcript {
            messages: vec![
                Message::system("sys"),
                Message::user("q1"),
                Message::system("stray"),
                Message::assistant("a1"),
            ],
            start: 1,
        };
        let (filtered, changed) = run_history(None, led(), false);
        assert!(changed);
        assert_eq!(filtered.start, 1);
        assert_eq!(
            filtered.messages,
            [
                Message::system("sys"),
                Message::user("q1"),
                Message::assistant("a1")
            ]
        );
        let (kept, changed) = run_history(Some(&KeepLastMessages::new(3)), led(), true);
        assert_eq!((kept.start, kept.messages.len(), changed), (1, 4, false));
        let (cut, changed) = run_history(Some(&KeepLastMessages::new(1)), led(), true);
        assert_eq!(
            (cut.start, cut.messages, changed),
            (0, vec![Message::assistant("a1")], true)
        );
    }
}
