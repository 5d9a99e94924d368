//! The conversations a `SessionManager` wrote last, kept in memory for the
//! next call on the same session, so that call neither reads nor decodes
//! the conversation again. A kept conversation is handed out only when the
//! store's stamp still equals the one its write returned; it is taken out
//! for the call (moved, not copied) and put back by the next write.

use std::collections::HashMap;

use tinyagents_core::SessionId;

use super::{SessionRecord, SessionStamp};

/// At most this many conversations are kept (per store)...
pub(crate) const KEPT_SESSIONS: usize = 256;

/// ...and at most this many messages in all; a longer conversation is not
/// kept (its next call reads it from the store).
pub(crate) const KEPT_MESSAGES: usize = 100_000;

struct Entry {
    stamp: SessionStamp,
    record: SessionRecord,
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
    /// under.
    pub(crate) fn take(&mut self, id: &SessionId) -> Option<(SessionStamp, SessionRecord)> {
        let entry = self.entries.remove(id)?;
        self.messages -= entry.record.messages.len();
        Some((entry.stamp, entry.record))
    }

    /// Keeps `record`, stored under `stamp`, evicting the oldest entries
    /// past the limits.
    pub(crate) fn put(&mut self, stamp: SessionStamp, record: SessionRecord) {
        if let Some(old) = self.entries.remove(&record.id) {
            self.messages -= old.record.messages.len();
        }
        let size = record.messages.len();
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

    fn record(id: &str, messages: usize) -> SessionRecord {
        SessionRecord {
            messages: vec![Message::user("m"); messages],
            ..SessionRecord::new(id.into())
        }
    }

    fn stamp(mark: u64) -> SessionStamp {
        SessionStamp { revision: 1, mark }
    }

    #[test]
    fn takes_what_was_put_once_and_evicts_the_oldest_past_the_limits() {
        let mut kept = Kept::default();
        kept.put(stamp(1), record("a", 2));
        assert_eq!(
            kept.take(&"a".into())
                .map(|(s, r)| (s.mark, r.messages.len())),
            Some((1, 2))
        );
        assert!(kept.take(&"a".into()).is_none());

        for i in 0..KEPT_SESSIONS {
            kept.put(stamp(i as u64), record(&format!("s{i}"), 1));
        }
        kept.put(stamp(9999), record("last", 1));
        assert_eq!(kept.len(), KEPT_SESSIONS);
        assert!(kept.take(&"s0".into()).is_none(), "the oldest went");
        assert!(kept.take(&"s1".into()).is_some());

        kept.put(stamp(1), record("big", KEPT_MESSAGES - 10));
        assert!(kept.messages <= KEPT_MESSAGES);
        assert!(kept.take(&"big".into()).is_some());
        kept.put(stamp(1), record("too-big", KEPT_MESSAGES + 1));
        assert!(kept.take(&"too-big".into()).is_none());
    }
}
