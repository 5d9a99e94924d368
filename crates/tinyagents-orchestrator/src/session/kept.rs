//! The conversations a `SessionManager` wrote last, kept in memory for the
//! next call on the same session, so that call neither reads nor decodes
//! the conversation again. A kept conversation is handed out only when the
//! store's stamp still equals the one its write returned; it is taken out
//! for the call (moved, not copied) and put back by the next write.
//!
//! It is kept as the run that wrote it left it, standing instruction first
//! ([`Transcript`]): the next run continues that `Vec` in place, so nothing
//! is copied or removed from its front per call.

use std::collections::HashMap;

use tinyagents_core::{Message, SessionId};

use super::{SessionRecord, SessionStamp};

/// A session's conversation as a run's transcript holds it: `messages`
/// from `start` on is the conversation; what comes before (the standing
/// instruction of the run that wrote it, at most one message) is never
/// stored.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    pub(crate) messages: Vec<Message>,
    pub(crate) start: usize,
}

impl Transcript {
    /// `conversation` alone, nothing before it.
    pub(crate) fn conversation_only(conversation: Vec<Message>) -> Self {
        Self {
            messages: conversation,
            start: 0,
        }
    }

    /// The conversation.
    pub(crate) fn conversation(&self) -> &[Message] {
        self.messages.get(self.start..).unwrap_or(&[])
    }

    /// The conversation, without what came before it (moves the messages
    /// when there was something before).
    pub(crate) fn into_conversation(mut self) -> Vec<Message> {
        self.messages.drain(..self.start.min(self.messages.len()));
        self.messages
    }
}

/// At most this many conversations are kept (per store)...
pub(crate) const KEPT_SESSIONS: usize = 256;

/// ...and at most this many messages in all; a longer conversation is not
/// kept (its next call reads it from the store).
pub(crate) const KEPT_MESSAGES: usize = 100_000;

struct Entry {
    stamp: SessionStamp,
    /// The record, its conversation moved out into `transcript`.
    record: SessionRecord,
    transcript: Transcript,
    used: u64,
}

/// Kept conversations, the least recently kept evicted first.
#[derive(Default)]
pub(crate) struct Kept {
    entries: HashMap<SessionId, Entry>,
    messages: usize,
    clock: u64,
}

impl Kept {
    /// Takes the conversation kept for `id`, with the stamp it was kept
    /// under and its record (whose `messages` are empty: the conversation
    /// is the transcript's).
    pub(crate) fn take(
        &mut self,
        id: &SessionId,
    ) -> Option<(SessionStamp, SessionRecord, Transcript)> {
        let entry = self.entries.remove(id)?;
        self.messages -= entry.transcript.messages.len();
        Some((entry.stamp, entry.record, entry.transcript))
    }

    /// Keeps `transcript` as the conversation of `record` (whose own
    /// `messages` are dropped), stored under `stamp`, evicting the oldest
    /// entries past the limits.
    pub(crate) fn put(
        &mut self,
        stamp: SessionStamp,
        mut record: SessionRecord,
        transcript: Transcript,
    ) {
        record.messages = Vec::new();
        if let Some(old) = self.entries.remove(&record.id) {
            self.messages -= old.transcript.messages.len();
        }
        let size = transcript.messages.len();
        if size > KEPT_MESSAGES {
            return;
        }
        while self.entries.len() >= KEPT_SESSIONS || self.messages + size > KEPT_MESSAGES {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.take(&oldest);
        }
        self.clock += 1;
        self.messages += size;
        self.entries.insert(
            record.id.clone(),
            Entry {
                stamp,
                record,
                transcript,
                used: self.clock,
            },
        );
    }

    /// How many conversations are kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use tinyagents_core::Message;

    use super::*;

    fn record(id: &str) -> SessionRecord {
        SessionRecord::new(id.into())
    }

    fn transcript(messages: usize) -> Transcript {
        Transcript {
            messages: vec![Message::user("m"); messages],
            start: 0,
        }
    }

    fn stamp(mark: u64) -> SessionStamp {
        SessionStamp { revision: 1, mark }
    }

    #[test]
    fn takes_what_was_put_once_and_evicts_the_oldest_past_the_limits() {
        let mut kept = Kept::default();
        kept.put(stamp(1), record("a"), transcript(2));
        assert_eq!(
            kept.take(&"a".into())
                .map(|(s, r, t)| (s.mark, r.id, t.messages.len())),
            Some((1, "a".into(), 2))
        );
        assert!(kept.take(&"a".into()).is_none());

        for i in 0..KEPT_SESSIONS {
            kept.put(stamp(i as u64), record(&format!("s{i}")), transcript(1));
        }
        kept.put(stamp(9999), record("last"), transcript(1));
        assert_eq!(kept.len(), KEPT_SESSIONS);
        assert!(kept.take(&"s0".into()).is_none(), "the oldest went");
        assert!(kept.take(&"s1".into()).is_some());

        kept.put(stamp(1), record("big"), transcript(KEPT_MESSAGES - 10));
        assert!(kept.messages <= KEPT_MESSAGES);
        assert!(kept.take(&"big".into()).is_some());
        kept.put(stamp(1), record("too-big"), transcript(KEPT_MESSAGES + 1));
        assert!(kept.take(&"too-big".into()).is_none());
    }

    #[test]
    fn a_transcript_holds_its_conversation_after_start() {
        let led = Transcript {
            messages: vec![Message::system("sys"), Message::user("q")],
            start: 1,
        };
        assert_eq!(led.conversation(), [Message::user("q")]);
        assert_eq!(led.into_conversation(), [Message::user("q")]);
        let plain = Transcript::conversation_only(vec![Message::user("q")]);
        assert_eq!(plain.conversation(), [Message::user("q")]);
    }
}
